r"""Program tracking: tiny programs whose printed values a model must predict, a miniature
of the algorithmic task in the code released with the Feedback Transformer's paper (Fan et
al., 2020, arXiv 2002.09402), described below as that code writes it (the paper's own text
on the task was not read here).

Dimension letters (the package legend): `N` programs, `T` tokens per program (padded),
`B` programs per batch, `V` vocabulary.

The programs, their words and their interpreter are `labnn.data.program_language`:

    a = 3 ; b = 7 ; c = 0 ; a ++ ; if a > 3 : c = 5 ; b = a ; print b 4 ; c -- ; ...

Only the printed values (the word after `print x`) are predictable; they are what
`printed_accuracy` scores. Knowing one needs the whole history of its variable since its
last constant assignment, which a transformer with a short attention span can only see in
part.

The task as the paper's code generates it (facebookresearch/transformer-sequential,
`data/gen_data_algo_seq.py`): 3 or 5 variables `x y z p r`, statements `=` (of a new
variable only), `++`, `--`, `if` (with one nested statement) and `print`, values 1 to 10,
100 statements a program, only the printed values labelled. Its README reports 99.1 %
test accuracy for the Feedback Transformer against 33.7 % for the Transformer with 3
variables (92.6 % vs. 37.5 % with 5); its scripts (`experiments/feedback/`) train a
4-layer Feedback model and an 8-layer Transformer, width 256, attention limited to 100
tokens.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from labnn.nn.arguments import check_int, is_int
from labnn.data.program_language import ProgramTokenizer, generate_program


@dataclass
class ProgramData:
    """Programs as model inputs: `x` predicts `y` (shifted by one); `mask` marks printed
    values in `y`.

    Shape:
        x, y, mask `[N, T]` (padded with `tokenizer.pad_id`; padding is never in `mask`).
    """

    x: torch.Tensor
    y: torch.Tensor
    mask: torch.Tensor

    def __post_init__(self) -> None:
        """Raise a clear error unless x, y, mask are one `[N, T]` shape, mask bool."""
        for name in ("x", "y", "mask"):
            t = getattr(self, name)
            if not isinstance(t, torch.Tensor) or t.dim() != 2:
                got = list(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"ProgramData.{name} must be a [N, T] tensor, got {got}")
        if not self.x.shape == self.y.shape == self.mask.shape:
            raise ValueError(
                "ProgramData needs x, y and mask of one shape, got "
                f"{list(self.x.shape)}, "
                f"{list(self.y.shape)} and {list(self.mask.shape)}"
            )
        if self.mask.dtype != torch.bool:
            raise TypeError(
                "ProgramData.mask must be a bool tensor (True = printed value), got "
                f"{self.mask.dtype}"
            )


def program_task(
    n_train: int,
    n_test: int,
    *,
    n_vars: int = 3,
    n_statements: int = 20,
    max_value: int = 9,
    seed: int = 0,
) -> tuple[ProgramData, ProgramData, ProgramTokenizer]:
    """Seeded train and test sets of distinct programs (no test program appears in
    training).

    Args:
        n_train: training programs.
        n_test: test programs.
        n_vars: variables per program.
        n_statements: statements after the initial assignments.
        max_value: values lie in `[0, max_value]`.
        seed: everything is a function of it.

    Returns:
        `(train, test, tokenizer)`.
    """
    for name, value in (("n_train", n_train), ("n_test", n_test),
                        ("n_statements", n_statements)):
        check_int(name, value)
    if not is_int(seed):
        raise ValueError(
            f"seed must be an int (everything is a function of it), got {seed!r}"
        )
    tok = ProgramTokenizer(n_vars, max_value)
    rng, seen, programs, repeats = random.Random(seed), set(), [], 0
    wanted = n_train + n_test
    # draws in a row that bring nothing new before concluding that none is left
    patience = max(10_000, 10 * wanted)
    while len(programs) < wanted:
        words = generate_program(rng, n_vars, n_statements, max_value)
        if tuple(words) in seen:
            repeats += 1
            if repeats >= patience:
                raise ValueError(
                    f"only {len(programs)} distinct programs found with n_vars={n_vars}, "
                    f"n_statements={n_statements}, max_value={max_value} ({patience} "
                    "draws in a row gave none "
                    f"new), fewer than the n_train + n_test = {wanted} asked: ask for "
                    "fewer, or for longer "
                    "programs"
                )
            continue
        seen.add(tuple(words))
        programs.append(words)
        repeats = 0
    return _encode(programs[:n_train], tok), _encode(programs[n_train:], tok), tok


def _encode(programs: list[list[str]], tok: ProgramTokenizer) -> ProgramData:
    """Pad the programs to one length; mark the value after each `print` in `y`."""
    length = max(len(p) for p in programs)
    ids = torch.full((len(programs), length), tok.pad_id, dtype=torch.long)
    printed = torch.zeros(len(programs), length, dtype=torch.bool)
    for i, words in enumerate(programs):
        ids[i, : len(words)] = tok.encode(words)
        printed[i, [j + 2 for j, w in enumerate(words) if w == "print"]] = True
    return ProgramData(ids[:, :-1], ids[:, 1:], printed[:, 1:])


def printed_accuracy(logits: torch.Tensor, data: ProgramData) -> float:
    """Fraction of printed values the model predicts (argmax) correctly; every other
    token is ignored.

    Shape:
        logits `[N, T, V]` for the inputs `data.x` `[N, T]`.
    """
    if (
        not isinstance(logits, torch.Tensor)
        or logits.dim() != 3
        or logits.shape[:2] != data.y.shape
    ):
        raise ValueError(
            f"logits have shape {list(getattr(logits, 'shape', []))}, expected [N, T, "
            "V] with "
            f"[N, T] = {list(data.y.shape)}"
        )
    if not data.mask.any():
        raise ValueError("data has no printed values to score")
    hits = (logits.argmax(-1) == data.y)[data.mask]
    return int(hits.sum()) / hits.numel()  # a float32 mean would round 1/8 to 0.12500000373
