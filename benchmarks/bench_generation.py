"""Per-token generation latency of `TransformerLM` at several context lengths: with its KV
cache, recomputing the whole context, with a window of `attn_len` keys, and (`--compile`)
through `labnn.compiled` (a ring of fixed shape, one compiled step; a CUDA graph on a GPU).

For a context of `c` tokens the model reads a random prompt of `c` tokens, then generates
`--new` more (greedy); the time per token is that of generating `new + 1` tokens minus
that of generating 1 (which reads the prompt too), over `new`. The variants take turns in
one process, `--repeats` rounds, after a warm-up; times are medians of the rounds and a
ratio is the median of the rounds' ratios (each round's calls run in the same moments of
a machine whose speed drifts). The windowed model has the same weights, with
`attn_len = --window`: its generation keeps only the last `--window` keys and values per
layer (`TransformerLM.generate`). Each row prints as soon as it is measured.

The clock is `labnn.training.timing`'s: this process's CPU time with one torch thread
(the default), else wall time; on a GPU each call is waited for.

    python benchmarks/bench_generation.py            # a table
    python benchmarks/bench_generation.py --json     # one JSON object (rows on stderr)
    python benchmarks/bench_generation.py --quick    # a tiny smoke run
    python benchmarks/bench_generation.py --compile  # + labnn.compiled.generate
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch

from labnn import compiled, seed_everything
from labnn.training import timing
from labnn.training.trainer import pick_device
from labnn.transformer import TransformerConfig, TransformerLM

def per_token_seconds(generate, prompt: torch.Tensor, n: int, device: torch.device) -> float:
    """Seconds per generated token after `prompt`: `generate(prompt, k)` of `n + 1` tokens
    minus that of 1 (the prompt's reading cancels), over `n`."""
    def run(k):
        return timing.times(lambda: generate(prompt, k), device, repeats=1, warmup=0)[0]
    return (run(n + 1) - run(1)) / n


def generator(model: TransformerLM, use_cache: bool = True, compile: bool = False):
    """`(prompt, n) -> tokens`: greedy, eager or through `labnn.compiled`."""
    if compile:
        return lambda prompt, n: compiled.generate(model, prompt, n, temperature=0)
    return lambda prompt, n: model.generate(prompt, n, temperature=0, use_cache=use_cache)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[256, 1024, 2048],
                        help="prompt lengths c, one row each")
    parser.add_argument("--new", type=int, default=32, help="tokens generated per timing")
    parser.add_argument("--window", type=int, default=64, help="attn_len of the window row")
    parser.add_argument("--repeats", type=int, default=5, help="rounds of the variants")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--compile", action="store_true",
                        help="also generate through labnn.compiled (the first call compiles)")
    parser.add_argument("--quick", action="store_true", help="a tiny smoke run")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object on stdout (each row on stderr as measured)")
    args = parser.parse_args()
    if args.quick:
        args.contexts, args.new, args.window, args.repeats = [16, 32], 4, 8, 1
    torch.set_num_threads(args.threads)
    try:
        device = pick_device(args.device)
    except ValueError as err:  # one line, as argparse says any other mistake
        parser.error(f"--device {args.device}: {err}")
    seed_everything(0)
    # nanoGPT's CPU "baby" Shakespeare model, with a context long enough for every token
    size = dict(vocab_size=65, seq_len=max(args.contexts) + args.new + 1, d_model=128,
                n_heads=4, n_layers=4, bias=False)
    full = TransformerLM(TransformerConfig(**size)).to(device).eval()
    window = TransformerLM(TransformerConfig(**size, attn_len=args.window)).to(device).eval()
    window.load_state_dict(full.state_dict())  # attn_len adds no weights
    runs = {"cached": generator(full), "recomputed": generator(full, use_cache=False),
            "window": generator(window)}
    if args.compile:
        runs["compiled"] = generator(full, compile=True)
    result = {"device": str(device), "threads": args.threads, "repeats": args.repeats,
              "new": args.new, "window": args.window, "params": full.num_params(),
              "machine": timing.machine(device), "rows": []}
    if not args.json:
        print(f"TransformerLM ({result['params']:,} params), batch 1, {device}: "
              f"{result['machine']}; {args.new} tokens per timing, median of "
              f"{args.repeats}", flush=True)
        print(f"{'context':>8} {'KV cache':>10} {'recomputed':>11} {'cached is':>10} "
              f"{f'window {args.window}':>10} {'window is':>10}"
              + (f" {'compiled':>10} {'compiled is':>12}" if args.compile else ""),
              flush=True)
    for c in args.contexts:
        prompt = torch.randint(65, (1, c), device=device)
        for name, run in runs.items():  # warm-up; the compiled step compiles for the ring
            # of the timed runs (c + new positions: another size would compile in a round)
            per_token_seconds(run, prompt, args.new if name == "compiled" else 2, device)
        rounds = [{name: per_token_seconds(run, prompt, args.new, device)
                   for name, run in runs.items()} for _ in range(args.repeats)]
        row = {"context": c, **{f"{n}_ms": 1e3 * statistics.median(r[n] for r in rounds)
                                for n in runs},
               "cached_speedup": statistics.median(r["recomputed"] / r["cached"] for r in rounds),
               "window_speedup": statistics.median(r["cached"] / r["window"] for r in rounds)}
        if args.compile:
            row["compiled_speedup"] = statistics.median(r["cached"] / r["compiled"]
                                                        for r in rounds)
        result["rows"].append(row)
        if args.json:  # each row as it is measured, on stderr: a run cut off keeps them
            print(json.dumps(row), file=sys.stderr, flush=True)
        else:
            print(f"{c:>8} {row['cached_ms']:>7.3f} ms {row['recomputed_ms']:>8.3f} ms "
                  f"{row['cached_speedup']:>9.1f}x {row['window_ms']:>7.3f} ms "
                  f"{row['window_speedup']:>9.2f}x"
                  + (f" {row['compiled_ms']:>7.3f} ms {row['compiled_speedup']:>11.2f}x"
                     if args.compile else ""), flush=True)
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
