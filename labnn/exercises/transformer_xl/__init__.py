"""Notebook 02 · Transformer-XL: the checkers of its five exercises.

- Exercise 1, updating the memory: `check_update_memory`, in `segment_memory`;
- Exercise 2, the segment mask: `check_segment_mask`, in `segment_memory`;
- Exercise 3, relative distances: `check_relative_distances`, in `relative_distances`;
- Exercise 4, the relative shift: `check_relative_shift`, in `relative_scores`;
- Exercise 5, the four relative terms: `check_relative_scores`, in `relative_scores`.

The slips they name beyond their own modules: `segment_memory_slips` (exercises 1-2),
`relative_score_slips` (biases on the wrong side, a missing term), `shift_column_slips` (a
shift that reads columns a constant off: the memory forgotten, M for T; or leaves the
memory's columns unshifted) and
`contiguity_slips` (the shift on a non-contiguous input), `shift_crash` (a shift that
raised), `shift_in_scores` (scores whose inline shift moved the position term to the wrong
keys: how far each row slid); `other_sizes` runs the shift and the scores again where every
size differs, so that a size written as a number fails by name, and all four where an axis
has size 1 (`T = 1`, the one-token step; `B = 1`), so that a `.squeeze()` fails by name,
and the shift and the scores with no memory (`S = T`); `more_inputs` asks for the masks and
the distances beyond the checks' small sizes (n = 1, a text within one segment, segments of
1, an n seen before, positions past int8's 127, n = 2050 with a memory of 2000, a memory of
2100) and names a mask that ignores an argument, or scores with inf where a query may
attend; `mask_slips` tells segments of mem_len, uint8 positions and a memory rounded up to
whole segments from lookalikes, and names masks that are views of one kept tensor and a
slice at a negative s - mem_len;
`exact_rounds` runs the shift on a row of 2100 (float32, bfloat16), compares float64 shifts
and scores at float64's precision, and names an input edited in place and a scale rounded
to an integer; `many_queries` runs the shift, the scores and the distances with 300 queries
and the memory update with 300 states, where an index in int8 or a flat index in int16
wraps (first in bfloat16: an empty memory made in float32 turns it float32);
`fresh_values` calls the memory update, the shift and the scores again with other values
of the same sizes, then on the same tensors refilled in place, so that a result or
an output buffer kept between calls is named (and the memory update with a mem that
requires grad, so that a memory detached only in part is). The three run once more with
their inputs on the meta device (`labnn.exercises.grading.devices`, as every notebook's
tensor exercises), so that a tensor made on the CPU (or a numpy round trip), which fails on
a GPU, is named.
"""

from labnn.exercises.transformer_xl.relative_distances import check_relative_distances
from labnn.exercises.transformer_xl.relative_scores import (
    check_relative_scores, check_relative_shift)
from labnn.exercises.transformer_xl.segment_memory import check_segment_mask, check_update_memory

__all__ = ["check_relative_distances", "check_relative_scores", "check_relative_shift",
           "check_segment_mask", "check_update_memory"]
