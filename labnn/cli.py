"""Command line: train a model on Tiny Shakespeare and sample from a checkpoint.

    python -m labnn train --model transformer --iters 2000 --out checkpoints/transformer.pt
    python -m labnn sample --checkpoint checkpoints/transformer.pt --prompt "ROMEO:" --tokens 300
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import sys
from pathlib import Path

import torch

from . import checkpoint as ckpt
from . import seed_everything
from .data import CharTokenizer, load_tiny_shakespeare, train_val_split
from .train import TrainConfig, Trainer, pick_device

# name -> (module, model class, config class, trained on contiguous streams with carried state)
MODELS = {
    "transformer": ("labnn.transformer", "TransformerLM", "TransformerConfig", False),
    "xl": ("labnn.xl", "TransformerXL", "XLConfig", True),
    "feedback": ("labnn.feedback", "FeedbackTransformer", "FeedbackConfig", True),
    "feedback-kv": ("labnn.feedback_kv", "FeedbackTransformerKV", "FeedbackKVConfig", True),
}


def model_classes(name: str) -> tuple[type, type, bool]:
    module_name, model_name, config_name, stream = MODELS[name]
    module = importlib.import_module(module_name)
    return getattr(module, model_name), getattr(module, config_name), stream


def parse_overrides(pairs: list[str], config_cls: type) -> dict:
    """`["mem_len=64", "dropout=0.1"]` -> typed values, checked against the config's fields."""
    fields = {f.name for f in dataclasses.fields(config_cls)}
    out = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or key not in fields:
            raise SystemExit(f"--set {pair!r}: expected FIELD=VALUE with FIELD one of {sorted(fields)}")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw  # a bare string such as positions=sinusoidal
    return out


def train(args: argparse.Namespace) -> None:
    model_cls, config_cls, stream = model_classes(args.model)
    seed_everything(args.seed)
    text = load_tiny_shakespeare()
    tokenizer = CharTokenizer.from_text(text)
    train_ids, val_ids = train_val_split(tokenizer.encode(text))
    sizes = dict(d_model=args.d_model, n_heads=args.n_heads, n_layers=args.n_layers, dropout=args.dropout)
    if "seq_len" in {f.name for f in dataclasses.fields(config_cls)}:
        sizes["seq_len"] = args.seq_len
    config = config_cls(vocab_size=tokenizer.vocab_size, **sizes, **parse_overrides(args.set, config_cls))
    model = model_cls(config)
    print(f"{args.model}: {model.num_params():,} parameters, {config}")
    train_config = TrainConfig(
        max_iters=args.iters, batch_size=args.batch_size, seq_len=args.seq_len, lr=args.lr,
        eval_interval=args.eval_interval, eval_iters=args.eval_iters, stream=stream, seed=args.seed,
        device=args.device, checkpoint=str(args.out),
    )
    trainer = Trainer(model, train_ids, val_ids, train_config)
    history = trainer.fit(resume=args.resume)
    trainer.save(args.out, tokenizer=tokenizer.chars, cli_model=args.model)
    print(f"val loss {history['val_loss'][-1]:.4f} after {trainer.iter} iterations "
          f"({history['time'][-1]:.1f} s of training); checkpoint: {args.out}")


def sample(args: argparse.Namespace) -> None:
    saved = ckpt.load(args.checkpoint)
    if "cli_model" not in saved:
        raise SystemExit(f"{args.checkpoint} was not written by `python -m labnn train` (no tokenizer inside)")
    model_cls, config_cls, _ = model_classes(saved["cli_model"])
    model = model_cls(config_cls(**saved["model_config"]))
    model.load_state_dict(saved["model"])
    device = pick_device(args.device)
    model.to(device).eval()
    tokenizer = CharTokenizer(saved["tokenizer"])
    prompt = tokenizer.encode(args.prompt)[None].to(device)
    generator = torch.Generator(device=device).manual_seed(args.seed)
    out = model.generate(prompt, args.tokens, temperature=args.temperature, top_k=args.top_k, generator=generator)
    print(tokenizer.decode(out[0].cpu()))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m labnn", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train a model on Tiny Shakespeare, write a checkpoint, print the val loss")
    t.add_argument("--model", choices=sorted(MODELS), default="transformer")
    t.add_argument("--iters", type=int, default=2000)
    t.add_argument("--batch-size", type=int, default=12)
    t.add_argument("--seq-len", type=int, default=64)
    t.add_argument("--d-model", type=int, default=128)
    t.add_argument("--n-heads", type=int, default=4)
    t.add_argument("--n-layers", type=int, default=4)
    t.add_argument("--dropout", type=float, default=0.0)
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--eval-interval", type=int, default=250)
    t.add_argument("--eval-iters", type=int, default=20)
    t.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="any other model config field")
    t.add_argument("--seed", type=int, default=1337)
    t.add_argument("--device", default=None)
    t.add_argument("--out", type=Path, default=Path("checkpoints/model.pt"))
    t.add_argument("--resume", action="store_true", help="continue from --out if it exists")
    t.set_defaults(run=train)
    s = sub.add_parser("sample", help="generate text from a checkpoint")
    s.add_argument("--checkpoint", type=Path, required=True)
    s.add_argument("--prompt", default="\n")
    s.add_argument("--tokens", type=int, default=300)
    s.add_argument("--temperature", type=float, default=0.8)
    s.add_argument("--top-k", type=int, default=None)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--device", default=None)
    s.set_defaults(run=sample)
    args = parser.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main(sys.argv[1:])
