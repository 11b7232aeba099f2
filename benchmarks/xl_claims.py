"""Transformer-XL paper claims 2 and 3 in miniature, on Tiny Shakespeare (characters).

2. Longer context at evaluation (Dai et al. 2019, Table 6: trained with a backpropagation
   length of 128, only the paper's relative encoding gains from a longer evaluation
   attention length; its absolute encodings are tried without memory): here, train with
   segment 64 and memory 64, evaluate with memory 64, 128, 256, 512 -- relative positions
   vs. the same model with absolute positions (and the memory).
3. Transformer-XL vs. a plain transformer (`TransformerLM`) with the same segment length
   and (almost) the same number of parameters: validation loss (plus the same XL read
   without memory, to separate what the memory brings from what relative positions
   bring).

Three models are trained with `labnn.training.trainer.Trainer` (XL on contiguous streams with
memory carried, the plain transformer on random windows, as each is normally trained),
then scored with `labnn.training.evaluate.stream_loss` on the same validation tokens (the first
`max(eval mem) / seg_len` segments only fill the memory).

Each figure is printed as soon as it is measured (with `--json`, on stderr, and one JSON object on
stdout at the end).

    LABNN_DATA_DIR=/work/shared/data python benchmarks/xl_claims.py          # minutes on 2 cores
    LABNN_DATA_DIR=/work/shared/data python benchmarks/xl_claims.py --json   # one JSON object
    LABNN_DATA_DIR=/work/shared/data python benchmarks/xl_claims.py --quick  # smoke run
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

import torch

from labnn import seed_everything
from labnn.data import CharTokenizer, load_tiny_shakespeare, train_val_split
from labnn.training import timing
from labnn.training.trainer import TrainConfig, Trainer
from labnn.transformer import TransformerConfig, TransformerLM
from labnn.training.evaluate import stream_loss
from labnn.xl.model import TransformerXL, XLConfig


def matched_d_ff(xl: TransformerXL, config: TransformerConfig) -> int:
    """Feed-forward width giving `TransformerLM(config)` about as many parameters as
    `xl`."""
    base = TransformerLM(config).num_params()
    # one more hidden unit: a row, a column, a bias
    per_unit = config.n_layers * (2 * config.d_model + 1)
    return config.d_ff + round((xl.num_params() - base) / per_unit)


def run(args: argparse.Namespace, say) -> dict:
    """Train the three models and score them; `say(line)` gets each figure as it comes."""
    text = load_tiny_shakespeare()
    tok = CharTokenizer.from_text(text)
    train_ids, val_ids = train_val_split(tok.encode(text), 0.1)
    size = dict(d_model=args.d_model, n_heads=args.n_heads, n_layers=args.n_layers)
    train = dict(max_iters=args.iters, batch_size=args.batch_size, seq_len=args.seg_len,
                 warmup_iters=args.iters // 10, eval_interval=args.iters, eval_iters=5,
                 show_progress=not args.json)
    say(f"{timing.machine(torch.device('cpu'))}; {size}, segments of {args.seg_len}, "
        f"{args.iters} steps of batch {args.batch_size}")
    models, seconds = {}, {}
    for name in ("relative", "absolute", "transformer"):
        seed_everything(args.seed)
        if name == "transformer":
            config = TransformerConfig(tok.vocab_size, seq_len=args.seg_len, **size)
            config = dataclasses.replace(config, d_ff=matched_d_ff(models["relative"], config))
            model = TransformerLM(config)
        else:
            model = TransformerXL(
                XLConfig(tok.vocab_size, mem_len=args.seg_len, positions=name, **size)
            )
        start = time.perf_counter()
        stream = name != "transformer"
        train_config = TrainConfig(stream=stream, seed=args.seed, **train)
        Trainer(model, train_ids, val_ids, train_config).fit()
        seconds[name], models[name] = round(time.perf_counter() - start, 1), model
        say(f"{name}: {model.num_params():,} parameters, trained in {seconds[name]} s")
    score = dict(ids=val_ids, batch_size=args.batch_size, seq_len=args.seg_len,
                 skip=max(args.eval_mems) // args.seg_len,
                 max_batches=args.eval_batches)

    def loss(name: str, mem_len: int | None = None) -> float:
        return round(stream_loss(models[name], mem_len=mem_len, **score), 4)

    say("claim 2, validation loss (nats/char) by evaluation memory:")
    say(f"{'memory':>8}" + "".join(f"{m:>9}" for m in args.eval_mems))
    claim2 = {}
    for name in ("relative", "absolute"):
        row = claim2[name] = {m: loss(name, m) for m in args.eval_mems}
        say(f"{name:>8}" + "".join(f"{row[m]:>9.4f}" for m in args.eval_mems))
    claim3 = {"xl": loss("relative", args.seg_len),
              "xl_without_memory": loss("relative", 0),
              "transformer": loss("transformer")}
    say(f"claim 3, validation loss: Transformer-XL {claim3['xl']:.4f} (without memory "
        f"{claim3['xl_without_memory']:.4f}) vs transformer {claim3['transformer']:.4f}")
    return {
        "hardware": timing.machine(torch.device("cpu")),
        "setup": {**size, **{k: train[k] for k in ("max_iters", "batch_size",
                                                   "seq_len")},
                  "mem_len": args.seg_len, "eval_mems": args.eval_mems,
                  "scored_segments_from": score["skip"]},
        "params": {name: model.num_params() for name, model in models.items()},
        "train_seconds": seconds,
        "claim2_val_loss_by_eval_mem": claim2,
        "claim3_val_loss": claim3,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=400)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--n-heads", type=int, default=4)
    parser.add_argument("--n-layers", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=12)
    parser.add_argument("--seg-len", type=int, default=64)
    parser.add_argument("--eval-mems", type=int, nargs="+", default=[64, 128, 256, 512])
    parser.add_argument("--eval-batches", type=int, default=40,
                        help="validation segments read per stream")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="tiny smoke run")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object on stdout (each figure on stderr as measured)")
    args = parser.parse_args(argv)
    if args.quick:
        args.iters, args.d_model, args.n_layers, args.seg_len = 20, 32, 2, 16
        args.eval_mems, args.eval_batches = [16, 32], 6
    torch.set_num_threads(args.threads)
    stream = sys.stderr if args.json else sys.stdout
    result = run(args, lambda line: print(line, file=stream, flush=True))
    if args.json:
        print(json.dumps(result))
    return result

if __name__ == "__main__":
    main()
