"""Feedback Transformer with shared keys/values: training step, decoding and memory vs
the parallel transformer.

All variants are measured side by side in one process (d_model 256, 8 heads, 4 layers,
d_ff 1024, batch 16, float32 on the CPU by default; `--device cuda`, `--dtypes float32
bfloat16`):

* training step (forward + cross-entropy + backward) of the parallel `TransformerLM`,
  the naive `FeedbackTransformer(shared_kv=True)` (keys/values grown with `torch.cat`),
  `FeedbackTransformerKV` with its autograd loop over `torch.stack` and over `Stack`,
  and with its fused loop (`labnn.feedback.fused.loop`, the default), and the optional peers
  when installed (labml-nn's `FeedbackTransformerKV`, lucidrains'
  `feedback-transformer-pytorch`), at T = 32, 64, 128, 256. Each model trains in blocks
  of consecutive steps, as in training (one untimed step, then `--block` timed ones: a
  model that follows another first pays for memory the allocator must map afresh);
  blocks take turns, model after model, so that load changes hit every variant alike.
  Reported: the median step time, and the median over blocks of the ratio to the
  parallel transformer's block beside it (process CPU time too: the machine may be
  shared). `bfloat16` runs the forward pass and the loss under
  `torch.autocast(device_type, dtype=torch.bfloat16)` (weights and gradients stay
  float32; labnn's fused loop turns autocast off and computes in float32);
* peak memory of one training step at T = 128 (else the longest T), per dtype. On a CPU
  `torch.profiler` with `profile_memory=True` records the bytes each op allocates net of
  what it frees; the peak of their running sum, in time order, over the step is the
  memory the step needed on top of the model and its input (tracemalloc cannot see
  torch's allocator; RSS deltas are blurred by the allocator's caching; peaks inside one
  op are not seen). On CUDA: `torch.cuda.max_memory_allocated` over the step, less what
  was allocated before it;
* decoding latency per token (float32, batch 1, `--decode` tokens, greedy) against
  `TransformerLM.generate` with its KV cache: each model's call is paired with a call of
  the parallel model just before it (`--repeats` pairs; the median latency and the
  median ratio of pairs), and the bytes of each cache after those tokens. With
  `--compile`, also the parallel model and the fused model through
  `labnn.compiled.generate` (inductor; the first call, which compiles, is reported
  apart; on CUDA each call records the ring step as a CUDA graph, which the latency
  includes), so that compiled meets compiled.

Each row is printed as soon as it is measured (flushed, so that a run cut off by a
timeout keeps what it printed); with `--json` the rows go to stderr and stdout gets one
JSON object at the end; `--jsonl FILE` also writes each row to FILE as a JSON line. A
model that cannot be imported (an exception, or a `sys.exit` in a peer's import), built
or run gets a row saying why, and the others go on; `--time-limit` skips, with a printed
line, what would start after it.

    python benchmarks/bench_feedback_kv.py              # a table with ratios
    python benchmarks/bench_feedback_kv.py --json       # one JSON object
    python benchmarks/bench_feedback_kv.py --quick      # tiny smoke run
    python benchmarks/bench_feedback_kv.py --no-peers --lengths 128 --compile
    python benchmarks/bench_feedback_kv.py --device cuda --d-model 512 --d-ff 2048 \\
        --batch 64 --lengths 256 --dtypes float32 bfloat16 --compile --time-limit 480
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
import warnings
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from labnn import compiled
from labnn.feedback.model import FeedbackConfig, FeedbackTransformer
from labnn.feedback.kv import FeedbackKVConfig, FeedbackTransformerKV
from labnn.compiled.rings import feedback_ring
from labnn.feedback.stack import ListStack
from labnn.training import timing
from labnn.training.trainer import pick_device
from labnn.transformer import TransformerConfig, TransformerLM

VOCAB = 65
DTYPES = ("float32", "bfloat16")
DECODERS = ("parallel", "naive", "kv_stack", "kv_fused")
QUICK = dict(lengths=[8, 16], d_model=32, heads=2, layers=2, d_ff=64, batch=2, decode=8,
             repeats=1, block=1, threads=1, compile=True, backend="eager")


class TorchStackKV(FeedbackTransformerKV):
    """The KV model's autograd loop with keys/values stacked by `torch.stack` at every
    step (`labnn.feedback.stack.ListStack`): the baseline that `Stack` replaces."""

    def make_stack(self, capacity: int, like: torch.Tensor) -> ListStack:
        return ListStack(capacity, like, dim=3)


def ours(args) -> dict[str, Callable[[], nn.Module]]:
    dims = dict(vocab_size=VOCAB, d_model=args.d_model, n_heads=args.heads,
                n_layers=args.layers, d_ff=args.d_ff)
    fb = dict(dims, max_distance=max(args.lengths))
    seq_len = max(max(args.lengths), args.decode + 1)
    return {
        "parallel": lambda: TransformerLM(TransformerConfig(**dims, seq_len=seq_len)),
        "naive": lambda: FeedbackTransformer(FeedbackConfig(**fb, shared_kv=True)),
        "kv_torch_stack": lambda: TorchStackKV(FeedbackKVConfig(**fb, loop="autograd")),
        "kv_stack": lambda: FeedbackTransformerKV(FeedbackKVConfig(**fb, loop="autograd")),
        "kv_fused": lambda: FeedbackTransformerKV(FeedbackKVConfig(**fb, loop="fused")),
    }


def reason(err: BaseException) -> str:
    """One line saying why: the exception's type and the start of its message."""
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}"[:200] if text else type(err).__name__


def import_failure(err: BaseException, package: str, pip: str) -> str:
    """Why a peer is missing: not installed, installed without one of its own modules
    (another version), or its import raised (or called `sys.exit`)."""
    name = getattr(err, "name", None) or ""
    if isinstance(err, ModuleNotFoundError) and name == package:
        return f"not installed (pip install {pip})"
    if isinstance(err, ModuleNotFoundError) and name.startswith(package + "."):
        return f"installed, but incomplete: {reason(err)}"
    return f"import failed: {reason(err)}"


def peers(args) -> tuple[dict[str, Callable[[], nn.Module]], dict[str, str]]:
    """Peer implementations wrapped as `logits, _ = model(tokens [B, T])`, and why each
    missing one is missing (not installed, or its import raised)."""
    found, missing = {}, {}
    try:
        from labml_nn.transformers.feed_forward import FeedForward as LabmlFF
        from labml_nn.transformers.feedback import (FeedbackAttention,
                                                    FeedbackTransformerLayer)
        from labml_nn.transformers.feedback import FeedbackTransformerKV as LabmlKV
        with contextlib.suppress(ImportError):  # labml 0.5.3 + labml-nn 0.5.1 raise in it
            import labml.tracker
            labml.tracker.debug = lambda *a, **k: None

        class Labml(nn.Module):  # seq-first inside, batch-first outside
            def __init__(self):
                super().__init__()
                # is_kv_precomputed: FeedbackTransformerKV hands each layer keys/values
                # already projected to [S, B, H, D_h]; without it the attention projects
                # them again (the "mat1 and mat2 shapes cannot be multiplied" error)
                attn = FeedbackAttention(args.heads, args.d_model, 0.0,
                                         is_kv_precomputed=True)
                layer = FeedbackTransformerLayer(
                    d_model=args.d_model, attn=attn,
                    feed_forward=LabmlFF(args.d_model, args.d_ff, 0.0), dropout_prob=0.0)
                self.embed = nn.Embedding(VOCAB, args.d_model)
                self.body = LabmlKV(layer, args.layers, args.d_model, args.heads)
                self.head = nn.Linear(args.d_model, VOCAB)

            def forward(self, tokens):
                x = self.body(self.embed(tokens.t()))  # [T, B, D]
                return self.head(x).transpose(0, 1), None

        found["labml_kv"] = Labml
    except (Exception, SystemExit) as err:  # noqa: BLE001 - a broken install is a row
        missing["labml_kv"] = import_failure(err, "labml_nn", "labml-nn")
    try:
        from feedback_transformer_pytorch import FeedbackTransformer as Lucid

        class Lucidrains(nn.Module):
            def __init__(self):
                super().__init__()
                # seq_len=1: lucidrains' model runs each seq_len chunk in parallel and
                # feeds memory back only between chunks; one token per chunk is the
                # Feedback Transformer's token-by-token recurrence.
                self.body = Lucid(num_tokens=VOCAB, dim=args.d_model, depth=args.layers,
                                  seq_len=1, mem_len=max(args.lengths), heads=args.heads,
                                  dim_head=args.d_model // args.heads)

            def forward(self, tokens):
                return self.body(tokens), None

        found["lucidrains"] = Lucidrains
    except (Exception, SystemExit) as err:  # noqa: BLE001
        missing["lucidrains"] = import_failure(err, "feedback_transformer_pytorch",
                                               "feedback-transformer-pytorch")
    return found, missing


class Report:
    """Prints each row as soon as it is measured, flushed; with `jsonl`, also appends the
    row's figures to that file as one JSON line."""

    def __init__(self, stream, jsonl: str | None = None):
        self.stream = stream
        self.jsonl = open(jsonl, "w") if jsonl else None

    def __call__(self, text: str = "", **record) -> None:
        print(text, file=self.stream, flush=True)
        if self.jsonl is not None and record:
            self.jsonl.write(json.dumps(record) + "\n")
            self.jsonl.flush()


class Clock:
    """Seconds since the run began, against the optional `--time-limit`."""

    def __init__(self, limit: float | None):
        self.start, self.limit, self.skipped = time.perf_counter(), limit, []

    def over(self, what: str, report: Report) -> bool:
        """True (after printing that `what` is skipped) once the limit has passed."""
        elapsed = time.perf_counter() - self.start
        if self.limit is None or elapsed <= self.limit:
            return False
        report(f"  time limit ({self.limit:g} s) reached at {elapsed:.0f} s: skipping {what}",
               kind="time_limit", skipped=what)
        self.skipped.append(what)
        return True


def attempt(fn: Callable, device: torch.device):
    """`(fn(), None)`, or `(None, why)` if it raised: one broken model must not stop the
    others (CUDA's cached blocks are released after a failure, an out-of-memory one
    included)."""
    try:
        return fn(), None
    except Exception as err:  # noqa: BLE001 - any failure becomes a row saying why
        if device.type == "cuda":
            torch.cuda.empty_cache()
        return None, reason(err)


def precision(device: torch.device, dtype: str):
    """The context of a training step's forward pass: nothing for float32, autocast to
    bfloat16 for bfloat16."""
    if dtype == "float32":
        return contextlib.nullcontext
    return lambda: torch.autocast(device.type, dtype=torch.bfloat16)


def train_step(model: nn.Module, tokens: torch.Tensor,
               autocast: Callable = contextlib.nullcontext) -> None:
    with autocast():
        logits, _ = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
    model.zero_grad(set_to_none=True)
    loss.backward()


def timed(fn: Callable[[], None], device: torch.device) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one call."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - wall, time.process_time() - cpu


def train_block(model, tokens, autocast, steps: int) -> list[tuple[float, float]]:
    """One untimed step (the allocator settles into this model's sizes), then `steps`
    timed ones."""
    train_step(model, tokens, autocast)
    return [timed(lambda: train_step(model, tokens, autocast), tokens.device)
            for _ in range(steps)]


def peak_step_bytes(model: nn.Module, tokens: torch.Tensor,
                    autocast: Callable = contextlib.nullcontext) -> int:
    """Peak bytes one training step allocates on top of what was allocated before it
    (gradients of an earlier step released first)."""
    model.zero_grad(set_to_none=True)
    if tokens.is_cuda:
        torch.cuda.synchronize(tokens.device)
        before = torch.cuda.memory_allocated(tokens.device)
        torch.cuda.reset_peak_memory_stats(tokens.device)
        train_step(model, tokens, autocast)
        torch.cuda.synchronize(tokens.device)
        return torch.cuda.max_memory_allocated(tokens.device) - before
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        train_step(model, tokens, autocast)
    running, peak = 0, 0
    for e in sorted(prof.events(), key=lambda e: e.time_range.start):
        # an op's net allocations (its children's counted in theirs); "[memory]" = frees
        # outside any op
        running += (e.cpu_memory_usage if e.name == "[memory]"
                    else e.self_cpu_memory_usage)
        peak = max(peak, running)
    return peak


def median_ratio(mine: list[float], base: list[float] | None) -> float | None:
    """The median of the ratios of samples taken side by side (None without a base)."""
    if not base:
        return None
    return statistics.median(m / b for m, b in zip(mine, base))


def times(ratio: float | None) -> str:
    return "  n/a " if ratio is None else f"{ratio:5.2f}x"


def train_rows(args, device, dtype: str, builders: dict, report: Report,
               clock: Clock) -> dict:
    """Training steps of every model at every length, then the peak memory of one step,
    in `dtype`; each row printed as soon as it is measured."""
    autocast, out = precision(device, dtype), {"train": {}, "skipped": {}, "peak": {}}
    width = max(map(len, builders)) + 1

    def skip(name, why, where=""):
        out["skipped"][name] = why
        report(f"  {dtype:8s} {where}{name}: skipped — {why}", kind="skipped", dtype=dtype,
               model=name, why=why)

    torch.manual_seed(0)
    models = {}
    for name, build in builders.items():
        model, why = attempt(lambda: build().to(device), device)
        if why:
            skip(name, f"build failed: {why}")
        else:
            models[name] = model
    report(f"\ntraining step (forward + backward), {dtype}: median seconds, x parallel "
           f"(wall), x parallel (CPU time)")
    for t in args.lengths:
        if clock.over(f"training, {dtype}, T={t}", report):
            break
        tokens = torch.randint(0, VOCAB, (args.batch, t + 1), device=device)
        walls: dict[str, list[float]] = {n: [] for n in models}
        cpus: dict[str, list[float]] = {n: [] for n in models}
        for r in range(args.repeats):  # blocks in turn, so load changes hit all alike
            if r and clock.over(f"blocks {r + 1}.. of {dtype}, T={t}", report):
                break
            for name in list(models):
                block, why = attempt(
                    lambda: train_block(models[name], tokens, autocast, args.block), device)
                if why:
                    del models[name], walls[name], cpus[name]
                    skip(name, why, f"T={t:<4} ")
                    continue
                walls[name].append(statistics.median(w for w, _ in block))
                cpus[name].append(statistics.median(c for _, c in block))
        row = out["train"][str(t)] = {}
        for name in models:
            row[name] = v = dict(
                seconds=statistics.median(walls[name]),
                cpu_seconds=statistics.median(cpus[name]),
                ratio=median_ratio(walls[name], walls.get("parallel")),
                cpu_ratio=median_ratio(cpus[name], cpus.get("parallel")),
                blocks=len(walls[name]))
            report(f"  {dtype:8s} T={t:<4} {name:{width}s} {v['seconds']:8.4f} s  "
                   f"{times(v['ratio'])} parallel  (CPU time {times(v['cpu_ratio'])})",
                   kind="train", dtype=dtype, T=t, model=name, **v)
    t_mem = 128 if 128 in args.lengths else args.lengths[-1]
    if models and not clock.over(f"peak memory, {dtype}", report):
        how = "torch.cuda.max_memory_allocated" if device.type == "cuda" else (
            "torch.profiler allocations")
        report(f"\npeak memory of a training step at T={t_mem}, {dtype} ({how}):")
        tokens = torch.randint(0, VOCAB, (args.batch, t_mem + 1), device=device)
        out["peak"]["T"] = t_mem
        for name, model in models.items():
            nbytes, why = attempt(lambda: peak_step_bytes(model, tokens, autocast), device)
            if why:
                skip(name, why, "peak memory ")
                continue
            out["peak"][name] = nbytes
            report(f"  {dtype:8s} {name:{width}s} {nbytes / 2**20:9.1f} MiB", kind="peak",
                   dtype=dtype, T=t_mem, model=name, bytes=nbytes)
    return out


def decode_per_token(generate, n: int, device: torch.device) -> float:
    """Seconds per generated token (batch 1, greedy, with the model's cache) of
    `generate(prompt, n, temperature=0)`."""
    prompt = torch.zeros(1, 1, dtype=torch.long, device=device)
    wall, _ = timed(lambda: generate(prompt, n, temperature=0), device)
    return wall / n


@torch.inference_mode()
def replay_per_token(model: nn.Module, n: int, device: torch.device, backend: str) -> float:
    """Seconds per token of the compiled step alone, once made (`labnn.compiled.decoder`:
    on CUDA, replays of its recorded graph): a generation's steady state, without the
    prompt, the recording and the sampling that `decode_per_token` also counts."""
    tokens = torch.zeros(1, n + 1, dtype=torch.long, device=device)
    _, state = model(tokens[:, :1])
    ring = feedback_ring(state, compiled.ring_slots(model, 1, n))  # generate's own ring
    decode = compiled.decoder(model, ring, tokens[:, :1], backend=backend)
    wall, _ = timed(lambda: [decode(tokens[:, i : i + 1]) for i in range(1, n)], device)
    return wall / (n - 1)


@torch.no_grad()
def cache_bytes(model: nn.Module, n: int, device: torch.device) -> int:
    """Bytes of the model's decoding cache after `n` tokens."""
    tokens = torch.zeros(1, n, dtype=torch.long, device=device)
    if isinstance(model, TransformerLM):
        _, cache = model(tokens, use_cache=True)
        return sum(t.numel() * t.element_size() for layer in cache for t in layer)
    return model(tokens)[1].nbytes()


def decode_rows(args, device, report: Report, clock: Clock) -> tuple[dict, dict]:
    """Per-token decoding latency and cache bytes of each model (float32, eval mode),
    each paired with the parallel model's; each row printed when measured."""
    n, builders, rows, skipped = args.decode, ours(args), {}, {}
    compiled_label = "compiled + CUDA graph" if device.type == "cuda" else "compiled"
    report(f"\ndecoding, float32, batch 1, {n} tokens (greedy): ms per token, x parallel "
           f"(median of {args.repeats} pairs), cache bytes after {n} tokens")
    torch.manual_seed(0)
    models, generators, cache_of = {}, {}, {}
    for name in DECODERS:
        model, why = attempt(lambda: builders[name]().to(device).eval(), device)
        if why:
            skipped[name] = f"build failed: {why}"
            report(f"  {name}: skipped — {skipped[name]}", kind="skipped", model=name,
                   why=skipped[name])
            continue
        models[name], generators[name], cache_of[name] = model, model.generate, model
    for name, model_name in (("parallel_compiled", "parallel"), ("kv_compiled", "kv_fused")):
        if args.compile and model_name in models:  # the parallel model's own compiled step too
            model = models[model_name]
            generators[name] = lambda prompt, n, model=model, **kw: compiled.generate(
                model, prompt, n, backend=args.backend, **kw)
            cache_of[name] = model
    labels = {g: g for g in generators}
    for name in ("parallel_compiled", "kv_compiled"):
        if name in labels:
            labels[name] = f"{name} ({compiled_label}, {args.backend})"
    width = max(map(len, labels.values()), default=0) + 1

    def measure(name):
        generate, parallel = generators[name], generators.get("parallel")
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:  # e.g. no CUDA graph
            warnings.simplefilter("always")
            decode_per_token(generate, n, device)  # the same length: nothing compiles later
        warm_up = time.perf_counter() - start
        notes = [" ".join(str(w.message).split())[:200] for w in caught
                 if str(w.message).startswith("labnn.compiled")]
        mine, base = [], []
        for _ in range(args.repeats):  # pairs: the parallel model's call just before
            if parallel is not None and name != "parallel" and "parallel" in rows:
                base.append(decode_per_token(parallel, n, device))
            mine.append(decode_per_token(generate, n, device))
        nbytes = cache_bytes(cache_of[name], n, device)
        base_bytes = nbytes if name == "parallel" else rows.get("parallel", {}).get(
            "cache_bytes")
        return dict(ms_per_token=1e3 * statistics.median(mine),
                    latency_ratio=1.0 if name == "parallel" else median_ratio(mine, base),
                    cache_bytes=nbytes,
                    cache_ratio=base_bytes / nbytes if base_bytes else None,
                    warm_up_seconds=warm_up, warnings=notes)

    for name in generators:
        if clock.over(f"decoding {name}", report):
            continue
        v, why = attempt(lambda: measure(name), device)
        if why:
            skipped[name] = why
            report(f"  {name}: skipped — {why}", kind="skipped", model=name, why=why)
            continue
        rows[name] = v
        smaller = "" if v["cache_ratio"] is None else f" ({v['cache_ratio']:.1f}x smaller)"
        first = (f"; first call {v['warm_up_seconds']:.1f} s (compiles)"
                 if name.endswith("_compiled") else "")
        report(f"  {labels[name]:{width}s} {v['ms_per_token']:8.3f} ms/token  "
               f"{times(v['latency_ratio'])} parallel   cache {v['cache_bytes']:>11,} bytes"
               f"{smaller}{first}", kind="decode", model=name, **v)
        for note in v["warnings"]:  # the row's label may then claim too much
            report(f"    {name} warned: {note}")
    if "kv_compiled" in rows and not clock.over("decoding kv_step", report):
        fused = models["kv_fused"]
        seconds, why = attempt(lambda: [replay_per_token(fused, n, device, args.backend)
                                        for _ in range(args.repeats + 1)][1:], device)
        if why is None:
            ms = 1e3 * statistics.median(seconds)
            rows["kv_step"] = dict(ms_per_token=ms)
            base = rows.get("parallel", {}).get("ms_per_token")
            ratio = f"{ms / base:.2f}x parallel" if base else ""
            report(f"  {'kv_step (the ring step alone, once made)':{width}s} {ms:8.3f} "
                   f"ms/token  {ratio}", kind="decode", model="kv_step", ms_per_token=ms)
        else:
            report(f"  kv_step: skipped — {why}", kind="skipped", model="kv_step", why=why)
    return rows, skipped


def header(args, device) -> dict:
    return {
        "config": {k: getattr(args, k) for k in (
            "d_model", "heads", "layers", "d_ff", "batch", "lengths", "repeats", "block",
            "threads", "decode", "dtypes", "compile", "backend", "time_limit")},
        "device": str(device),
        "machine": timing.machine(device),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


def run(args, report: Report | None = None) -> dict:
    report = report or Report(sys.stdout)
    clock = Clock(args.time_limit)
    device = pick_device(args.device)
    result = header(args, device)
    c = result["config"]
    bf16 = (f"; bfloat16 = forward and loss under torch.autocast('{device.type}', "
            "dtype=torch.bfloat16), float32 weights (the fused loop computes in "
            "float32)" if "bfloat16" in args.dtypes else "")
    report(f"{device}: {result['machine']}, dtypes "
           f"{' + '.join(args.dtypes)}{bf16}; float32 matmul precision "
           f"{result['float32_matmul_precision']}; d_model {c['d_model']}, {c['heads']} "
           f"heads, {c['layers']} layers, d_ff {c['d_ff']}, batch {c['batch']}, T "
           f"{c['lengths']}, {c['threads']} threads, median of {c['repeats']} blocks of "
           f"{c['block']} steps, decoding {c['decode']} tokens", kind="header", **result)
    builders, missing = ours(args), {}
    if not args.no_peers:
        found, missing = peers(args)
        builders.update(found)
    result["peers_missing"] = missing
    for name, why in missing.items():
        report(f"  {name}: skipped — {why}", kind="skipped", model=name, why=why)
    result.update(train={}, skipped={}, peak_step_bytes={})
    for dtype in args.dtypes:
        out = train_rows(args, device, dtype, builders, report, clock)
        result["train"][dtype] = out["train"]
        result["skipped"][dtype] = out["skipped"]
        result["peak_step_bytes"][dtype] = out["peak"]
        if device.type == "cuda":  # the models of this dtype are gone: free their blocks
            torch.cuda.empty_cache()
    result["decode"], result["decode_skipped"] = decode_rows(args, device, report, clock)
    result["time_limit_skipped"] = clock.skipped
    result["seconds"] = time.perf_counter() - clock.start
    report(f"\ndone in {result['seconds']:.0f} s", kind="done", seconds=result["seconds"])
    return result


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[32, 64, 128, 256])
    p.add_argument("--d-model", dest="d_model", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-ff", dest="d_ff", type=int, default=1024)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--decode", type=int, default=256,
                   help="tokens to generate for the decoding latency")
    p.add_argument("--repeats", type=int, default=3,
                   help="blocks per model and length; decoding pairs per model")
    p.add_argument("--block", type=int, default=2,
                   help="timed training steps per block (after one untimed)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu",
                   help="cpu, cuda, mps or auto (labnn.training.trainer.pick_device)")
    p.add_argument("--dtype", choices=DTYPES,
                   help="the training step's precision (default float32)")
    p.add_argument("--dtypes", nargs="+", choices=DTYPES,
                   help="several precisions in one run, e.g. --dtypes float32 bfloat16")
    p.add_argument("--no-peers", action="store_true",
                   help="skip labml-nn and feedback-transformer-pytorch")
    p.add_argument("--compile", action="store_true",
                   help="also decode with labnn.compiled.generate (compiling takes a "
                        "minute; recorded as a CUDA graph on CUDA)")
    p.add_argument("--backend", default="inductor",
                   help="torch.compile backend for --compile")
    p.add_argument("--time-limit", dest="time_limit", type=float, default=None,
                   help="seconds; what would start after them is skipped, with a line")
    p.add_argument("--quick", action="store_true",
                   help="a tiny smoke run (explicit options still win)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object on stdout (the rows go to stderr)")
    p.add_argument("--jsonl", metavar="FILE",
                   help="also write each row to FILE as one JSON line, when measured")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = parser()
    if p.parse_args(argv).quick:
        p.set_defaults(**QUICK)
    args = p.parse_args(argv)
    if args.dtype and args.dtypes:
        p.error("give --dtype or --dtypes, not both")
    args.dtypes = args.dtypes or [args.dtype or "float32"]
    if args.device == "auto":
        args.device = None
    try:
        pick_device(args.device)
    except ValueError as err:  # one line, as argparse says any other mistake
        p.error(f"--device {args.device}: {err}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    report = Report(sys.stderr if args.json else sys.stdout, args.jsonl)
    try:
        result = run(args, report)
    finally:
        if report.jsonl is not None:
            report.jsonl.close()
    if args.json:
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
