"""Notebook 03 · The Feedback Transformer: the checkers of its five exercises.

- Exercise 1, the memory vector: `check_memory_vector`, in `memory_vector`;
- Exercise 2, the relative position bias: `check_relative_bias`, in `memory_vector`;
- Exercise 3, attention over the memory: `check_feedback_attention`, in `memory_vector`;
- Exercise 4, the token loop: `check_token_loop`, in `token_loop`;
- Exercise 5, the bytes of the cache: `check_cache_bytes`, in `token_loop`.

The slips they name beyond their own modules: `memory_vector_slips` and
`feedback_attention_slips` (exercises 1 and 3: a scale or layer count written as a number
told apart by a rerun), `relative_bias_slips` (exercise 2: far keys given the first column,
distances past int8 at s = 200, past uint8 at s = 300, an index in a bfloat16 table's
dtype), `scale_functions` (exercise 3: q·k divided by log(d_head), d ** 1/2 or another
function of the head width; an einsum that sums over a batch axis), `weight_transforms` (the
layer logits or the bias table given exp() or a softmax before use; the weights a memory
vector gave the layers, solved for: reversed, raw, relu(w) normalised, a temperature),
`token_loop_slips` (a step that reads the wrong steps' memory, or the wrong token) and
`step_slips` (a loop over B steps or one token short, logits one step late, model.mix's
input, batch rows mixed, a layer reading another layer's keys, the steps joined end to end
for model.head),
`dtype_rounds` (exercises 1 and 3 on float64 inputs float32 cannot hold, and in bfloat16),
`long_memory` (the token loop on 24 tokens: a memory cut to a window or detached every few
steps, the notebook's global model used in place of the argument); every answer that passes
at a check's own sizes runs again where each size differs (`other_sizes`, which also names a
token loop's memory kept between calls and tries the attention on scores of +-200, then on
heads 1000 apart), so that a size written as a number fails by name, and where a size is 1
(`size_one`: B, H, s or S = 1, and the token loop on 66 tokens, with its gradients), and
on the meta device at a size 1 and large logits too, where an answer may branch with a CPU
tensor (`expect_any_device`);
`kept_state` a token loop, memory vector, relative bias or attention that keeps something
between calls (rerun on a new model, then on the same one with other tokens, and after its
weights or table changed in place; the vector and the attention on other values, then on the
same tensors refilled in place), an output buffer or the empty memory's zeros handed out
again, a token loop that clears the model's gradients; `cache_units` the sizes of
`cache_bytes` in other units, or with an argument written as a number, or a factor in
both sizes, or wrapped past 2**31
(int32) or rounded in float32, or kept between calls per argument (its rounds bring each of
the first call's arguments back, the others changed).
"""

from labnn.exercises.feedback_transformer.memory_vector import (
    check_feedback_attention, check_memory_vector, check_relative_bias)
from labnn.exercises.feedback_transformer.token_loop import check_cache_bytes, check_token_loop

__all__ = ["check_cache_bytes", "check_feedback_attention", "check_memory_vector",
           "check_relative_bias", "check_token_loop"]
