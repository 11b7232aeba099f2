"""Compiled generation for the transformer LM, Transformer-XL and the KV feedback model:
the speed boundary.

Read in this order: `rings` (each model's cache in fixed shapes, made from the eager
cache and checked), `ring_steps` (one token over a ring, written with the eager models'
own scores, blocks and layers), `cuda_graph` (a step recorded as one CUDA graph),
`backends` (the step compiled, or what runs where it cannot be), `decoding`
(generation with it), then `kernels` (XL's step as labnn's own Triton kernels, for a
GPU). The eager models stay the reference: every
compiled step is tested equal to them.
"""

from labnn.compiled.cuda_graph import record
from labnn.compiled.decoding import MODELS, bucket, decoder, generate, ring_slots
from labnn.compiled.rings import (FeedbackRing, TransformerRing, XLRing, feedback_ring,
                                  transformer_ring, xl_ring)

__all__ = ["MODELS", "FeedbackRing", "TransformerRing", "XLRing", "bucket", "decoder",
           "feedback_ring", "generate", "record", "ring_slots", "transformer_ring", "xl_ring"]
