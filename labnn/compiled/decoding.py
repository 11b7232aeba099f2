r"""Compiled generation: the one place where labnn trades readability for speed with
`torch.compile`.

Dimension letters (the package legend): `B` batch, `T0` prompt tokens, `V` vocabulary.

On a CPU, the time of a small model's generation step goes mostly to the fixed cost of
launching many small tensor operations, not to their arithmetic (`docs/benchmarks.md`).
`torch.compile` traces the step once into a graph and turns its pointwise operations
into a few fused loops of generated C++; the matrix products stay library calls. The
models stay as they are; this module runs them differently:

* the prompt is read eagerly, by the model's own `step` (XL) or `forward` (the
  transformer LM, feedback), once (`read_prompt`);
* its cache is moved into a ring of fixed shape (`labnn.compiled.rings`), so that one
  compiled graph serves every later token instead of one graph per cache length;
* each new token goes through the compiled ring step; sampling is
  `labnn.nn.generation.generate`, as in eager generation.

Eager generation stays the reference (the ring steps equal `model.step`, tested) and the
default everywhere. What it buys at batch 1, measured on 2-core x86_64 VMs on 2026-11-25
and 2026-11-27 (`docs/benchmarks.md`): XL (d 128, 4 layers) at attention length 1,024
runs 1.15-1.5x faster per token, the feedback model's decoding (d 256, 4 layers, 256
tokens) 1.7-2.5x; but compiling took 18-22 s with an empty inductor cache (3-7 s with a
warm one), which a short generation does not win back, and with 8 streams the compiled
XL step was slower than the eager one. Where no C++ compiler is found (the CPU backend
needs one), `generate` warns (once per call) and runs the ring step eagerly.

On a GPU the step is also recorded once as a CUDA graph and replayed for every token
(`decoder`): eagerly, a step is a few hundred kernels launched one by one from Python,
and the GPU mostly waits. On NVIDIA H200s, in runs of 2026-11-26 and 2026-11-27 that no
GPU has repeated since (`docs/benchmarks.md`, with their commits), XL (d 512, 12 layers,
batch 1; Table 9 names no model size) at the attention lengths of the paper's Table 9
went from 3.2-6.9 ms per token eagerly to 0.59-0.72 ms, and to 0.34-0.48 ms with
`backend="kernels"`, labnn's own Triton kernels for the XL step
(`labnn.compiled.kernels`); the feedback model (d 512, 4 layers, batch 1, 128 tokens)
generated in 0.22 ms per token, against 1.02 ms per token for the parallel transformer
with its eager KV cache. The transformer's own compiled generation (d 128, 4 layers,
batch 1, 256 new tokens) took 0.17-0.20 ms per token at contexts of 256-2,048, 7.4-7.6x
faster than its eager KV cache there, in one run.

    >>> from labnn import compiled
    >>> out = compiled.generate(model, prompt, 300)  # transformer, XL or feedback (KV)
"""

from __future__ import annotations

import torch

from labnn.nn.arguments import check_eval_mode, check_int, check_sampling, check_tokens
from labnn.feedback.kv import FeedbackTransformerKV
from labnn.nn.generation import OnToken
from labnn.nn.generation import generate as generate_tokens
from labnn.compiled.backends import BACKENDS, compile_step, warn
from labnn.compiled.cuda_graph import record
from labnn.compiled.ring_steps import feedback_ring_step, transformer_ring_step, xl_ring_step
from labnn.compiled.rings import (FeedbackRing, TransformerRing, XLRing, check_ring,
                                  feedback_ring, transformer_ring, xl_ring)
from labnn.transformer import TransformerLM
from labnn.xl.model import TransformerXL

MODELS = (TransformerLM, TransformerXL, FeedbackTransformerKV)  # the models with a ring step
STEPS = {TransformerLM: transformer_ring_step, TransformerXL: xl_ring_step,
         FeedbackTransformerKV: feedback_ring_step}
RINGS = (TransformerRing, XLRing, FeedbackRing)


def check_model(model, backend: str) -> None:
    """Raise a clear error unless `model` is one of the models with a ring step and
    `backend` one of `BACKENDS` that serves it."""
    if not isinstance(model, MODELS):
        raise TypeError("model must be a TransformerLM, a TransformerXL or a "
                        "FeedbackTransformerKV, got "
                        f"{type(model).__name__}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "kernels" and not isinstance(model, TransformerXL):
        raise ValueError("backend='kernels' has kernels for TransformerXL only; use "
                         "'inductor' for the other models")
    dtype = next(model.parameters()).dtype
    if backend == "kernels" and dtype != torch.float32:
        raise ValueError(f"backend='kernels' runs float32 models, this one is {dtype}; "
                         "use 'inductor'")
    d_head = model.config.d_model // model.config.n_heads
    if backend == "kernels" and d_head & (d_head - 1):  # Triton's tl.arange asks it
        raise ValueError(f"backend='kernels' needs a head width d_head = d_model / n_heads "
                         f"that is a power of two, this model's is d_head = {d_head}; "
                         "use 'inductor'")


def bucket(n: int) -> int:
    """The smallest length `>= n` with at most four significant bits, `m * 2**k` with
    `m < 16`: ring sizes that the lengths of an eighth of an octave share (one compiled
    graph for them), at most 1/8 larger than `n` (a power of two wasted up to half the
    ring, every slot of which the step scores)."""
    check_int("n", n)
    step = 1 << max(0, n.bit_length() - 4)
    return -(-n // step) * step


def embed_one(model: TransformerLM | TransformerXL | FeedbackTransformerKV,
              token: torch.Tensor, count: torch.Tensor | None = None) -> torch.Tensor:
    """The embedding of one new token per stream, as the ring steps take it.

    `TransformerLM` adds its position, `count` (the ring's 0-d tensor); XL's `embed`
    takes `[B, T]` (absolute positions add sinusoids inside the segment); the feedback
    model's is a plain `nn.Embedding`.

    Shape:
        token `[B, 1]` -> `[B, D]`.
    """
    if isinstance(model, TransformerLM):
        return model.embed(token, count)[:, 0]
    if isinstance(model, TransformerXL):
        return model.embed(token)[:, 0]
    return model.embed(token[:, 0])


def decoder(model: TransformerLM | TransformerXL | FeedbackTransformerKV,
            ring: TransformerRing | XLRing | FeedbackRing, token: torch.Tensor, *,
            backend: str = "inductor"):
    """`token -> logits` for the tokens after the prompt: the ring step (compiled by
    `backend`), recorded as a CUDA graph on a GPU.

    On a CPU there is no graph to record: each call runs the compiled step. If
    recording fails (an operation the graph cannot hold), one warning names the reason
    and the step runs unrecorded.

    The door of every compiled generation, checked once here and never per token: the
    model (every module in eval mode: the ring steps have no dropout), the ring
    (`labnn.compiled.rings.check_ring`: from this model's cache) and the token.

    Args:
        model: the model, in eval mode.
        ring: its cache, from `transformer_ring`, `xl_ring` or `feedback_ring`; every
            call writes one slot, over the oldest once all are used (a transformer
            without a window then reads as one with a window: size its ring with
            `ring_slots`, as `generate` does).
        token: an example token `[B, 1]`, on the model's device (its value is unused).
        backend: as in `generate`.

    Returns:
        `decode(token [B, 1]) -> logits [B, V]`, without autograd, for a token like the
        example (shape, dtype, device; else `ValueError`). The logits are one tensor,
        overwritten by the next call (on a GPU, the CUDA graph's own output; on a CPU
        alike): `.clone()` the ones you keep. A learned-position `TransformerLM` has
        `seq_len` positions: a call past the last raises `ValueError` (host-counted).
    """
    check_model(model, backend)
    check_eval_mode(model, "compiled generation")
    weight = next(model.parameters())
    check_tokens(token, model.config.vocab_size, "token", device=weight.device, scan=False)
    if token.size(1) != 1:
        raise ValueError(f"token must be [B, 1] (one per stream), got shape "
                         f"{list(token.shape)}")
    check_ring(model, ring, token.size(0))
    left = positions_left(model, ring)
    device = token.device
    step = compile_step(STEPS[type(model)], backend, device)

    @torch.no_grad()  # called with gradients on, the ring would grow a graph per token
    def run(token, ring):
        return step(model, embed_one(model, token, ring.count), ring)

    if device.type == "cuda":
        try:
            return within(record(run, token, ring), left, model, token)
        except RuntimeError as err:
            warn(f"the step could not be recorded as a CUDA graph "
                 f"({' '.join(str(err).split())[:200]}); running it unrecorded")
    return within(one_result(lambda token: run(token, ring)), left, model, token)


def one_result(decode):
    """`decode`, its logits written into one tensor that each call overwrites, as a CUDA
    graph's replay does: logits kept without `.clone()` change on a CPU too, not on a
    GPU only."""
    held = None

    def same(token: torch.Tensor) -> torch.Tensor:
        nonlocal held
        logits = decode(token)
        held = logits if held is None else held.copy_(logits)
        return held

    return same


def positions_left(model, ring) -> int | None:
    """How many tokens a decoder of `ring` can still embed: a learned-position
    `TransformerLM` has `seq_len` (the ring's count read once, at the door); None where
    positions never run out."""
    if not isinstance(model, TransformerLM) or model.config.positions != "learned":
        return None
    return model.config.seq_len - int(ring.count)


def within(decode, left: int | None, model, like: torch.Tensor):
    """`decode`, refusing a token unlike the example `like` (another shape, dtype or device:
    a CUDA graph's copy broadcast a `[1, 1]` token into every stream, and a CPU step read
    a `[B, 2]` one as its first column; compared on the host, no value read) and its call
    number `left + 1` (a token past the last learned position: on a GPU, a device-side
    assert that loses the session)."""
    calls, want = 0, (like.shape, like.dtype, like.device)

    def bounded(token: torch.Tensor) -> torch.Tensor:
        nonlocal calls
        if not isinstance(token, torch.Tensor) or (token.shape, token.dtype,
                                                   token.device) != want:
            got = (f"{list(token.shape)} {token.dtype} on {token.device}"
                   if isinstance(token, torch.Tensor) else type(token).__name__)
            raise ValueError(f"token must be a {list(like.shape)} {like.dtype} tensor on "
                             f"{like.device}, as the decoder's example, got {got}")
        if calls == left:
            raise ValueError(
                f"this decoder reached the model's seq_len={model.config.seq_len} learned "
                "positions: the next token has none; use model.generate (it recomputes)")
        calls += 1
        return decode(token)

    return bounded


def ring_slots(model: TransformerLM | TransformerXL | FeedbackTransformerKV, t0: int,
               n: int) -> int | None:
    """The slots of the ring for a generation of `n` tokens after `t0`: it reads
    `t0 + n - 1` positions (the prompt's, then every new token but the last), all of
    them held when no window bounds them, rounded up (`bucket`) so that generations of
    other lengths reuse the compiled graph; `attn_len + 1` with a window
    (`TransformerLM`), `attn_len` (feedback); None for XL (`mem_len + 1`, from its
    cache) and for `n = 0` (no token is generated, no ring made). A learned-position
    `TransformerLM` cannot read past `seq_len` positions."""
    check_int("t0", t0)  # the prompt's length: at least one token
    check_int("n", n, low=0)
    reads = t0 + n - 1
    if isinstance(model, TransformerXL) or n == 0:
        return None
    band = model.config.attn_len
    if isinstance(model, FeedbackTransformerKV):
        return bucket(reads) if band is None else band
    limit = model.config.seq_len if model.config.positions == "learned" else None
    if limit is not None and reads > limit:
        raise ValueError(
            f"a generation of n={n} tokens after a prompt of {t0} reads T0 + n - 1 = {t0} + "
            f"{n} - 1 = {reads} positions, past the model's seq_len={limit} learned ones: "
            "there the window must slide, and the positions with it, which no ring can "
            "do; generate fewer tokens here, or use model.generate (it recomputes)")
    slots = max(2, bucket(reads))
    return slots if band is None else min(band + 1, slots)


@torch.no_grad()
def read_prompt(model: TransformerLM | TransformerXL | FeedbackTransformerKV,
                prompt: torch.Tensor, slots: int | None) -> tuple:
    """The prompt read eagerly by the model's `step` (XL) or `forward` past their scan of
    the ids (`generate` scanned them): the next logits `[B, V]`, the ring of its cache."""
    t0 = prompt.size(1)
    if isinstance(model, TransformerXL):
        logits, cache = model._step(prompt, None, None)
        return logits, xl_ring(cache, t0)
    if isinstance(model, TransformerLM):
        logits, cache = model.forward_checked_ids(prompt, use_cache=True)
        return logits[:, -1], transformer_ring(cache, t0, slots)
    logits, state = model.forward_checked_ids(prompt)
    return logits[:, -1], feedback_ring(state, slots)


@torch.inference_mode()
def generate(
    model: TransformerLM | TransformerXL | FeedbackTransformerKV,
    prompt: torch.Tensor,
    n: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    *,
    generator: torch.Generator | None = None,
    backend: str = "inductor",
    on_token: OnToken | None = None,
) -> torch.Tensor:
    """`model.generate(prompt, n, ...)` with every token after the prompt through one
    compiled step, replayed as a CUDA graph on a GPU (`decoder`).

    Samples the same tokens as `model.generate` for the same `generator`, up to float
    rounding: the logits agree to about 1e-5, so a near tie may go the other way. The
    ring holds the positions a token may read (`ring_slots`): the last `attn_len`
    (`TransformerLM`, feedback) or `config.mem_len` (XL; unlike
    `TransformerXL.generate`, there is no `mem_len` argument), all of them without a
    window. The prompt is checked once, here; no token after it reads a value back to
    the host (the loop's one read comes after the last: `generate`'s check of the logits).

    Args:
        model: a `TransformerLM`, `TransformerXL` or `FeedbackTransformerKV`, in eval
            mode.
        prompt: token ids, at least one per stream.
        n, temperature, top_k, generator, on_token: as in
            `labnn.nn.generation.generate` (`on_token` reads each token back: one wait
            for the device per token).
        backend: `torch.compile`'s backend: `"inductor"` (generated C++ or Triton; the
            fast one), or `"aot_eager"` / `"eager"` (no code generation; for tests); or
            `"kernels"`: labnn's own Triton kernels for XL on a GPU
            (`labnn.compiled.kernels`), no compiler involved.

    Shape:
        prompt `[B, T0]` -> `[B, T0 + n]`.
    """
    check_model(model, backend)
    check_eval_mode(model, "compiled generation")
    check_sampling(temperature, top_k, n)
    weight = next(model.parameters())
    check_tokens(prompt, model.config.vocab_size, "prompt", device=weight.device, min_len=1)
    slots = ring_slots(model, prompt.size(1), n)

    def next_logits(new, seen, state):
        """The prompt into a ring; each later token through a decoder (made at the first)."""
        if state is None:
            return read_prompt(model, new, slots)
        if isinstance(state, RINGS):
            state = decoder(model, state, new, backend=backend)
        return state(new), state

    return generate_tokens(next_logits, prompt, n, temperature, top_k, generator, on_token)
