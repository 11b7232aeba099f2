"""Per-token generation latency of `TransformerLM`: with the KV cache vs recomputing the
whole context.

Both variants run side by side in one process, alternating, and the median of the
repeats is reported.

    python benchmarks/bench_generation.py            # a table
    python benchmarks/bench_generation.py --json     # one JSON object
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from labnn.transformer import TransformerConfig, TransformerLM


def per_token_seconds(model: TransformerLM, n: int, use_cache: bool) -> float:
    prompt = torch.zeros(1, 1, dtype=torch.long)
    start = time.perf_counter()
    model.generate(prompt, n, temperature=0, use_cache=use_cache)
    return (time.perf_counter() - start) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="a tiny smoke run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.tokens, args.repeats = 16, 1
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    # nanoGPT's CPU "baby" Shakespeare model, with a context long enough for every
    # generated token
    config = TransformerConfig(vocab_size=65, seq_len=args.tokens + 1, d_model=128,
                               n_heads=4, n_layers=4, bias=False)
    model = TransformerLM(config).eval()
    per_token_seconds(model, 8, True), per_token_seconds(model, 8, False)  # warm-up
    times = {"cached": [], "uncached": []}
    for _ in range(args.repeats):
        for name in times:
            times[name].append(per_token_seconds(model, args.tokens, name == "cached"))
    cached, uncached = (statistics.median(times[k]) for k in ("cached", "uncached"))
    result = {
        "tokens": args.tokens, "threads": args.threads, "repeats": args.repeats,
        "params": model.num_params(), "cached_ms_per_token": cached * 1e3,
        "uncached_ms_per_token": uncached * 1e3, "speedup": uncached / cached,
        "torch": torch.__version__,
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"TransformerLM ({result['params']:,} params), {args.tokens} tokens, "
          f"{args.threads} threads, median of {args.repeats}")
    print(f"  with KV cache     {result['cached_ms_per_token']:8.3f} ms/token")
    print(f"  recompute context {result['uncached_ms_per_token']:8.3f} ms/token")
    print(f"  cached is {result['speedup']:.1f}x faster")


if __name__ == "__main__":
    main()
