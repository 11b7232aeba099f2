"""The two commands, `train` and `sample`: each reads its options, builds or loads a
model, and runs; `main` turns every mistake into one line (`labnn.cli.errors`).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import sys
from pathlib import Path

import torch

from labnn.training import checkpoint as ckpt
from labnn import compiled
from labnn import __version__, seed_everything
from labnn.cli.errors import (Interrupted, compile_too_long, config_mistake, before_training,
                              check_set_fields, drop_stdout, interrupted, say, untrusted)
from labnn.cli.options import (FEEDBACK_ATTN_LEN, OWN_OPTIONS, TRAIN_OPTIONS, OptionError,
                               UsageError, add_sample_options, add_train_options,
                               check_out, out_file, parse_overrides)
from labnn.cli.parser import Parser
from labnn.cli.resume import check_resume, held_out, resume_refused, saved_tokenizer
from labnn.cli.sizes import check_before_building, check_splits, too_large
from labnn.data import CharTokenizer, load_tiny_shakespeare, train_val_split
from labnn.training.optim import TrainingDiverged
from labnn.training.trainer import TrainConfig, Trainer, pick_device
from labnn.training.too_large import TooLarge
from labnn.training.trainer_inputs import TRAINING_STATE

DESCRIPTION = "Command line: train a model on Tiny Shakespeare and sample from a checkpoint."

# name -> (module, model class, config class, trained on contiguous streams with
# carried state)
MODELS = {
    "transformer": ("labnn.transformer", "TransformerLM", "TransformerConfig", False),
    "xl": ("labnn.xl.model", "TransformerXL", "XLConfig", True),
    "feedback": ("labnn.feedback.model", "FeedbackTransformer", "FeedbackConfig", True),
    "feedback-kv": ("labnn.feedback.kv", "FeedbackTransformerKV", "FeedbackKVConfig",
                    True),
}


# docs/benchmarks.md: 18-22 s with inductor's cache empty, 3-7 s with it warm (2-core CPUs)
COMPILE_TIME = ("about 20 s on a 2-core CPU the first time, a few seconds once inductor's "
                "cache holds it; longer on a busy machine")
TRUST_HELP = ("read a checkpoint of an older labnn that holds pickled Python objects; "
              "only a file you wrote yourself: unpickling can run any code")


def model_classes(name: str) -> tuple[type, type, bool]:
    """The model class, its config class and whether it trains on streams (`--model`)."""
    if name not in MODELS:
        raise UsageError(f"unknown model {name!r}; expected one of {sorted(MODELS)}")
    module_name, model_name, config_name, stream = MODELS[name]
    module = importlib.import_module(module_name)
    return getattr(module, model_name), getattr(module, config_name), stream


def pick(device: str | None) -> torch.device:
    """`pick_device(device)` for `--device`, refused unless this torch computes there."""
    try:
        picked = pick_device(device)
    except ValueError as err:
        if device:
            raise UsageError(f"--device {device}: {err}") from None
        env = os.environ.get("LABNN_DEVICE")  # what chose it, when --device did not
        raise UsageError(f"$LABNN_DEVICE={env}: {err}; unset it, or give --device"
                         if env else str(err)) from None
    if picked.type == "meta":
        raise UsageError(f"--device {device or picked}: the meta device holds shapes but no "
                         "values, so nothing can be trained or sampled on it; use cpu or cuda")
    if picked.type in ("cpu", "cuda", "mps"):  # `pick_device` checked they are here
        return picked
    try:
        torch.empty(1, device=picked) + 1
    except Exception as err:  # torch raises several types for a backend it lacks
        first = " ".join(str(err).split()).split(". ")[0]
        raise UsageError(f"--device {device or picked}: this torch cannot place tensors on it "
                         f"({type(err).__name__}: {first}); use cpu or cuda") from None
    return picked


def read_corpus() -> str:
    """Tiny Shakespeare, or a `UsageError` saying why it cannot be read."""
    try:
        return load_tiny_shakespeare()
    except (OSError, RuntimeError) as err:  # offline, unreadable folder
        raise UsageError(str(err)) from None


def train(args: argparse.Namespace) -> None:
    """`train`: build the model and `TrainConfig` from the options, fit, report."""
    check_out(args.out, args.resume, args.overwrite, args.trust_checkpoint)
    device = pick(args.device)  # before reading the corpus
    model_cls, config_cls, stream = model_classes(args.model)
    check_set_fields(args.set, args.model, {name: model_classes(name)[1] for name in MODELS})
    overrides = parse_overrides(args.set, config_cls)
    if args.model.startswith("feedback"):
        overrides.setdefault("attn_len", FEEDBACK_ATTN_LEN)
    seed_everything(args.seed)
    text = read_corpus()
    tokenizer = CharTokenizer.from_text(text)
    train_ids, val_ids = train_val_split(tokenizer.encode(text))
    check_splits(args, {"training": train_ids, "validation": val_ids}, stream)
    sizes = dict(d_model=args.d_model, n_heads=args.n_heads, n_layers=args.n_layers,
                 dropout=args.dropout)
    if "seq_len" in {f.name for f in dataclasses.fields(config_cls)}:
        sizes["seq_len"] = args.seq_len
    try:
        config = config_cls(vocab_size=tokenizer.vocab_size, **sizes, **overrides)
    except ValueError as err:  # e.g. a --d-model that --n-heads does not divide
        given = {k: f"{OWN_OPTIONS[k]} {v}" for k, v in sizes.items()}
        given.update((p.partition("=")[0], f"--set {p}") for p in args.set)
        raise config_mistake(err, given) from None
    train_config = TrainConfig(
        max_iters=args.iters, batch_size=args.batch_size, seq_len=args.seq_len,
        lr=args.lr, eval_interval=args.eval_interval, eval_iters=args.eval_iters,
        stream=stream, seed=args.seed, device=args.device, checkpoint=str(args.out),
    )
    # every checkpoint, periodic ones too, holds what `sample` needs
    extra = {"tokenizer": tokenizer.chars, "cli_model": args.model}
    classes = {cls: name for name, (_, cls, _, _) in MODELS.items()}
    # read before its size is printed, under the lock that `fit` then holds: no other run
    # saves --out in between (the read held by `fit` alone, freed once loaded)
    with held_out(args):
        saved = [check_resume(args, model_cls, config, train_config, classes, extra["tokenizer"])]
        try:
            # a model too large is refused before it is built (its parameters counted on the
            # meta device), under torchrun too (each process's share)
            check_before_building(args, model_cls, config, train_config, device)
            model = model_cls(config)
            trainer = Trainer(model, train_ids, val_ids, train_config, extra=extra)
        except TooLarge as err:
            raise too_large(err, args) from None
        if trainer.ranks.is_main:
            say(f"{args.model}: {model.num_params():,} parameters, {config}", args.out)
        existed = args.out.exists()
        if trainer.ranks.is_main and args.resume and not existed:  # else a typo goes unseen
            say(f"--resume: {args.out} does not exist yet; starting a new run", args.out)
        try:
            with resume_refused(args, classes):
                history = trainer.fit(resume=args.resume, overwrite=args.overwrite,
                                      trusted=args.trust_checkpoint, saved=saved.pop())
        except ckpt.UntrustedCheckpointError as err:  # a file put there since check_resume
            raise untrusted(err, "--out", TRAINING_STATE) from None
        except ckpt.CheckpointBusy:
            raise
        except OSError as err:  # a save refused hours in: name the option
            raise UsageError(f"--out {args.out}: {err}") from None
        except TrainingDiverged as err:  # the trainer's advice, in options
            raise UsageError(err.message(names=TRAIN_OPTIONS)) from None
        except KeyboardInterrupt:
            raise interrupted(trainer, args, existed) from None
        if trainer.ranks.is_main and existed and args.resume:
            say(f"--resume: {args.out} had finished its {trainer.iter} iterations; nothing "
                "left to train (a larger --iters trains on)" if trainer.start_iter == args.iters
                else f"--resume: trained {args.out} on from iteration {trainer.start_iter} to "
                f"{trainer.iter}", args.out)
        if trainer.ranks.is_main:
            say(f"val loss {history['val_loss'][-1]:.4f} after {trainer.iter} iterations "
                f"({history['time'][-1]:.1f} s of training); checkpoint: {args.out}", args.out)


def sample(args: argparse.Namespace) -> None:
    """`sample`: load a checkpoint written by `train` and print a continuation."""
    if not args.prompt:
        raise UsageError("--prompt must hold at least one character")
    device = pick(args.device)
    needed = ("cli_model", "tokenizer", "model_config", "model")
    try:
        saved = ckpt.load(args.checkpoint, trusted=args.trust_checkpoint)
    except ckpt.UntrustedCheckpointError as err:
        raise untrusted(err, "--checkpoint", needed) from None
    except ValueError as err:  # empty, damaged, another format: the option, and the way out
        said = str(err).removeprefix(f"checkpoint {args.checkpoint}")
        raise UsageError(f"--checkpoint {args.checkpoint}{said}; give a file that train "
                         "wrote") from None
    missing = [k for k in needed if k not in saved]
    if missing:
        raise UsageError(
            f"{args.checkpoint} was not written by `python -m labnn train` (it has no "
            f"{', '.join(missing)})"
        )
    model = saved_model(saved, args.checkpoint)
    model.to(device).eval()
    tokenizer = saved_tokenizer(saved, args.checkpoint)
    try:
        prompt = tokenizer.encode(args.prompt)[None].to(device)
    except ValueError as err:
        raise UsageError(f"--prompt: {err}") from None
    generator = torch.Generator(device=device).manual_seed(args.seed)
    sampling = dict(temperature=args.temperature, top_k=args.top_k, generator=generator)
    if args.compile:
        if not isinstance(model, compiled.MODELS):
            raise UsageError(f"--compile generates with the transformer, xl and feedback-kv "
                             f"models; {args.checkpoint} holds a {saved['cli_model']} model")
        try:
            compiled.ring_slots(model, prompt.size(1), args.tokens)
        except ValueError:  # past the positions a transformer learned
            raise compile_too_long(model.config.seq_len, prompt.size(1)) from None
    shown = []  # the text as it comes: each character printed as it is drawn

    def show(token: torch.Tensor) -> None:
        shown.append(tokenizer.decode(token.cpu()))
        print(shown[-1], end="", flush=True)

    if args.compile:  # else the pause before the first character looks like a hang
        print(f"--compile: compiling the decoding step first ({COMPILE_TIME})", file=sys.stderr,
              flush=True)
    print(args.prompt, end="", flush=True)
    run = compiled.generate if args.compile else type(model).generate
    try:
        run(model, prompt, args.tokens, **sampling, on_token=show)
    except KeyboardInterrupt:
        print()
        raise Interrupted(f"interrupted after {len(shown)} of {args.tokens} "
                          "characters") from None
    except RuntimeError as err:  # the CPU's allocator raises a RuntimeError, CUDA's its own
        if not isinstance(err, torch.OutOfMemoryError) and "allocate" not in str(err):
            raise
        print()
        raise UsageError(f"--tokens {args.tokens}: not enough memory on {device} to "
                         "generate them (the cache grows with each); give fewer") from None
    print()


def saved_model(saved: dict, path: Path) -> torch.nn.Module:
    """The model a checkpoint of `train` holds, or a `UsageError` naming what in it does
    not fit (a file changed after training)."""
    model_cls, config_cls, _ = model_classes(saved["cli_model"])
    held = saved.get("model_class")
    if held != model_cls.__name__:
        raise UsageError(f"{path}: its cli_model {saved['cli_model']!r} is a "
                         f"{model_cls.__name__}, but it holds the weights of a {held}: "
                         "the file was changed after training")
    try:
        model = model_cls(config_cls(**saved["model_config"]))
    except (TypeError, ValueError) as err:
        raise UsageError(f"{path}: its model_config does not make a "
                         f"{config_cls.__name__} ({err})") from None
    ckpt.check_weights(saved["model"], model, path)
    model.load_state_dict(saved["model"])
    return model


def build_parser() -> Parser:
    """The two commands and their options."""
    parser = Parser(prog="python -m labnn", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s (labnn {__version__})")
    sub = parser.add_subparsers(dest="command", required=True)
    debug = Parser(add_help=False)
    debug.add_argument("--debug", action="store_true",
                       help="show the traceback of an error")
    t = sub.add_parser("train", parents=[debug],
                       help="train a model on Tiny Shakespeare, write a checkpoint")
    run = {f.name: f.default for f in dataclasses.fields(TrainConfig)}  # one set of defaults
    add_train_options(t, {name: model_classes(name)[1] for name in MODELS}, run)
    t.add_argument("--resume", action="store_true",
                   help="continue from --out if it exists")
    t.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    t.add_argument("--trust-checkpoint", action="store_true",
                   help=f"with --resume: {TRUST_HELP}")
    t.set_defaults(run=train, command_parser=t)
    s = sub.add_parser("sample", parents=[debug], help="generate text from a checkpoint")
    s.add_argument("--checkpoint", type=out_file, required=True,
                   help="a file written by `python -m labnn train`")
    s.add_argument("--trust-checkpoint", action="store_true", help=TRUST_HELP)
    add_sample_options(s)
    s.add_argument("--compile", action="store_true",
                   help="generate through labnn.compiled (transformer, xl, feedback-kv): "
                   "faster per token for this one stream in the runs measured (8 streams: "
                   f"slower; docs/benchmarks.md), once compiled ({COMPILE_TIME}); a "
                   "learned-position transformer then makes seq_len + 1 - len(prompt) at most")
    s.set_defaults(run=sample, command_parser=s)
    for mine, other in ((t, s), (s, t)):  # an option given to the wrong command
        theirs = set(other.options()) - set(mine.options())
        mine.set_defaults(elsewhere=dict.fromkeys(theirs, other.prog.split()[-1]))
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (errors are printed as one line on
    stderr)."""
    args, extra = build_parser().parse_known_args(argv)
    if extra:  # a misspelt option: the command's own usage, with the nearest name
        args.command_parser.refuse_unknown(extra, args.elsewhere)
    if args.debug:
        args.run(args)
        return 0
    prog = f"python -m labnn {args.command}"
    try:
        args.run(args)
    except Interrupted as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 130
    except OptionError as err:  # malformed, as argparse's own mistakes (status 2)
        print(f"{prog}: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `sample ... | head`: the reader has all it wanted
        drop_stdout()
        return 141  # as a process that SIGPIPE ended (128 + 13), silently
    except KeyboardInterrupt:  # Ctrl-C before training (or sampling) began
        print(f"{prog}: {before_training(args)}", file=sys.stderr)
        return 130
    except (UsageError, ValueError, TypeError, OSError, FloatingPointError) as err:
        print(f"{prog}: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 1
    except Exception as err:  # not a known mistake: one line, saying how to see more
        message = " ".join(str(err).split())
        print(f"{prog}: error: {type(err).__name__}: {message} (--debug shows the "
              "traceback)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
