"""Notebook 04 · Sharing keys and values: the checkers of its five exercises.

- Exercise 1, shared keys and values: `check_shared_kv`, in `kv_sharing`;
- Exercise 2, $y = x^2$ as an autograd Function: `check_square`, in `custom_backward`;
- Exercise 3, the values' gradients: `check_value_gradients`, in `custom_backward`;
- Exercise 4, `Append`, the stack's Function: `check_append`, in `stack_append`;
- Exercise 5, the weight gradient as one product: `check_weight_gradient`, in `kv_sharing`.

The slips they name beyond their own modules: `custom_backward_slips` (shared by the
gradient checkers), `square_slips` (the errors `Square.backward` raises), `square_state`
(where `Square` keeps x: ctx, the class, a copy, `x.data`), `stack_append_slips`
(`Append`'s slot, length and saved buffer), `append_state` (`Append` as autograd uses it: the
gradient of `top`, the caller's `grad`, a second backward, which of backward's two
gradients is wrong), `append_writes` (`Append` writes slot n only, returns a view at the
first push, keeps float32) and `kv_sharing_slips`;
`other_sizes` runs the shared keys and values, `Append` and the two gradients again where
every size differs, so that a size written as a number fails by name, and `input_rounds`
runs Exercises 1, 3 and 5 on float32, on an axis of size 1 and on non-contiguous inputs,
each on another device too (a branch for those sizes alone making CPU tensors);
`fresh_rounds` calls each answer again with other values of the same sizes and on those
tensors refilled in place, so that a result kept between calls is named as such (and the
shared keys and values with m[0] alone changed: batch entries mixed);
`large_rounds` runs each once more with entries up to about 1e6, where a `.clamp()` shows.
"""

from labnn.exercises.kv_sharing_stack.custom_backward import check_square, check_value_gradients
from labnn.exercises.kv_sharing_stack.kv_sharing import check_shared_kv, check_weight_gradient
from labnn.exercises.kv_sharing_stack.stack_append import check_append

__all__ = ["check_append", "check_shared_kv", "check_square", "check_value_gradients",
           "check_weight_gradient"]
