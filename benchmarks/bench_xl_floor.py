"""What bounds XL's eager token step on a CPU: the bytes it reads, or the calls it makes.

The Benchmarks page argues that `TransformerXL.step` at attention length 1,024 ($d_{model}$
128, 4 heads, 4 layers, batch 1) is bound by running some hundreds of small operations from
Python, not by memory traffic. This script measures each piece of that argument in one
process, one thread, printing each row as it is measured:

* `stream`: read bandwidth of `x.sum()` over a tensor that fits the cache (4 MiB, the size
  of the step's cached keys and values) and over one that does not (512 MiB);
* `bytes`: what one step reads (cached keys and values, relative-position tables, weights)
  and the time those bytes take at the measured bandwidths;
* `step`: the step itself (median of runs of 64 tokens, each cache fed to the next);
* `calls`: the ATen operations of one ordinary step (`torch.profiler`, views included;
  one that appends to its cache in place, not one that copies it) and the step's time per
  operation;
* `module reads`: reading a weight through `nn.Module` attributes
  (`model.blocks[0].attn.qkv.weight`, four lookups) against a local name, and how many
  parameter tensors the model holds (each read at least once per step).

    python benchmarks/bench_xl_floor.py            # table
    python benchmarks/bench_xl_floor.py --json     # one JSON object
    python benchmarks/bench_xl_floor.py --quick    # tiny smoke run
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import timeit

import torch

from labnn import seed_everything
from labnn.training import timing
from labnn.xl.model import TransformerXL, XLConfig

VOCAB = 65  # Tiny Shakespeare's characters
MiB = 2**20


def read_gb_per_s(n_bytes: int, repeats: int) -> float:
    """Bandwidth of summing a float32 tensor of `n_bytes` (the best of `repeats`)."""
    x = torch.ones(n_bytes // 4)
    x.sum()  # warm: pages touched, caches filled
    best = min(timeit.repeat(x.sum, number=1, repeat=repeats))
    return n_bytes / best / 1e9


def step_bytes(model: TransformerXL, cache) -> dict:
    """The bytes one step reads: the cached keys and values, the tables of relative keys
    (`XLCache.rel_keys`), the weights."""
    kv = sum(k.nbytes + v.nbytes for buffer in cache.kv for k, v in [tuple(buffer)])
    tables = sum(r.nbytes for r in cache.rel_keys if r is not None)
    weights = sum(p.nbytes for p in model.parameters())
    return {"kv": kv, "tables": tables, "weights": weights}


@torch.inference_mode()
def measure(attn_len: int, d_model: int, n_heads: int, n_layers: int, steps: int,
            repeats: int, stream_sizes: tuple[int, int]) -> dict:
    """Every figure of the table, printed as it is measured."""
    out = {}
    for name, size in zip(("cache", "memory"), stream_sizes):
        out[f"stream_{name}_gb_s"] = round(read_gb_per_s(size, repeats), 1)
        print(f"stream   {size / MiB:7.0f} MiB ({name}): {out[f'stream_{name}_gb_s']} GB/s",
              flush=True)
    seed_everything(0)
    model = TransformerXL(XLConfig(VOCAB, d_model, n_heads, n_layers,
                                   mem_len=attn_len - 1)).eval()
    _, cache = model.step(torch.randint(VOCAB, (1, attn_len - 1)))
    sizes = step_bytes(model, cache)
    total = sum(sizes.values())
    out["step_mib"] = round(total / MiB, 2)
    out["bytes_ms"] = [round(1e3 * total / (1e9 * out[f"stream_{n}_gb_s"]), 3)
                       for n in ("cache", "memory")]
    print(f"bytes    {', '.join(f'{k} {v / MiB:.2f} MiB' for k, v in sizes.items())}: "
          f"{out['step_mib']} MiB, {out['bytes_ms'][0]}-{out['bytes_ms'][1]} ms at "
          "those bandwidths", flush=True)
    tokens = torch.randint(VOCAB, (1, steps))
    runs = []
    for _ in range(repeats):
        state, start = cache, time.perf_counter()
        for i in range(steps):
            _, state = model.step(tokens[:, i : i + 1], state)
        runs.append((time.perf_counter() - start) / steps)
    out["step_ms"] = round(1e3 * statistics.median(runs), 3)
    print(f"step     {out['step_ms']} ms per token (median of {repeats} runs of {steps})",
          flush=True)
    # an ordinary step: it continues the last run's state, appending in place (from
    # `cache`, which the runs appended to, it would first copy the window, as a step does
    # once every `attn_len` or so tokens); its token sliced outside the profile
    token = tokens[:, :1]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        model.step(token, state)
    out["aten_calls"] = sum(1 for e in prof.events() if e.name.startswith("aten::"))
    out["us_per_call"] = round(1e3 * out["step_ms"] / out["aten_calls"], 2)
    print(f"calls    {out['aten_calls']} ATen operations per step (views included): "
          f"{out['us_per_call']} us per operation on average", flush=True)
    weight = model.blocks[0].attn.qkv.weight
    through = min(timeit.repeat(lambda: model.blocks[0].attn.qkv.weight, number=10_000,
                                repeat=repeats)) / 10_000
    local = min(timeit.repeat(lambda: weight, number=10_000, repeat=repeats)) / 10_000
    out["module_read_us"] = round(1e6 * (through - local), 3)
    out["parameters"] = len(list(model.parameters()))
    print(f"module reads {out['module_read_us']} us more than a local name for "
          f"model.blocks[0].attn.qkv.weight; {out['parameters']} parameter tensors",
          flush=True)
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--attn-len", type=int, default=1024)
    add("--d-model", type=int, default=128)
    add("--n-heads", type=int, default=4)
    add("--n-layers", type=int, default=4)
    add("--steps", type=int, default=64, help="tokens per timed run")
    add("--repeats", type=int, default=9, help="timed runs (the median is reported)")
    add("--quick", action="store_true", help="tiny smoke run")
    add("--json", action="store_true", help="end with one JSON object")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    streams = (4 * MiB, 512 * MiB)
    if args.quick:
        args.attn_len, args.d_model, args.steps, args.repeats = 32, 32, 4, 2
        streams = (MiB, 8 * MiB)
    print(f"XL step floor: {timing.machine(torch.device('cpu'))}; d_model {args.d_model}, "
          f"{args.n_heads} heads, "
          f"{args.n_layers} layers, attention length {args.attn_len}, batch 1", flush=True)
    result = measure(args.attn_len, args.d_model, args.n_heads, args.n_layers, args.steps,
                     args.repeats, streams)
    if args.json:
        print(json.dumps({"benchmark": "xl_floor", **vars(args), **result}))
    return result


if __name__ == "__main__":
    main()
