"""Notebook 01 · Self-attention from scratch: the checkers of its five exercises.

- Exercise 1, attention weights: `check_attention_weights`, in `masked_attention`;
- Exercise 2, attention: `check_attention`, in `masked_attention`;
- Exercise 3, the causal mask: `check_causal_mask`, in `masked_attention`;
- Exercise 4, splitting and merging heads: `check_heads`, in `multi_head`;
- Exercise 5, multi-head attention: `check_multi_head_attention`, in `multi_head`.

The other modules hold the slips these checkers name, kept apart so each module stays
short: `attention_axes` (a 4-D heads round, the axes of a mask), `attention_slips`,
`softmax_mask_slips`, `weights_slips`, `causal_mask_slips` and `kept_buffers` (a causal
mask cut from a buffer of a fixed size, kept in a global, a list or a dict) for exercises 1-3;
`multi_head_slips`, `multi_head_order_slips` and `multi_head_merge_slips` for 4-5;
`scale_slips` (the scale 1 / sqrt(d): `torch.sqrt` of an int, sqrt(d) misread, multi-head
attention's scale forgotten or wrong) for 1, 2 and 5, `recorded_slips` (slips told apart
by the torch calls of a rerun: the backward NaN of an additive -inf or a clamped zero sum,
a layer created inside multi-head attention) for 2 and 5, `zero_scores` (an allowed score
of 0 taken for a masked key) and `score_clamps` (scores clamped, `clamp(-50, 50)`) for 2
and 5, `fitted_scales` (the scale fitted from the answer: a divisor per query such as
`q.norm(dim=-1)`, for 1, 2 and 5; any constant but sqrt(D_h) for 5), `own_parts` (torch's
fused attention, labnn's `masked_softmax` and `split_heads`, torch's causal mask, refused)
for 2-5, and
`other_sizes`, which runs both of 4-5 again with another head count and where every size
differs; `fresh_rounds` (a result kept between calls: cached by the shapes, `id()` or
`data_ptr()`, an output buffer) for 1, 2, 4 and 5.
"""

from labnn.exercises.self_attention.masked_attention import (
    check_attention, check_attention_weights, check_causal_mask)
from labnn.exercises.self_attention.multi_head import check_heads, check_multi_head_attention

__all__ = ["check_attention", "check_attention_weights", "check_causal_mask", "check_heads",
           "check_multi_head_attention"]
