"""Feedback Transformer with shared keys/values: training step, decoding and memory vs
the parallel transformer.

All variants are measured side by side in one process (d_model 256, 8 heads, 4 layers,
d_ff 1024, batch 16, fp32 on the CPU by default):

* training step (forward + cross-entropy + backward) of the parallel `TransformerLM`,
  the naive `FeedbackTransformer(shared_kv=True)` (keys/values grown with `torch.cat`),
  `FeedbackTransformerKV` with its autograd loop over `torch.stack` and over `Stack`,
  and with its fused loop (`labnn.feedback_loop`, the default), and the optional peers
  when installed (labml-nn's `FeedbackTransformerKV`, lucidrains'
  `feedback-transformer-pytorch`), at T = 32, 64, 128, 256. Each model trains in blocks
  of consecutive steps, as in training (one untimed step, then `--block` timed ones: a
  model that follows another first pays for memory the allocator must map afresh);
  blocks take turns, model after model, so that load changes hit every variant alike.
  Reported: the median step time, and the median over blocks of the ratio to the
  parallel transformer's block beside it (process CPU time too: the machine may be
  shared);
* decoding latency per token (batch 1, 256 tokens, greedy) against
  `TransformerLM.generate` with its KV cache (the models take turns, `--repeats` times;
  the median latency and the median ratio of turns), and the bytes of each cache after
  those tokens; with `--compile`, also the fused model through `labnn.compiled.generate`
  (inductor; its compile time is reported apart);
* peak memory of one training step at T = 128. Method: `torch.profiler` with
  `profile_memory=True` records the bytes each op allocates net of what it frees; the
  peak of their running sum, in time order, over the step is the memory the step needed
  on top of the model (tracemalloc cannot see torch's allocator; RSS deltas are blurred
  by the allocator's caching). Peaks inside one op are not seen.

    python benchmarks/bench_feedback_kv.py              # a table with ratios
    python benchmarks/bench_feedback_kv.py --json       # one JSON object
    python benchmarks/bench_feedback_kv.py --quick      # tiny smoke run
    python benchmarks/bench_feedback_kv.py --no-peers --lengths 128 --compile
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from labnn import compiled
from labnn.feedback import FeedbackConfig, FeedbackTransformer
from labnn.feedback_kv import FeedbackKVConfig, FeedbackTransformerKV
from labnn.stack import ListStack
from labnn.train import pick_device
from labnn.transformer import TransformerConfig, TransformerLM

VOCAB = 65


class TorchStackKV(FeedbackTransformerKV):
    """The KV model's autograd loop with keys/values stacked by `torch.stack` at every
    step (`labnn.stack.ListStack`): the baseline that `Stack` replaces."""

    def make_stack(self, capacity: int, like: torch.Tensor) -> ListStack:
        return ListStack(capacity, like, dim=3)


def ours(args) -> dict[str, Callable[[], nn.Module]]:
    dims = dict(
        vocab_size=VOCAB,
        d_model=args.d_model,
        n_heads=args.heads,
        n_layers=args.layers,
        d_ff=args.d_ff,
    )
    fb = dict(dims, max_distance=max(args.lengths))
    return {
        "parallel": lambda: TransformerLM(
            TransformerConfig(**dims, seq_len=max(max(args.lengths), args.decode + 1))
        ),
        "naive": lambda: FeedbackTransformer(FeedbackConfig(**fb, shared_kv=True)),
        "kv_torch_stack": lambda: TorchStackKV(FeedbackKVConfig(**fb, loop="autograd")),
        "kv_stack": lambda: FeedbackTransformerKV(
            FeedbackKVConfig(**fb, loop="autograd")
        ),
        "kv_fused": lambda: FeedbackTransformerKV(FeedbackKVConfig(**fb, loop="fused")),
    }


def peers(args) -> tuple[dict[str, Callable[[], nn.Module]], dict[str, str]]:
    """Peer implementations wrapped as `logits = model(tokens [B, T])`, when installed."""
    found, missing = {}, {}
    try:
        import labml.tracker
        from labml_nn.transformers.feed_forward import FeedForward as LabmlFF
        from labml_nn.transformers.feedback import (
            FeedbackAttention,
            FeedbackTransformerLayer,
        )
        from labml_nn.transformers.feedback import FeedbackTransformerKV as LabmlKV

        labml.tracker.debug = lambda *a, **k: (
            None
        )  # labml 0.5.3 + labml-nn 0.5.1 otherwise raise here

        class Labml(nn.Module):  # seq-first inside, batch-first outside
            def __init__(self):
                super().__init__()
                layer = FeedbackTransformerLayer(
                    d_model=args.d_model,
                    attn=FeedbackAttention(args.heads, args.d_model, 0.0),
                    feed_forward=LabmlFF(args.d_model, args.d_ff, 0.0),
                    dropout_prob=0.0,
                )
                self.embed, self.head = (
                    nn.Embedding(VOCAB, args.d_model),
                    nn.Linear(args.d_model, VOCAB),
                )
                self.body = LabmlKV(layer, args.layers, args.d_model, args.heads)

            def forward(self, tokens):
                return self.head(self.body(self.embed(tokens.t()))).transpose(
                    0, 1
                ), None

        found["labml_kv"] = Labml
    except ImportError:
        missing["labml_kv"] = "not installed (pip install labml-nn)"
    try:
        from feedback_transformer_pytorch import FeedbackTransformer as Lucid

        class Lucidrains(nn.Module):
            def __init__(self):
                super().__init__()
                # seq_len=1: lucidrains' model runs each seq_len chunk in parallel and
                # feeds memory back only between chunks; one token per chunk is the
                # Feedback Transformer's token-by-token recurrence.
                self.body = Lucid(
                    num_tokens=VOCAB,
                    dim=args.d_model,
                    depth=args.layers,
                    seq_len=1,
                    mem_len=max(args.lengths),
                    heads=args.heads,
                    dim_head=args.d_model // args.heads,
                )

            def forward(self, tokens):
                return self.body(tokens), None

        found["lucidrains"] = Lucidrains
    except ImportError:
        missing["lucidrains"] = (
            "not installed (pip install feedback-transformer-pytorch)"
        )
    return found, missing


def train_step(model: nn.Module, tokens: torch.Tensor) -> None:
    logits, _ = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
    model.zero_grad(set_to_none=True)
    loss.backward()


def timed(fn: Callable[[], None], device: torch.device) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one call."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - wall, time.process_time() - cpu


def peak_step_bytes(model: nn.Module, tokens: torch.Tensor) -> int:
    """Peak of the running sum of torch's allocations minus frees during one training
    step."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + (
        [ProfilerActivity.CUDA] if tokens.is_cuda else []
    )
    with profile(activities=activities, profile_memory=True) as prof:
        train_step(model, tokens)
    kind = "device" if tokens.is_cuda else "cpu"
    running, peak = 0, 0
    for e in sorted(prof.events(), key=lambda e: e.time_range.start):
        # an op's net allocations (its children's counted in theirs); "[memory]" = frees
        # outside any op
        running += getattr(
            e,
            f"{kind}_memory_usage"
            if e.name == "[memory]"
            else f"self_{kind}_memory_usage",
        )
        peak = max(peak, running)
    return peak


def decode_per_token(generate, n: int, device: torch.device) -> float:
    """Seconds per generated token (batch 1, greedy, with the model's cache) of
    `generate(prompt, n, temperature=0)`."""
    prompt = torch.zeros(1, 1, dtype=torch.long, device=device)
    wall, _ = timed(lambda: generate(prompt, n, temperature=0), device)
    return wall / n


@torch.no_grad()
def cache_bytes(model: nn.Module, n: int, device: torch.device) -> int:
    """Bytes of the model's decoding cache after `n` tokens."""
    tokens = torch.zeros(1, n, dtype=torch.long, device=device)
    if isinstance(model, TransformerLM):
        _, cache = model(tokens, use_cache=True)
        return sum(t.numel() * t.element_size() for layer in cache for t in layer)
    return model(tokens)[1].nbytes()


def run(args) -> dict:
    device = pick_device(args.device)
    torch.manual_seed(0)
    builders, missing = ours(args), {}
    if not args.no_peers:
        found, missing = peers(args)
        builders.update(found)
    models = {name: build().to(device) for name, build in builders.items()}
    result = {
        "config": {
            k: getattr(args, k)
            for k in (
                "d_model",
                "heads",
                "layers",
                "d_ff",
                "batch",
                "lengths",
                "repeats",
                "block",
                "threads",
                "decode",
            )
        },
        "device": str(device),
        "torch": torch.__version__,
        "peers_missing": missing,
        "train": {},
    }
    for t in args.lengths:
        tokens = torch.randint(0, VOCAB, (args.batch, t + 1), device=device)
        walls: dict[str, list[float]] = {n: [] for n in models}
        cpus: dict[str, list[float]] = {n: [] for n in models}
        for _ in range(
            args.repeats
        ):  # blocks of steps in turn, so load changes hit every variant alike
            for name, model in models.items():
                train_step(
                    model, tokens
                )  # the block's warm-up: the allocator settles into this model's sizes
                block = [
                    timed(lambda: train_step(model, tokens), device)
                    for _ in range(args.block)
                ]
                walls[name].append(statistics.median(w for w, _ in block))
                cpus[name].append(statistics.median(c for _, c in block))
        row = {
            n: {
                "seconds": statistics.median(walls[n]),
                "cpu_seconds": statistics.median(cpus[n]),
            }
            for n in models
        }
        for n in models:  # the median of the ratios of blocks timed side by side
            row[n]["ratio"] = statistics.median(
                w / p for w, p in zip(walls[n], walls["parallel"])
            )
            row[n]["cpu_ratio"] = statistics.median(
                c / p for c, p in zip(cpus[n], cpus["parallel"])
            )
        result["train"][t] = row
    t_mem = 128 if 128 in args.lengths else args.lengths[-1]
    tokens = torch.randint(0, VOCAB, (args.batch, t_mem + 1), device=device)
    result["peak_step_bytes"] = {
        "T": t_mem,
        **{n: peak_step_bytes(m, tokens) for n, m in models.items()},
    }
    decoders = {
        name: models[name].eval()
        for name in ("parallel", "naive", "kv_stack", "kv_fused")
    }
    generators = {name: model.generate for name, model in decoders.items()}
    if args.compile:
        fused = decoders["kv_fused"]
        generators["kv_compiled"] = lambda prompt, n, **kw: compiled.generate(
            fused, prompt, n, backend=args.backend, **kw
        )
    seconds: dict[str, list[float]] = {name: [] for name in generators}
    warm_up = {}
    for name, generate in generators.items():  # the same length: nothing compiles later
        start = time.perf_counter()
        decode_per_token(generate, args.decode, device)
        warm_up[name] = time.perf_counter() - start
    for _ in range(args.repeats):  # in turns, like the training steps
        for name, generate in generators.items():
            seconds[name].append(decode_per_token(generate, args.decode, device))
    nbytes = {
        name: cache_bytes(decoders.get(name, decoders["kv_fused"]), args.decode, device)
        for name in generators
    }
    result["decode"] = {
        name: {
            "ms_per_token": 1e3 * statistics.median(seconds[name]),
            "latency_ratio": statistics.median(
                s / p for s, p in zip(seconds[name], seconds["parallel"])
            ),
            "cache_bytes": nbytes[name],
            "cache_ratio": nbytes["parallel"] / nbytes[name],
            "warm_up_seconds": warm_up[name],
        }
        for name in generators
    }
    for model in decoders.values():
        model.train()
    return result


def print_table(r: dict) -> None:
    c = r["config"]
    print(
        f"d_model {c['d_model']}, {c['heads']} heads, {c['layers']} layers, d_ff "
        f"{c['d_ff']}, batch {c['batch']}, "
        f"{c['threads']} threads, {r['device']}, torch {r['torch']}, median of "
        f"{c['repeats']} blocks of {c['block']}"
    )
    for name, why in r["peers_missing"].items():
        print(f"  peer {name}: {why}")
    print(
        "\ntraining step (forward + backward): seconds, x parallel (wall), x parallel "
        "(CPU time)"
    )
    for t, row in r["train"].items():
        cells = "  ".join(
            f"{n} {v['seconds']:.3f}s {v['ratio']:.2f}x/{v['cpu_ratio']:.2f}x"
            for n, v in row.items()
        )
        print(f"  T={t:<4} {cells}")
    print(
        f"\npeak memory of a training step at T={r['peak_step_bytes']['T']} "
        f"(torch.profiler allocations):"
    )
    for n, b in r["peak_step_bytes"].items():
        if n != "T":
            print(f"  {n:16s} {b / 2**20:9.1f} MiB")
    print(f"\ndecoding, batch 1, {c['decode']} tokens (greedy):")
    for n, v in r["decode"].items():
        print(
            f"  {n:10s} {v['ms_per_token']:7.3f} ms/token ({v['latency_ratio']:.2f}x "
            f"parallel)   "
            f"cache {v['cache_bytes']:>9,} bytes ({v['cache_ratio']:.1f}x smaller "
            f"than parallel)"
            + (f"; compiled in {v['warm_up_seconds']:.0f} s" if n == "kv_compiled" else "")
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 64, 128, 256])
    parser.add_argument("--d-model", dest="d_model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d-ff", dest="d_ff", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument(
        "--decode",
        type=int,
        default=256,
        help="tokens to generate for the decoding latency",
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="blocks per model and length"
    )
    parser.add_argument(
        "--block",
        type=int,
        default=2,
        help="timed training steps per block (after one untimed)",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--device",
        default="cpu",
        help="cpu, cuda, mps or auto (labnn.train.pick_device)",
    )
    parser.add_argument(
        "--no-peers",
        action="store_true",
        help="skip labml-nn and feedback-transformer-pytorch",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="also decode with labnn.compiled.generate (compiling takes a minute)",
    )
    parser.add_argument(
        "--backend", default="inductor", help="torch.compile backend for --compile"
    )
    parser.add_argument("--quick", action="store_true", help="a tiny smoke run")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if args.device == "auto":
        args.device = None
    if args.quick:
        args.lengths, args.d_model, args.heads, args.layers, args.d_ff = (
            [8, 16],
            32,
            2,
            2,
            64,
        )
        (
            args.batch,
            args.decode,
            args.repeats,
            args.block,
            args.no_peers,
            args.threads,
        ) = 2, 8, 1, 1, True, 1
        args.compile, args.backend = True, "eager"  # no code generation: seconds
    torch.set_num_threads(args.threads)
    result = run(args)
    print(json.dumps(result) if args.json else "", end="\n" if args.json else "")
    if not args.json:
        print_table(result)


if __name__ == "__main__":
    main()
