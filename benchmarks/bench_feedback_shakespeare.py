"""Tiny Shakespeare, character level: Feedback Transformer vs. Transformer vs.
Transformer-XL at (about) equal parameters, same width, depth, segment length and
training budget; validation loss in nats per character.

Commands::

    python benchmarks/bench_feedback_shakespeare.py          # a table, a row per model
    python benchmarks/bench_feedback_shakespeare.py --json   # one JSON object
    python benchmarks/bench_feedback_shakespeare.py --quick  # CI smoke run

The Feedback model and Transformer-XL train on contiguous streams with their state
carried across batches (`TrainConfig(stream=True)`); the Transformer trains on random
windows. The Feedback model attends to the last `--span` memory vectors, XL keeps
`--span` states per layer, the Transformer sees its segment only. Each row prints as soon
as its model is trained, with its training time over the Transformer's (trained first).
"""

from __future__ import annotations

import argparse
import json

import torch

from labnn import seed_everything
from labnn.data import CharTokenizer, load_tiny_shakespeare, train_val_split
from labnn.feedback.model import FeedbackConfig, FeedbackTransformer
from labnn.training import timing
from labnn.training.trainer import TrainConfig, Trainer
from labnn.transformer import TransformerConfig, TransformerLM
from labnn.xl.model import TransformerXL, XLConfig


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny smoke run for CI")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--n-layers", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--span", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    if a.quick:
        a.d_model, a.n_layers, a.seq_len, a.span, a.batch_size, a.iters = (
            32,
            2,
            16,
            16,
            4,
            4,
        )
    torch.set_num_threads(a.threads)
    text = load_tiny_shakespeare()
    tok = CharTokenizer.from_text(text)
    train_ids, val_ids = train_val_split(tok.encode(text), val_fraction=0.1)
    shape = dict(d_model=a.d_model, n_heads=4, n_layers=a.n_layers)
    builders = {
        "transformer": lambda: TransformerLM(
            TransformerConfig(tok.vocab_size, seq_len=a.seq_len, **shape)
        ),
        "xl": lambda: TransformerXL(XLConfig(tok.vocab_size, mem_len=a.span, **shape)),
        "feedback": lambda: FeedbackTransformer(
            FeedbackConfig(tok.vocab_size, attn_len=a.span, **shape)
        ),
    }
    report = dict(
        config=vars(a),
        hardware=timing.machine(torch.device("cpu")),
    )
    if not a.json:
        print(
            f"Tiny Shakespeare (chars), d_model {a.d_model}, {a.n_layers} layers, "
            f"segments of {a.seq_len}, span {a.span}, {a.iters} iterations of batch "
            f"{a.batch_size} ({report['hardware']})\n"
            f"{'model':<12}{'params':>9}{'val loss':>10}{'train s':>9}{'time ratio':>12}",
            flush=True,
        )
    for name, build in builders.items():
        seed_everything(0)
        model = build()
        config = TrainConfig(
            max_iters=a.iters,
            batch_size=a.batch_size,
            seq_len=a.seq_len,
            lr=2e-3,
            warmup_iters=a.iters // 10,
            eval_interval=a.iters,
            eval_iters=10 if a.quick else 20,
            stream=name != "transformer",
            seed=0,
            device="cpu",
            show_progress=not a.json,
        )
        history = Trainer(model, train_ids, val_ids, config).fit()
        r = report[name] = dict(
            params=model.num_params(),
            val_loss=history["val_loss"][-1],
            train_loss=history["train_loss"][-1],
            seconds=history["time"][-1],
        )
        if not a.json:
            ratio = r["seconds"] / report["transformer"]["seconds"]
            print(f"{name:<12}{r['params']:>9}{r['val_loss']:>10.3f}{r['seconds']:>9.0f}"
                  f"{ratio:>11.1f}x", flush=True)
    if a.json:
        print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
