"""Notebook 02 · Transformer-XL: the checkers of its five exercises.

| exercise | checker | module |
|---|---|---|
| 1. updating the memory | `check_update_memory` | `segment_memory` |
| 2. the segment mask | `check_segment_mask` | `segment_memory` |
| 3. relative distances | `check_relative_distances` | `relative_distances` |
| 4. the relative shift | `check_relative_shift` | `relative_scores` |
| 5. the four relative terms | `check_relative_scores` | `relative_scores` |

The slips they name beyond their own modules: `segment_memory_slips` (exercises 1-2),
`relative_score_slips` (biases on the wrong side, a missing term) and `contiguity_slips`
(the shift on a non-contiguous input).
"""

from labnn.exercises.transformer_xl.relative_distances import check_relative_distances
from labnn.exercises.transformer_xl.relative_scores import (
    check_relative_scores, check_relative_shift)
from labnn.exercises.transformer_xl.segment_memory import check_segment_mask, check_update_memory

__all__ = ["check_relative_distances", "check_relative_scores", "check_relative_shift",
           "check_segment_mask", "check_update_memory"]
