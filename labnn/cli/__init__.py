"""Command line: train a model on Tiny Shakespeare and sample from a checkpoint.

    python -m labnn train --model transformer --iters 2000 --out checkpoints/lm.pt
    python -m labnn sample --checkpoint checkpoints/lm.pt --prompt "ROMEO:" --tokens 300

A mistake (a bad option, a missing or damaged file, a run that diverges) ends with one
line on stderr and a non-zero exit status: 2 for malformed options, 1 otherwise, 130
when interrupted. `--debug` shows the traceback. Under `torchrun` the same command
trains on several processes (see `labnn.training.distributed`).

Read in this order: `parser` (argparse, each usage mistake in one line with the way
out), `options` (argparse types and their bounds, `--set`, the checks of
`--out`), `errors` (the one line for each mistake caught later), `sizes` (a run too
large for memory, refused before its model is built), `resume` (a `--resume` from a
checkpoint of another model, refused before its model is built), `commands` (`train`,
`sample`, `main`).
"""

from labnn.cli.commands import MODELS, build_parser, main

__all__ = ["MODELS", "build_parser", "main"]
