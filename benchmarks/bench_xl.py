"""Per-token generation cost: Transformer-XL with its memory as the cache vs. a vanilla
transformer that recomputes its whole window for every token (Dai et al. 2019, Table 9:
363x at attention length 800, 773x at 1,800, 1,874x at 3,800 on GPUs).

Both models have the same width and depth (by default those of the models trained in
`benchmarks/xl_claims.py`: d_model 128, 4 heads, 4 layers). For attention length `A`:

* XL: `model.step(token, cache)` token after token, each step's cache fed to the next,
  the cache full with `A - 1` positions (every new token sees `A` keys): the time of a
  run of steps divided by its tokens. The runs continue one long generation, so the
  cache's storage moves (a copy of the window) once every `A` or so tokens, as in real
  use, not at the start of every run;
* vanilla: `TransformerLM` (learned positions, `seq_len = A`) runs the last `A` tokens,
  as its `generate(use_cache=False)` does once the window is full: absolute positions
  shift with every new token, so nothing computed for the previous window can be reused;
* with `--compile`, XL compiled: the same steps through `labnn.compiled`'s compiled ring
  step (`xl_ring_step`, inductor), the cache moved into a ring of `A` slots; the
  compile time (the first call) is reported apart.

XL runs and vanilla calls take turns after a warm-up, in one process, one thread by
default; the speed-up is the median of the ratios of each pair (both timed in the same
moments of a machine whose speed drifts), the times are medians too.
By default the clock is the process's CPU time (`time.process_time`): on a machine
shared with other jobs it counts only the work of this process, while wall time also
counts the time spent waiting for a core (on an idle machine the two agree).
`--clock wall` uses `time.perf_counter`.

    python benchmarks/bench_xl.py            # table
    python benchmarks/bench_xl.py --json     # one JSON object
    python benchmarks/bench_xl.py --quick    # tiny smoke run
    python benchmarks/bench_xl.py --compile --attn-lens 1024   # + the compiled step
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch

from labnn import seed_everything
from labnn.compiled import compile_step
from labnn.ring_cache import xl_ring, xl_ring_step
from labnn.transformer import TransformerConfig, TransformerLM
from labnn.xl import TransformerXL, XLConfig

VOCAB = 65  # Tiny Shakespeare's characters


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


def paired_ms(fns: dict, repeats: int, clock=time.process_time) -> dict:
    """Time each function `repeats` times, taking turns (a, b, a, b, ...) so that both
    see the same moments of a machine whose speed drifts. Returns every function's times
    in ms, in order, and the wall seconds of its warm-up call (a compiled function's
    compile time)."""
    warm_up = {}
    for name, fn in fns.items():
        start = time.perf_counter()
        fn()  # warm-up (a compiled function compiles here)
        warm_up[name] = time.perf_counter() - start
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = clock()
            fn()
            times[name].append(1e3 * (clock() - start))
    return times, warm_up


@torch.inference_mode()
def measure(attn_len: int, d_model: int, n_heads: int, n_layers: int, batch_size: int,
            xl_steps: int, repeats: int, clock=time.process_time,
            backend: str | None = None) -> dict:
    seed_everything(0)
    xl_config = XLConfig(VOCAB, d_model, n_heads, n_layers, mem_len=attn_len - 1)
    xl = TransformerXL(xl_config).eval()
    vanilla_config = TransformerConfig(VOCAB, attn_len, d_model, n_heads, n_layers)
    vanilla = TransformerLM(vanilla_config).eval()
    window = torch.randint(VOCAB, (batch_size, attn_len))
    _, full = xl.step(window[:, :-1])  # memory full: attn_len - 1 positions
    tokens = torch.randint(VOCAB, (batch_size, xl_steps))

    cache = full

    # one long generation: each run goes on from the cache the previous run left
    def generate_tokens():
        nonlocal cache
        for i in range(xl_steps):
            _, cache = xl.step(tokens[:, i : i + 1], cache)

    fns = {"xl": generate_tokens, "vanilla": lambda: vanilla(window)}
    if backend is not None:
        step = compile_step(xl_ring_step, backend, window.device)
        ring = xl_ring(full, attn_len - 1)  # the same full cache, in a ring

        def compiled_tokens():
            for i in range(xl_steps):
                step(xl, xl.embed(tokens[:, i : i + 1])[:, 0], ring)

        fns["compiled"] = compiled_tokens
    times, warm_up = paired_ms(fns, repeats, clock)
    row = {"attn_len": attn_len,
           "vanilla_ms": round(statistics.median(times["vanilla"]), 2)}
    for name in [name for name in fns if name != "vanilla"]:
        per_token = [t / xl_steps for t in times[name]]
        ratios = [v / x for v, x in zip(times["vanilla"], per_token)]
        row[f"{name}_ms"] = round(statistics.median(per_token), 3)
        row[f"{name}_speedup"] = round(statistics.median(ratios), 1)
        row[f"{name}_speedup_min"] = round(min(ratios), 1)
    if backend is not None:
        row["compile_s"] = round(warm_up["compiled"], 1)
    return row


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
    add("--clock", choices=sorted(CLOCKS), default="cpu",
        help="process CPU time or wall time")
    add("--repeats", type=int, default=9,
        help="timed (XL run, vanilla call) pairs per length")
    add("--compile", action="store_true",
        help="also time the compiled ring step (labnn.compiled; compiles per length)")
    add("--backend", default="inductor", help="torch.compile backend for --compile")
    add("--quick", action="store_true", help="tiny smoke run")
    add("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.quick:
        args.attn_lens, args.d_model, args.n_heads, args.n_layers = [16, 32], 32, 2, 2
        args.backend = "eager"  # no code generation: seconds, not minutes
    torch.set_num_threads(args.threads)
    steps, repeats = (4, 2) if args.quick else (64, args.repeats)
    size = (args.d_model, args.n_heads, args.n_layers, args.batch_size)
    clock = CLOCKS[args.clock]
    backend = args.backend if args.compile or args.quick else None
    rows = [measure(a, *size, steps, repeats, clock, backend) for a in args.attn_lens]
    threads = f"{args.threads} torch thread(s)"
    result = {
        "benchmark": "xl_generation",
        "hardware": f"{platform.machine()} CPU, {threads}, torch {torch.__version__}",
        "clock": args.clock,
        "model": {"d_model": args.d_model, "n_heads": args.n_heads,
                  "n_layers": args.n_layers, "vocab_size": VOCAB},
        "batch_size": args.batch_size,
        "rows": rows,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"per-token generation, batch {args.batch_size}, {result['hardware']}, "
              f"{args.clock} time; model {result['model']}")
        compiled = " (compile s)" if backend else ""
        print(f"{'attn_len':>8} {'XL step (ms)':>13} {'vanilla (ms)':>13} "
              f"{'speed-up':>9}" + (f" {'compiled (ms)':>14} {'speed-up':>9} "
                                    f"{'min':>7}{compiled}" if backend else ""))
        for r in rows:
            line = (f"{r['attn_len']:>8} {r['xl_ms']:>13.3f} {r['vanilla_ms']:>13.2f} "
                    f"{r['xl_speedup']:>8.1f}x")
            if backend:
                line += (f" {r['compiled_ms']:>14.3f} {r['compiled_speedup']:>8.1f}x "
                         f"{r['compiled_speedup_min']:>6.1f}x ({r['compile_s']} s)")
            print(line)
    return result


if __name__ == "__main__":
    main()
