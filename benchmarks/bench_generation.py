"""Per-token generation latency of `TransformerLM` at several context lengths: with its KV
cache, recomputing the whole context, and with a window of `attn_len` keys.

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
    python benchmarks/bench_generation.py --json     # one JSON object
    python benchmarks/bench_generation.py --quick    # a tiny smoke run
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from labnn import seed_everything
from labnn.training import timing
from labnn.training.trainer import pick_device
from labnn.transformer import TransformerConfig, TransformerLM

VARIANTS = ("cached", "recomputed", "window")


def per_token_seconds(model: TransformerLM, prompt: torch.Tensor, n: int, use_cache: bool,
                      device: torch.device) -> float:
    """Seconds per generated token after `prompt`: generating `n + 1` tokens minus
    generating 1 (the prompt's reading cancels), over `n`."""
    def run(k):
        return timing.times(lambda: model.generate(prompt, k, temperature=0,
                                                   use_cache=use_cache),
                            device, repeats=1, warmup=0)[0]
    return (run(n + 1) - run(1)) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[256, 1024, 2048],
                        help="prompt lengths c, one row each")
    parser.add_argument("--new", type=int, default=32, help="tokens generated per timing")
    parser.add_argument("--window", type=int, default=64, help="attn_len of the window row")
    parser.add_argument("--repeats", type=int, default=5, help="rounds of the variants")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--quick", action="store_true", help="a tiny smoke run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.contexts, args.new, args.window, args.repeats = [16, 32], 4, 8, 1
    torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    seed_everything(0)
    # nanoGPT's CPU "baby" Shakespeare model, with a context long enough for every token
    size = dict(vocab_size=65, seq_len=max(args.contexts) + args.new + 1, d_model=128,
                n_heads=4, n_layers=4, bias=False)
    full = TransformerLM(TransformerConfig(**size)).to(device).eval()
    window = TransformerLM(TransformerConfig(**size, attn_len=args.window)).to(device).eval()
    window.load_state_dict(full.state_dict())  # attn_len adds no weights
    models = {"cached": (full, True), "recomputed": (full, False), "window": (window, True)}
    result = {"device": str(device), "threads": args.threads, "repeats": args.repeats,
              "new": args.new, "window": args.window, "params": full.num_params(),
              "torch": torch.__version__, "rows": []}
    if not args.json:
        print(f"TransformerLM ({result['params']:,} params), batch 1, {device}, "
              f"{args.threads} thread(s), {args.new} tokens per timing, median of "
              f"{args.repeats}", flush=True)
        print(f"{'context':>8} {'KV cache':>10} {'recomputed':>11} {'cached is':>10} "
              f"{f'window {args.window}':>10} {'window is':>10}", flush=True)
    for c in args.contexts:
        prompt = torch.randint(65, (1, c), device=device)
        for model, use_cache in models.values():  # warm-up
            per_token_seconds(model, prompt, 2, use_cache, device)
        rounds = [{name: per_token_seconds(model, prompt, args.new, use_cache, device)
                   for name, (model, use_cache) in models.items()}
                  for _ in range(args.repeats)]
        row = {"context": c, **{f"{n}_ms": 1e3 * statistics.median(r[n] for r in rounds)
                                for n in VARIANTS},
               "cached_speedup": statistics.median(r["recomputed"] / r["cached"] for r in rounds),
               "window_speedup": statistics.median(r["cached"] / r["window"] for r in rounds)}
        result["rows"].append(row)
        if not args.json:
            print(f"{c:>8} {row['cached_ms']:>7.3f} ms {row['recomputed_ms']:>8.3f} ms "
                  f"{row['cached_speedup']:>9.1f}x {row['window_ms']:>7.3f} ms "
                  f"{row['window_speedup']:>9.2f}x", flush=True)
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
