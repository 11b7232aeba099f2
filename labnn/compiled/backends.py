r"""How a ring step runs fast: compiled by `torch.compile`, or as labnn's own kernels,
and what runs instead where neither can.

`labnn.compiled.decoding` hands its ring step (`labnn.compiled.ring_steps`) to
`compile_step` with the backend asked for:

* `"inductor"` compiles it into one graph of fixed shapes, with generated C++ on a CPU
  and Triton on a GPU; `"aot_eager"` and `"eager"` trace it without generating code
  (for tests);
* `"kernels"` replaces XL's step by `labnn.compiled.kernels`, six Triton launches per
  layer.

Under a torch function mode that says it cannot be traced (`traceable = False`: labnn's
device audit, `labnn.training.device_audit`), the step runs eagerly, with no warning:
the audit then checks the step's own Python, which tracing would hide from it.

Where the backend cannot run (no C++ compiler or Python headers; on a GPU no Triton,
a GPU older than Triton's, or no C compiler for Triton's launcher; no CUDA for the
kernels), one warning says why and the step runs eagerly: the same computation, only
slower. torch offers no public check for any of these, so each is asked
before compiling could fail halfway.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
import warnings
from pathlib import Path

import torch

BACKENDS = ("inductor", "aot_eager", "eager", "kernels")


def warn(message: str) -> None:
    """`warnings.warn(message)` pointed at the first caller outside labnn and torch: the
    line of the learner's own code that started the generation, however deep the call
    that warns (`generate`, its sampling loop, `decoder`, the compiled step)."""
    frame, level = sys._getframe(1), 2
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith(
            ("labnn.", "torch.")):
        frame, level = frame.f_back, level + 1
    warnings.warn(f"labnn.compiled: {message}", stacklevel=level)


def recompile_limit_hit(err: Exception) -> bool:
    """Whether `err` is a `fullgraph` compile stopped by torch's limit of graphs per
    function (`torch._dynamo.config.recompile_limit`, `cache_size_limit` in torch 2.6):
    `FailOnRecompileLimitHit`, or in torch 2.6 to 2.9 `RecompileLimitExceeded`."""
    exc = torch._dynamo.exc
    names = ("FailOnRecompileLimitHit", "RecompileLimitExceeded")
    return isinstance(err, tuple(getattr(exc, n) for n in names if hasattr(exc, n)))


def missing_compiler(device: torch.device) -> str | None:
    """Why the inductor backend cannot compile for `device`, or None when it can.

    On a CPU inductor writes C++ against Python's headers and builds it with the
    compiler it finds (`torch._inductor.cpp_builder.get_cpp_compiler`); on CUDA it needs
    Triton (`missing_triton`), whose launcher is C built against the same headers.
    torch offers no public check, so this asks inductor's own search, before compiling
    fails halfway.
    """
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not headers.exists():
        return f"no Python headers ({headers} is missing; e.g. apt install python3-dev)"
    if device.type == "cuda":
        return missing_triton(device)
    from torch._inductor.cpp_builder import get_cpp_compiler

    try:
        get_cpp_compiler()
    except Exception as err:  # inductor raises RuntimeError or CalledProcessError
        return f"no C++ compiler found ({' '.join(str(err).split())[:200]})"
    return None


def missing_triton(device: torch.device) -> str | None:
    """Why Triton cannot compile for the GPU `device`, or None when it can: not
    installed; a GPU older than compute capability 7.0 (Triton's oldest, which
    `has_triton()` asks; e.g. a P100); or no C compiler for the launcher it builds (the
    `CC` variable, else gcc or clang on the PATH, as Triton looks for one)."""
    from torch.utils._triton import has_triton, has_triton_package

    if not has_triton_package():
        return "Triton is not installed"
    if not has_triton():
        major, minor = torch.cuda.get_device_capability(device)
        return (f"Triton cannot compile for this GPU (compute capability {major}.{minor}; "
                "it needs 7.0 or newer)")
    if not (os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")):
        return "no C compiler for Triton's launcher (gcc or clang on the PATH, or CC)"
    return None


def untraceable_mode() -> bool:
    """Whether a torch function mode is active that `torch.compile` cannot trace
    (`traceable = False`): the device audit's labels live on the Python tensors, which
    a traced graph replaces by its own outputs (every compiled step then mixed
    "devices"). torch has no public query of the active modes."""
    from torch.overrides import _get_current_function_mode_stack

    return any(getattr(mode, "traceable", True) is False
               for mode in _get_current_function_mode_stack())


def compile_step(step, backend: str, device: torch.device):
    """`step` compiled into one graph of fixed shapes; `step` itself, after one warning,
    when `backend="inductor"` has no compiler for `device`.

    `fullgraph=True`: an error instead of a graph break (an operation the compiler cannot
    trace, which splits the step into compiled pieces with eager Python between them and
    silently brings back the cost per operation); `dynamic=False`: the ring's shapes
    never change, so nothing is gained by shape-generic code.

    Each batch size, ring size, model or dtype compiles a graph of its own, and torch
    keeps at most `torch._dynamo.config.recompile_limit` (8) per function in a process;
    past it a `fullgraph` compile raises. Then one warning says so, every compiled graph
    is cleared (`torch.compiler.reset()`) and the step compiles afresh.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if untraceable_mode():
        return step
    if backend == "kernels":
        return kernel_step(step, device)
    why = missing_compiler(device) if backend == "inductor" else None
    if why is not None:
        warn(f"{why}; generating eagerly instead")
        return step
    compiled = torch.compile(step, backend=backend, fullgraph=True, dynamic=False)

    def run(*args):
        try:
            return compiled(*args)
        except Exception as err:  # raised before the step runs: the ring is unchanged
            if not recompile_limit_hit(err):
                raise
            warn(f"{step.__name__} reached torch's recompile limit (one graph per batch "
                 "size, ring size, model and dtype seen in this process); clearing every "
                 "compiled graph with torch.compiler.reset() and compiling again")
            torch.compiler.reset()
            return compiled(*args)

    return run


def kernel_step(step, device: torch.device):
    """`labnn.compiled.kernels.xl_kernel_step` for the XL ring step `step`; `step` itself,
    after one warning, where the kernels cannot run: they need a CUDA device Triton can
    compile for (`missing_compiler`), or Triton's interpreter on the CPU
    (`TRITON_INTERPRET=1`, for the tests)."""
    from torch.utils._triton import has_triton_package

    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    if device.type == "cuda":
        why = missing_compiler(device)  # Python's headers and Triton
    elif not has_triton_package():
        why = "Triton is not installed"
    elif not interpreted:
        why = f"labnn's kernels run on CUDA, not on {device.type}"
    else:
        why = None
    if why is None:
        from labnn.compiled.kernels import xl_kernel_step

        return xl_kernel_step
    warn(f"{why}; running the ring step eagerly instead")
    return step
