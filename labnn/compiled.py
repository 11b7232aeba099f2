r"""Compiled generation: the one place where labnn trades readability for speed with
`torch.compile`.

Dimension letters (the package legend): `B` batch, `T0` prompt tokens, `V` vocabulary.

On a CPU, the time of a small model's generation step goes mostly to the fixed cost of
launching many small tensor operations, not to their arithmetic (`docs/benchmarks.md`).
`torch.compile` traces the step once into a graph and turns its pointwise operations
into a few fused loops of generated C++; the matrix products stay library calls. The
models stay as they are; this module runs them differently:

* the prompt is read eagerly, by the model's own `step` (XL) or `forward` (feedback),
  once;
* its cache is moved into a ring of fixed shape (`labnn.ring_cache`), so that one
  compiled graph serves every later token instead of one graph per cache length;
* each new token goes through the compiled ring step; sampling is
  `labnn.generation.generate`, as in eager generation.

Eager generation stays the reference (the ring steps equal `model.step`, tested) and
the default everywhere. What it buys, measured on a 2-core CPU (`docs/benchmarks.md`):
one stream of XL at attention length 1,024 runs 1.15-1.5x faster per token, the
feedback model's decoding 1.7-2.5x; but compiling takes about 20 s with an empty
inductor cache (a few seconds with a warm one), which a short generation does not win
back, and with 8 streams the compiled XL step was slower than the eager one. Where no
C++ compiler is found (the CPU backend needs one), `generate` warns (once per call) and
runs the ring step eagerly.

    >>> from labnn import compiled
    >>> out = compiled.generate(model, prompt, 300)  # XL or feedback (KV), eval mode
"""

from __future__ import annotations

import shutil
import sysconfig
import warnings
from pathlib import Path

import torch

from .checks import check_sampling, check_tokens
from .feedback_kv import FeedbackTransformerKV
from .generation import generate as generate_tokens
from .ring_cache import feedback_ring, feedback_ring_step, xl_ring, xl_ring_step
from .xl import TransformerXL

BACKENDS = ("inductor", "aot_eager", "eager")
MODELS = (TransformerXL, FeedbackTransformerKV)  # the models with a ring step


def missing_compiler(device: torch.device) -> str | None:
    """Why the inductor backend cannot compile for `device`, or None when it can.

    On a CPU inductor writes C++ against Python's headers and builds it with the
    compiler it finds (`torch._inductor.cpp_builder.get_cpp_compiler`; before torch 2.5,
    `g++` or `c++` on the `PATH`); on CUDA it needs Triton. torch offers no public check,
    so this asks inductor's own search, before compiling fails halfway.
    """
    if device.type == "cuda":
        from torch.utils._triton import has_triton

        return None if has_triton() else "Triton is not installed"
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not headers.exists():
        return f"no Python headers ({headers} is missing; e.g. apt install python3-dev)"
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler
    except ImportError:
        found = shutil.which("g++") or shutil.which("c++")
        return None if found else "no C++ compiler (g++) on the PATH"
    try:
        get_cpp_compiler()
    except Exception as err:  # inductor raises RuntimeError or CalledProcessError
        return f"no C++ compiler found ({' '.join(str(err).split())[:200]})"
    return None


def compile_step(step, backend: str, device: torch.device):
    """`step` compiled into one graph of fixed shapes; `step` itself, after one warning,
    when `backend="inductor"` has no compiler for `device`.

    `fullgraph=True`: an error instead of a graph break (an operation the compiler cannot
    trace, which splits the step into compiled pieces with eager Python between them and
    silently brings back the cost per operation); `dynamic=False`: the ring's shapes
    never change, so nothing is gained by shape-generic code.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    why = missing_compiler(device) if backend == "inductor" else None
    if why is not None:
        # stacklevel 4: past this function, `generate` and its inference_mode wrapper
        warnings.warn(f"labnn.compiled: {why}; generating eagerly instead", stacklevel=4)
        return step
    return torch.compile(step, backend=backend, fullgraph=True, dynamic=False)


def bucket(n: int) -> int:
    """The smallest power of two `>= n`: ring sizes that many lengths share."""
    return 1 << (n - 1).bit_length()


@torch.inference_mode()
def generate(
    model: TransformerXL | FeedbackTransformerKV,
    prompt: torch.Tensor,
    n: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    *,
    generator: torch.Generator | None = None,
    backend: str = "inductor",
) -> torch.Tensor:
    """`model.generate(prompt, n, ...)` with every token after the prompt through one
    compiled step.

    Samples the same tokens as `model.generate` for the same `generator`, up to float
    rounding: the logits agree to about 1e-5, so a near tie may go the other way. The
    cache holds the last `config.mem_len` positions (XL; unlike
    `TransformerXL.generate`, there is no `mem_len` argument) or `attn_len` (feedback;
    all of them when `attn_len` is None).

    Args:
        model: a `TransformerXL` or `FeedbackTransformerKV`, in eval mode.
        prompt: token ids, at least one per stream.
        n, temperature, top_k, generator: as in `labnn.generation.generate`.
        backend: `torch.compile`'s backend: `"inductor"` (generated C++; the fast one),
            or `"aot_eager"` / `"eager"` (no code generation; for tests).

    Shape:
        prompt `[B, T0]` -> `[B, T0 + n]`.
    """
    if not isinstance(model, MODELS):
        raise TypeError("model must be a TransformerXL or a FeedbackTransformerKV, got "
                        f"{type(model).__name__}")
    if model.training:
        raise RuntimeError("compiled generation needs eval mode (model.training is "
                           "True: dropout would be applied); call model.eval() first")
    check_sampling(temperature, top_k, n)
    weight = next(model.parameters())
    vocab = model.config.vocab_size
    check_tokens(prompt, vocab, "prompt", device=weight.device, min_len=1)
    xl = isinstance(model, TransformerXL)
    step = compile_step(xl_ring_step if xl else feedback_ring_step, backend,
                        weight.device)
    window = None if xl else model.config.attn_len
    if not xl and window is None:
        # Every earlier position is attended to: the ring holds the T0 + n - 1 memory
        # vectors written before the last token is read, rounded up to a power of two
        # so that generations of other lengths reuse the compiled graph.
        window = bucket(prompt.size(1) + n - 1)

    def next_logits(new, seen, ring):
        """The prompt eagerly into a ring; each later token through the compiled step."""
        if ring is None and xl:
            logits, cache = model.step(new)
            return logits, xl_ring(cache, new.size(1))
        if ring is None:
            logits, state = model(new)
            return logits[:, -1], feedback_ring(state, window)
        # XL's embed takes [B, T] (absolute positions add sinusoids inside the segment);
        # the feedback model's is a plain nn.Embedding
        x = model.embed(new)[:, 0] if xl else model.embed(new[:, 0])
        return step(model, x, ring), ring

    return generate_tokens(next_logits, prompt, n, temperature, top_k, generator)
