"""Building blocks every model here shares: attention and its key/value cache, positions,
the feed-forward layer, the pre-norm block, sampling, and the argument checks at each public door.

Nothing in `labnn.nn` imports a model: the models (`labnn.transformer`, `labnn.xl`,
`labnn.feedback`) are built from it.
"""

from labnn.nn.attention import MultiHeadAttention, causal_mask, scaled_dot_product_attention
from labnn.nn.block import TransformerBlock
from labnn.nn.generation import generate, sample_next
from labnn.nn.kv_cache import KVBuffer, KVCache
from labnn.nn.layers import FeedForward, evaluating, in_mode, init_weights, num_params
from labnn.nn.positions import sinusoidal_encoding

__all__ = ["FeedForward", "KVBuffer", "KVCache", "MultiHeadAttention", "TransformerBlock",
           "causal_mask", "evaluating", "generate", "in_mode", "init_weights", "num_params",
           "sample_next", "scaled_dot_product_attention", "sinusoidal_encoding"]
