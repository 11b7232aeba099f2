"""Per-token generation cost: Transformer-XL with its memory as the cache vs. a vanilla
transformer that recomputes its whole window for every token (Dai et al. 2019, Table 9,
per-token time on one GPU: 363x at attention length 800, 773x at 1,800, 1,874x at 3,800).

Both models have the same width and depth (by default those of the models trained in
`benchmarks/xl_claims.py`: d_model 128, 4 heads, 4 layers). For attention length `A`:

* XL: `model.step(token, cache)` token after token, each step's cache fed to the next,
  the cache full with `A - 1` positions (every new token sees `A` keys): the time of a
  run of steps divided by its tokens. The runs continue one long generation, so the
  cache's storage moves (a copy of the window) once every `A` or so tokens, as in real
  use, not at the start of every run. Each call of the public `step` passes its door
  (every module's eval mode, the ids' range, the cache: about 20 us on the 2-core VM of
  2026-11-30), as a loop of one's own calling it would;
* generate: the same tokens through what `model.generate` runs per token, `_step` (the
  model's part of it: the draw of the token, `sample_next`, is not timed), past the door
  that `generate` passes once for the whole prompt;
* vanilla: `TransformerLM` (learned positions, `seq_len = A`) runs the last `A` tokens,
  as its `generate(use_cache=False)` does once the window is full: absolute positions
  shift with every new token, so nothing computed for the previous window can be reused;
* with `--ring`, the same steps through the ring step as written (`xl_ring_step`, the
  cache moved into a ring of `A` slots), and with `--compile` through the compiled ring
  step (inductor), with `--kernels` through labnn's Triton kernels for it
  (`labnn.compiled.kernels`), all by `labnn.compiled.decoder`: on a GPU the step is
  recorded once as a CUDA graph and replayed per token. The set-up time (compiling, recording:
  the first call) is reported apart.

XL runs and vanilla calls take turns after a warm-up, in one process, one thread by
default; the speed-up is the median of the ratios of each pair (both timed in the same
moments of a machine whose speed drifts), the times are medians too.
By default the clock is the process's CPU time (`time.process_time`): on a machine
shared with other jobs it counts only the work of this process, while wall time also
counts the time spent waiting for a core (on an idle machine the two agree).
`--clock wall` uses `time.perf_counter`; on a GPU (`--device cuda`) the clock is wall
time, each timed call bracketed by `torch.cuda.synchronize()`. Each row prints as soon
as it is measured.

    python benchmarks/bench_xl.py            # table
    python benchmarks/bench_xl.py --json     # one JSON object (rows on stderr)
    python benchmarks/bench_xl.py --quick    # tiny smoke run
    python benchmarks/bench_xl.py --compile --attn-lens 1024   # + the compiled step
    python benchmarks/bench_xl.py --device cuda --d-model 512 --n-heads 8 --n-layers 12 \
        --attn-lens 800 1800 3800 --ring --compile --kernels      # Table 9's lengths
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings

import torch

from labnn import compiled

from labnn import seed_everything
from labnn.compiled.rings import xl_ring
from labnn.training import timing
from labnn.training.trainer import pick_device
from labnn.transformer import TransformerConfig, TransformerLM
from labnn.xl.model import TransformerXL, XLConfig

VOCAB = 65  # Tiny Shakespeare's characters


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


def paired_ms(fns: dict, repeats: int, clock=time.process_time,
              device: torch.device = torch.device("cpu")) -> dict:
    """Time each function `repeats` times, taking turns (a, b, a, b, ...) so that both
    see the same moments of a machine whose speed drifts. Returns every function's times
    in ms, in order, and the wall seconds of its warm-up call (a compiled function's
    compile time), or, for a function whose warm-up raised, why (it is not timed), and,
    for one that `labnn.compiled` ran eagerly instead, why (`<name>_fell_back`). On a GPU
    each call is bracketed by `torch.cuda.synchronize()`: the time is that of the work,
    not of its launch."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    warm_up = {}
    for name, fn in list(fns.items()):
        sync()
        start = time.perf_counter()
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                fn()  # warm-up (a compiled function compiles here, a graph is recorded here)
        except Exception as err:  # a broken variant: its cells say why, the others go on
            if name == "vanilla":
                raise
            warm_up[name] = f"failed: {type(err).__name__}: {' '.join(str(err).split())[:120]}"
            del fns[name]
            continue
        sync()
        warm_up[name] = time.perf_counter() - start
        fell_back = [str(w.message) for w in caught if "instead" in str(w.message)]
        if fell_back:  # labnn.compiled ran the step eagerly: not what the column names
            warm_up[f"{name}_fell_back"] = fell_back[0].removeprefix("labnn.compiled: ")
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            sync()
            start = clock()
            fn()
            sync()
            times[name].append(1e3 * (clock() - start))
    return times, warm_up


@torch.inference_mode()
def measure(attn_len: int, d_model: int, n_heads: int, n_layers: int, batch_size: int,
            xl_steps: int, repeats: int, clock=time.process_time,
            backends: tuple[str, ...] = (), device: torch.device = torch.device("cpu"),
            ) -> dict:
    """One row: the vanilla window's time and, per variant, the time per XL token and
    the speed-up. Variants: `xl` (`model.step`, eager, its door at every token),
    `generate` (`model._step`, what `generate` calls per token) and, per backend in `backends`,
    the ring step through `labnn.compiled.decoder` (`eager`: the ring step as written;
    `inductor`: compiled), recorded as a CUDA graph on a GPU."""
    seed_everything(0)
    xl_config = XLConfig(VOCAB, d_model, n_heads, n_layers, mem_len=attn_len - 1)
    xl = TransformerXL(xl_config).to(device).eval()
    vanilla_config = TransformerConfig(VOCAB, attn_len, d_model, n_heads, n_layers)
    vanilla = TransformerLM(vanilla_config).to(device).eval()
    window = torch.randint(VOCAB, (batch_size, attn_len), device=device)
    _, full = xl.step(window[:, :-1])  # memory full: attn_len - 1 positions
    tokens = torch.randint(VOCAB, (batch_size, xl_steps), device=device)

    cache = generate_cache = full

    # one long generation: each run goes on from the cache the previous run left
    def step_tokens():
        nonlocal cache
        for i in range(xl_steps):
            _, cache = xl.step(tokens[:, i : i + 1], cache)

    def generate_tokens():  # generate's own call per token (TransformerXL.generate)
        nonlocal generate_cache
        for i in range(xl_steps):
            _, generate_cache = xl._step(tokens[:, i : i + 1], generate_cache, None)

    fns = {"xl": step_tokens, "generate": generate_tokens, "vanilla": lambda: vanilla(window)}
    decoders = {}  # backend -> decode, made in the first (untimed) call
    for backend in backends:
        ring = xl_ring(full, attn_len - 1)  # the same full cache, in a ring

        def ring_tokens(ring=ring, backend=backend):
            if backend not in decoders:
                decoders[backend] = compiled.decoder(xl, ring, tokens[:, :1],
                                                     backend=backend)
            decode = decoders[backend]
            for i in range(xl_steps):
                decode(tokens[:, i : i + 1])

        fns[backend] = ring_tokens
    times, warm_up = paired_ms(fns, repeats, clock, device)
    row = {"attn_len": attn_len,
           "vanilla_ms": round(statistics.median(times["vanilla"]), 2)}
    for name in [name for name in warm_up if name not in times and "_fell_back" not in name]:
        row[f"{name}_failed"] = warm_up[name]
    row.update((key, note) for key, note in warm_up.items() if key.endswith("_fell_back"))
    for name in [name for name in fns if name != "vanilla"]:
        per_token = [t / xl_steps for t in times[name]]
        ratios = [v / x for v, x in zip(times["vanilla"], per_token)]
        row[f"{name}_ms"] = round(statistics.median(per_token), 4)
        row[f"{name}_speedup"] = round(statistics.median(ratios), 1)
        row[f"{name}_speedup_min"] = round(min(ratios), 1)
        if name in backends:
            row[f"{name}_setup_s"] = round(warm_up[name], 1)
    return row


LABELS = {"xl": "XL step", "generate": "generate's step", "eager": "ring",
          "inductor": "compiled", "kernels": "kernels"}
EAGER = ("xl", "generate")  # TransformerXL's own calls, before any backend's


def header(backends: tuple[str, ...], graph: bool) -> str:
    """The table's column names: vanilla, then each XL variant's ms and speed-up."""
    cells = [f"{'attn_len':>8}", f"{'vanilla ms':>11}"]
    for name in (*EAGER, *backends):
        label = LABELS.get(name, name) + (" + graph" if graph and name in backends else "")
        cells.append(f"{label + ' ms':>22} {'speed-up':>9}")
    return " ".join(cells)


def line(row: dict, backends: tuple[str, ...]) -> str:
    """One measured row, as soon as it is measured."""
    cells = [f"{row['attn_len']:>8}", f"{row['vanilla_ms']:>11.2f}"]
    for name in (*EAGER, *backends):
        if f"{name}_failed" in row:
            cells.append(f"{'failed (below)':>22} {'':>9}")
            continue
        cells.append(f"{row[f'{name}_ms']:>22.4f} {row[f'{name}_speedup']:>8.1f}x")
    setup = [f"{LABELS.get(b, b)} {row[f'{b}_setup_s']} s" for b in backends
             if f"{b}_setup_s" in row]
    failed = [f"\n    {LABELS.get(b, b)} {row[f'{b}_failed']}" for b in backends
              if f"{b}_failed" in row]
    failed += [f"\n    {LABELS.get(b, b)} fell back: {row[f'{b}_fell_back']} (its column "
               "times that)" for b in backends if f"{b}_fell_back" in row]
    return (" ".join(cells) + (f"   (set-up: {', '.join(setup)})" if setup else "")
            + "".join(failed))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--attn-lens", type=int, nargs="+", default=[128, 256, 512, 1024, 2048])
    add("--d-model", type=int, default=128)
    add("--n-heads", type=int, default=4)
    add("--n-layers", type=int, default=4)
    add("--batch-size", type=int, default=1, help="streams generated side by side")
    add("--threads", type=int, default=1,
        help="torch threads (1 = fair on a shared machine)")
    add("--device", default="cpu", help="cpu or cuda (labnn.training.trainer.pick_device)")
    add("--clock", choices=sorted(CLOCKS), default=None,
        help="process CPU time or wall time (default: cpu on a CPU, wall on a GPU)")
    add("--repeats", type=int, default=9,
        help="timed (XL run, vanilla call) pairs per length")
    add("--steps", type=int, default=64, help="XL tokens per timed run")
    add("--ring", action="store_true",
        help="also time the ring step as written (labnn.compiled.decoder, backend "
             "eager; a CUDA graph on a GPU)")
    add("--compile", action="store_true",
        help="also time the compiled ring step (labnn.compiled; compiles per length; "
             "a CUDA graph on a GPU)")
    add("--backend", default="inductor", help="torch.compile backend for --compile")
    add("--kernels", action="store_true",
        help="also time labnn's Triton kernels for the ring step (labnn.compiled.kernels; "
             "a GPU, or TRITON_INTERPRET=1; a CUDA graph on a GPU)")
    add("--quick", action="store_true", help="tiny smoke run")
    add("--json", action="store_true",
        help="print one JSON object on stdout (each row on stderr as it is measured)")
    args = parser.parse_args(argv)
    try:
        device = pick_device(args.device)
    except ValueError as err:  # one line, as argparse says any other mistake
        parser.error(f"--device {args.device}: {err}")
    if args.quick:
        args.attn_lens, args.d_model, args.n_heads, args.n_layers = [16, 32], 32, 2, 2
        args.backend, args.compile = "eager", True  # no code generation: seconds
    torch.set_num_threads(args.threads)
    steps, repeats = (4, 2) if args.quick else (args.steps, args.repeats)
    size = (args.d_model, args.n_heads, args.n_layers, args.batch_size)
    clock_name = args.clock or ("wall" if device.type == "cuda" else "cpu")
    clock = CLOCKS[clock_name]
    backends = tuple(dict.fromkeys(
        (["eager"] if args.ring else []) + ([args.backend] if args.compile else [])
        + (["kernels"] if args.kernels else [])))
    graph = device.type == "cuda"
    result = {
        "benchmark": "xl_generation",
        "hardware": f"{timing.machine(device)}, fp32",
        "clock": clock_name,
        "model": {"d_model": args.d_model, "n_heads": args.n_heads,
                  "n_layers": args.n_layers, "vocab_size": VOCAB},
        "batch_size": args.batch_size,
        "rows": [],
    }
    if not args.json:
        print(f"per-token generation, batch {args.batch_size}, {result['hardware']}, "
              f"{clock_name} time; model {result['model']}; {steps} tokens per run, "
              f"{repeats} pairs", flush=True)
        print(header(backends, graph), flush=True)
    for a in args.attn_lens:
        row = measure(a, *size, steps, repeats, clock, backends, device)
        result["rows"].append(row)
        if args.json:  # each row as it is measured, on stderr: a run cut off keeps them
            print(json.dumps(row), file=sys.stderr, flush=True)
        else:
            print(line(row, backends), flush=True)
    if args.json:
        print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
