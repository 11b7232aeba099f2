"""Where the compiled `TransformerLM` decoder's time goes: making it once, then each token.

`benchmarks/bench_generation.py --compile` times whole generations, so its per-token figure
also holds the decoder's making (the compiled step looked up, three warm-up steps, and on a
GPU the CUDA graph's recording), spread over `--new` tokens. This script separates them,
for batch 1 at several contexts and two widths, printing each row as it is measured:

* `made in`: `labnn.compiled.decoder` for a ring read from a prompt of `c` tokens; on a
  GPU that compiles the step (once per ring size) and records its graph; on a CPU the step
  compiles at its first call, in the first timed run, which the median leaves out;
* `per token`: one call of the decoder and a greedy `argmax`, the median of 3 runs of 64
  tokens (on a GPU: one replay of the recorded graph);
* with `--profile`: the GPU's kernels of 20 tokens at the last context, by time
  (`torch.profiler`), as the Benchmarks page quotes them.

    python benchmarks/transformer_ring_replay.py --device cuda
    python benchmarks/transformer_ring_replay.py --device cuda --profile
    python benchmarks/transformer_ring_replay.py --quick   # tiny, eager backend, CPU
"""

from __future__ import annotations

import argparse
import statistics

import torch
from torch._dynamo.utils import counters

from labnn import seed_everything
from labnn.compiled.decoding import decoder, read_prompt, ring_slots
from labnn.training import timing
from labnn.training.trainer import pick_device
from labnn.transformer import TransformerConfig, TransformerLM

VOCAB = 65  # Tiny Shakespeare's characters
NEW = 257  # the ring is sized for a generation of this many tokens (bench_generation's 256 + 1)


@torch.inference_mode()
def row(model: TransformerLM, context: int, device: torch.device, backend: str,
        profile: bool = False) -> dict:
    """One context: the decoder's making and its time per token (see the module), on
    `labnn.training.timing`'s clock (the GPU waited for around each timed call)."""
    prompt = torch.randint(VOCAB, (1, context), device=device)
    slots = ring_slots(model, context, NEW)
    logits, ring = read_prompt(model, prompt, slots)
    tokens = [logits.argmax(-1, keepdim=True)]  # the newest, as each call leaves it
    graphs = counters["stats"]["unique_graphs"]
    made = []
    seconds = timing.times(lambda: made.append(decoder(model, ring, tokens[0], backend=backend)),
                           device, repeats=1, warmup=0)[0]
    decode = made[0]

    def greedy(n: int) -> None:
        for _ in range(n):
            tokens[0] = decode(tokens[0]).argmax(-1, keepdim=True)

    # 3 x 64 = 192 tokens, inside the ring's NEW
    runs = [t / 64 for t in timing.times(lambda: greedy(64), device, repeats=3, warmup=0)]
    out = {"context": context, "slots": slots, "made_s": seconds,
           "new_graphs": counters["stats"]["unique_graphs"] - graphs,
           "per_token_ms": 1e3 * statistics.median(runs)}
    if profile:
        from torch.profiler import ProfilerActivity
        activities = [ProfilerActivity.CPU] + (
            [ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with torch.profiler.profile(activities=activities) as prof:
            timing.times(lambda: greedy(20), device, repeats=1, warmup=0)  # tokens 193-212
        key = "cuda_time_total" if device.type == "cuda" else "cpu_time_total"
        out["profile"] = prof.key_averages().table(sort_by=key, row_limit=12,
                                                   max_name_column_width=90)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cpu, cuda or auto")
    parser.add_argument("--contexts", type=int, nargs="+", default=[256, 1024, 2048])
    parser.add_argument("--backend", default="inductor", help="as in compiled.generate")
    parser.add_argument("--profile", action="store_true",
                        help="print the kernels of 20 tokens at the last context")
    parser.add_argument("--quick", action="store_true", help="a tiny smoke run")
    args = parser.parse_args()
    if args.quick:
        args.device, args.contexts, args.backend = "cpu", [16, 32], "eager"
    try:
        device = pick_device(args.device)
    except ValueError as err:  # one line, as argparse says any other mistake
        parser.error(f"--device {args.device}: {err}")
    print(f"{device}: {timing.machine(device)}; batch 1, backend {args.backend}",
          flush=True)
    seed_everything(0)
    # bench_generation's model, and one 4x as wide (the feedback benchmark's d_model)
    for d_model, n_heads in ((128, 4), (512, 8)):
        config = TransformerConfig(vocab_size=VOCAB, seq_len=max(args.contexts) + NEW,
                                   d_model=d_model, n_heads=n_heads, n_layers=4, bias=False)
        model = TransformerLM(config).to(device).eval()
        for context in args.contexts:
            last = args.profile and d_model == 128 and context == args.contexts[-1]
            r = row(model, context, device, args.backend, profile=last)
            print(f"d_model {d_model}, 4 layers, context {context:>5}: {r['slots']} slots, "
                  f"made in {1e3 * r['made_s']:.0f} ms ({r['new_graphs']} new graphs), "
                  f"{r['per_token_ms']:.3f} ms per token", flush=True)
            if last:
                print(r["profile"], flush=True)


if __name__ == "__main__":
    main()
