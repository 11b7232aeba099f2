"""The Feedback Transformer (Fan et al., 2020) and its key/value-sharing variant.

Read in this order: `layer` (one step of one layer: attention over the memory, the
layer mix, one token's step), `base` (what both models share: their modules, `step`,
`generate`), `model` (`FeedbackTransformer`, one token at a time), `stack` (a growing
buffer with a custom backward), `step_linear`, `kv` (`FeedbackTransformerKV`: every
layer reads the same keys and values), and `fused` (its token loop as one autograd
function, with a hand-written backward).
"""

from labnn.feedback.kv import FeedbackKVConfig, FeedbackTransformerKV, KVState
from labnn.feedback.model import FeedbackConfig, FeedbackState, FeedbackTransformer
from labnn.feedback.stack import ListStack, Stack

__all__ = ["FeedbackConfig", "FeedbackKVConfig", "FeedbackState", "FeedbackTransformer",
           "FeedbackTransformerKV", "KVState", "ListStack", "Stack"]
