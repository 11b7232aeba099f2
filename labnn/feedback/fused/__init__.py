"""The KV feedback model's token loop as one autograd function: `loop` runs the
forward over preallocated buffers (`buffers`), `backward` walks the tokens back.
"""

from labnn.feedback.fused.loop import FeedbackLoop, LayerParams, LoopSpec, MemoryParams, fused_loop

__all__ = ["FeedbackLoop", "LayerParams", "LoopSpec", "MemoryParams", "fused_loop"]
