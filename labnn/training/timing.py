"""Timing a piece of work where it runs: the clock behind the notebooks' timing claims.

A claim such as "the feedback step costs more than 3x the transformer's" is checked
from timings, on whatever machine runs the notebook, often beside other work (two
notebooks side by side in `make site`, a test run, a browser). On a CPU with one torch
thread `clock` is this process's CPU time, which the other jobs' share of the cores
does not enter; wall time would charge it to whatever was being timed. With several
threads CPU time would add up every thread's share of one product, so wall time is
used then, as on a GPU, whose queued work `times` waits for on both sides of a call.

A timing means little without the machine it was taken on: `machine` names it, in one
line that the notebooks and benchmarks print beside their figures.
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path
from typing import Callable

import torch

from labnn.nn.arguments import check_int


def clock(device: torch.device) -> Callable[[], float]:
    """Seconds as `times` counts them on `device`: `time.process_time` on a CPU with one
    torch thread, else `time.perf_counter` (wall time)."""
    one_thread = device.type == "cpu" and torch.get_num_threads() == 1
    return time.process_time if one_thread else time.perf_counter


def clock_name(device: torch.device) -> str:
    """What `clock(device)` counts, to print beside its figures: "CPU time" (this process's,
    one thread: less than a progress bar's wall time where other jobs share the cores) or
    "wall time"."""
    return "CPU time" if clock(device) is time.process_time else "wall time"


def _wait(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def times(fn: Callable[[], object], device: torch.device, *, repeats: int = 3,
          warmup: int = 1) -> list[float]:
    """Seconds of each of `repeats` calls of `fn`, after `warmup` calls not timed (the
    first call of a model allocates and, on a GPU, loads its kernels).

    Take `min` of them for the cost least disturbed by anything else, or the median for a
    typical call.

    Args:
        fn: the work, e.g. `lambda: model(tokens)`.
        device: where it runs (`clock(device)`; a GPU is waited for around each call).
        repeats: timed calls.
        warmup: calls before them.

    Returns:
        `repeats` durations in seconds, in call order.
    """
    check_int("repeats", repeats)
    check_int("warmup", warmup, low=0)
    for _ in range(warmup):
        fn()
    tick, out = clock(device), []
    for _ in range(repeats):
        _wait(device)
        start = tick()
        fn()
        _wait(device)
        out.append(tick() - start)
    return out


def _cpu_name() -> str:
    """The processor's model name (Linux's /proc/cpuinfo), else what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "an unnamed CPU"


def machine(device: torch.device) -> str:
    """Where figures measured on `device` come from, in one line: the GPU, its CUDA and
    whether float32 products may use TF32; or the CPU, its cores and torch's threads; and
    torch's version.

    Example: `"AMD EPYC (x86_64), 2 cores, 1 torch thread, torch 2.13.0+cpu"`.
    """
    if device.type == "cuda":
        tf32 = torch.backends.cuda.matmul.allow_tf32
        where = (f"{torch.cuda.get_device_name(device)}, CUDA {torch.version.cuda}, "
                 f"TF32 {'on' if tf32 else 'off'}")
    else:
        where = f"{_cpu_name()} ({platform.machine()}), {_cores_and_threads()}"
        if device.type != "cpu":
            where = f"{device.type}, on {where}"
    return f"{where}, torch {torch.__version__}"


def machine_short(device: torch.device) -> str:
    """`machine` in a few words, for the title of a figure of timings (which may be seen
    without the notebook's first cell): the GPU's name, or the CPU's cores and torch's
    threads.

    Example: `"CPU, 2 cores, 1 torch thread"`.
    """
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    where = f"CPU, {_cores_and_threads()}"
    return where if device.type == "cpu" else f"{device.type} on {where}"


def _cores_and_threads() -> str:
    """The CPU's cores and torch's threads, e.g. `"2 cores, 1 torch thread"`."""
    threads = torch.get_num_threads()
    return f"{os.cpu_count()} cores, {threads} torch thread{'s' if threads > 1 else ''}"
