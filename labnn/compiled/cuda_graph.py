"""Recording a ring step as a CUDA graph: one launch per token instead of a few hundred.

`labnn.compiled.decoding.decoder` records the step with `record` on a GPU; on a CPU
nothing here runs.
"""

from __future__ import annotations

import torch

from labnn.compiled.rings import FeedbackRing, TransformerRing, XLRing

Ring = TransformerRing | XLRing | FeedbackRing


def spare_ring(ring: Ring) -> Ring:
    """A copy of what a ring step writes (slots and count), for warm-up calls that must
    leave the ring itself untouched; XL's tables of relative keys are only read, and
    shared."""
    if isinstance(ring, XLRing):
        return XLRing([k.clone() for k in ring.keys_t], [v.clone() for v in ring.values],
                      ring.tables, ring.count.clone())
    if isinstance(ring, TransformerRing):
        return TransformerRing([k.clone() for k in ring.keys],
                               [v.clone() for v in ring.values], ring.count.clone())
    return FeedbackRing(ring.kv.clone(), ring.count.clone())


def record(run, token: torch.Tensor, ring: Ring, warm_up: int = 3):
    """`run(token, ring) -> logits` recorded once as a CUDA graph; returns
    `replay(token) -> logits`.

    A step is a few hundred small kernels; launched one by one from Python, the GPU
    waits for the CPU between them (3.2-6.9 ms per token for XL's 12 layers at d 512,
    batch 1, on an NVIDIA H200 on 2026-11-26; `make test-gpu` of 2026-11-27, commit
    `5179eb1`, ran the command again, and no GPU has since: `docs/benchmarks.md`). A
    CUDA graph launches the recorded kernels in one call. That needs what the ring
    gives: fixed shapes, fixed addresses (the ring's tensors are written in place) and
    no value read back on the host. The warm-up calls (on
    a side stream, as `torch.cuda.graphs` asks, and on a spare copy of the ring: the
    ring must see each token once) compile the step and pick its kernels before
    recording. The copy counts from position 0, where every model has positions to
    spare (a learned table of `seq_len` ends before `count + warm_up` near its end).

    Returns:
        `replay(token)`: copies `token` `[B, 1]` into the graph's input, replays, and
        returns the graph's own logits tensor `[B, V]`, overwritten by the next replay.
    """
    spare = spare_ring(ring)
    spare.count.zero_()
    # streams and graphs are made on the current device: the token's (a model on cuda:1
    # with cuda:0 current ran its kernels outside the capture, which recorded nothing)
    with torch.cuda.device(token.device):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warm_up):
                run(token, spare)
        torch.cuda.current_stream().wait_stream(side)
        graph, static_token = torch.cuda.CUDAGraph(), token.clone()
        with torch.cuda.graph(graph):
            static_logits = run(static_token, ring)

    def replay(token: torch.Tensor) -> torch.Tensor:
        static_token.copy_(token)
        graph.replay()
        return static_logits

    return replay
