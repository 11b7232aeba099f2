"""Does `torch.compile` pay for a notebook-sized training run? Notebook 03's full-size run, eager vs.
compiled, total wall time including compilation.

The run: notebook 03's program-tracking task (1 variable, values 0-4, 10 statements, 5,000 training and
1,000 test programs) and its Feedback Transformer (`shared_kv=True`, d_model 48, 4 heads, 2 layers,
attention span 2), 300 steps of batch 64 (`labnn.training.tasks.train_on_programs`), then the accuracy on
1,000 programs of each set. Once eagerly, once through `torch.compile(model)` (inductor), both from the
same initial weights and batches; the compiled run's time includes its compilations (training and
evaluation batches have different shapes). Prints each run as it finishes: its wall time, the training
part alone, the total as a multiple of the eager run's, and its test accuracy.

    python benchmarks/compiled_training.py             # the full run (minutes)
    python benchmarks/compiled_training.py --iters 30  # a tenth of it
    python benchmarks/compiled_training.py --runs eager  # the eager run alone
    python benchmarks/compiled_training.py --quick     # tiny smoke run (no code generation)

Not run by the tests beyond `--quick`: compiling needs a C++ compiler and minutes of CPU.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from labnn import seed_everything
from labnn.data.programs import program_task
from labnn.training import timing
from labnn.training.tasks import train_on_programs
from labnn.feedback.model import FeedbackConfig, FeedbackTransformer


def run(model, forward, data, iters: int, batch: int, eval_programs: int) -> dict:
    """Train and score `model` through `forward`; the wall time of it all."""
    train, test = data
    start = time.perf_counter()
    result = train_on_programs(model, train, test, iters=iters, batch_size=batch, lr=3e-3,
                               eval_programs=eval_programs,
                               logits_fn=lambda m, x: forward(x)[0])
    return {"total_seconds": round(time.perf_counter() - start, 2),
            "train_seconds": round(result["seconds"], 2),
            "test_acc": round(result["test_acc"], 4)}


def row(name: str, r: dict, eager: dict | None) -> str:
    """One run's line, with its total time as a multiple of the eager run's."""
    ratio = ""
    if eager is not None and eager is not r:
        ratio = f"{r['total_seconds'] / eager['total_seconds']:.2f}x eager; "
    return (f"  {name:8s} total {r['total_seconds']:7.2f} s ({ratio}training "
            f"{r['train_seconds']:.2f} s), test accuracy {r['test_acc']:.1%}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--runs", nargs="+", choices=("eager", "compiled"),
                        default=["eager", "compiled"], help="which runs to time")
    parser.add_argument("--quick", action="store_true", help="tiny smoke run")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    sizes = dict(n_train=5000, n_test=1000, n_statements=10, batch=64, eval_programs=1000)
    if args.quick:
        sizes = dict(n_train=40, n_test=20, n_statements=2, batch=4, eval_programs=20)
        args.iters, args.backend = 2, "eager"
    train, test, tok = program_task(sizes["n_train"], sizes["n_test"], n_vars=1, max_value=4,
                                    n_statements=sizes["n_statements"], seed=0)
    config = FeedbackConfig(tok.vocab_size, d_model=48, n_heads=4, n_layers=2, attn_len=2,
                            max_distance=2, shared_kv=True)
    result = {"benchmark": "compiled_training", "iters": args.iters,
              "threads": args.threads, "torch": torch.__version__}
    if not args.json:
        print(f"notebook 03's run, {args.iters} steps, "
              f"{timing.machine(torch.device('cpu'))}:", flush=True)
    for name in args.runs:
        seed_everything(0)
        model = FeedbackTransformer(config)
        forward = model if name == "eager" else torch.compile(model, backend=args.backend)
        r = result[name] = run(model, forward, (train, test), args.iters, sizes["batch"],
                               sizes["eval_programs"])
        if not args.json:
            print(row(name, r, result.get("eager")), flush=True)
    if args.json:
        print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
