"""Compiled generation for Transformer-XL and the KV feedback model: the speed boundary.

`rings` holds each model's cache in fixed shapes and steps one token over it;
`decoding` compiles that step (and on CUDA records it as a graph) and generates with it.
The eager models stay the reference: every compiled step is tested equal to them.
"""

from labnn.compiled.decoding import MODELS, decoder, generate, record
from labnn.compiled.rings import FeedbackRing, XLRing, feedback_ring, xl_ring

__all__ = ["MODELS", "FeedbackRing", "XLRing", "decoder", "feedback_ring", "generate", "record",
           "xl_ring"]
