"""Transformer-XL (Dai et al., 2019): segment memory and relative attention.

Read in this order: `relative_attention` (the scores by distance and the shift),
`memory` (what a segment keeps for the next), `block` (one layer), `model`
(`TransformerXL`), `cache` (generation one token at a time).
"""

from labnn.xl.cache import XLCache
from labnn.xl.memory import segment_mask, update_memory
from labnn.xl.model import TransformerXL, XLConfig
from labnn.xl.relative_attention import RelativeMultiHeadAttention, relative_scores, relative_shift

__all__ = ["RelativeMultiHeadAttention", "TransformerXL", "XLCache", "XLConfig",
           "relative_scores", "relative_shift", "segment_mask", "update_memory"]
