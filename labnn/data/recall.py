r"""Delayed recall: the answer at a position is a token `d` positions back, `d` swept.

Dimension letters: `N` examples, `T` tokens per example, `V` vocabulary.

An example is `T` random filler tokens with ONE value token written at position `p`.
From `p + 1` on, the label of every position is that value; before and at `p` there is
nothing to predict:

    tokens   f f 5 f f f f f ... f
    labels   - - - 5 5 5 5 5 ... 5     (- = IGNORE, skipped by the loss and the scores)

At position `t > p` the answer lies $d = t - p$ tokens back: one example scores every
distance from 1 to `T - 1 - p`. Fillers and values have disjoint ids, so nothing but the
value predicts the label; guessing scores `1 / n_values`. A model that attends (directly
or through its layers) at most `R` tokens back can only answer for `d <= R`; a model
that carries the value forward in a state can answer at any `d`.

Vocabulary: `0 .. n_values - 1` are the values, `n_values .. n_values + n_filler - 1`
the fillers.

Its batches (`recall_batches`) and `plateau_exit` serve the training loop
`labnn.training.tasks.train_recall`, which notebook 05 and `benchmarks/recall_sweep.py`
both run, so that the two give the same figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from labnn.nn.arguments import check_int, check_number, int_error, is_int

IGNORE = -100  # label of a position with nothing to predict (ignore_index of the loss)


@dataclass(frozen=True)
class RecallVocab:
    """Token ids of the delayed-recall task.

    Args:
        n_values: distinct values (chance accuracy is `1 / n_values`).
        n_filler: distinct filler tokens.
    """

    n_values: int = 8
    n_filler: int = 8

    def __post_init__(self) -> None:
        for name in ("n_values", "n_filler"):
            value = getattr(self, name)
            check_int(name, value)

    @property
    def vocab_size(self) -> int:
        """`V = n_values + n_filler`."""
        return self.n_values + self.n_filler

    @property
    def chance(self) -> float:
        """Accuracy of guessing a value: `1 / n_values`."""
        return 1.0 / self.n_values


def make_recall(
    filler: torch.Tensor, values: torch.Tensor, positions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Write `values[n]` into a copy of row `n` of `filler` at `positions[n]`.

    Args:
        filler: filler token ids (left unchanged).
        values: each row's value id.
        positions: where each row's value goes, in `[0, T - 2]` (a position must
            follow it).

    Shape:
        filler `[N, T]`, values `[N]`, positions `[N]` -> x `[N, T]`, y `[N, T]`
        (both long).

    Returns:
        `(x, y)`: the tokens, and the labels: `values[n]` at every position after
        `positions[n]`, `IGNORE` elsewhere.
    """
    for name, t, dims in (("filler", filler, 2), ("values", values, 1),
                          ("positions", positions, 1)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a {dims}-D integer tensor, "
                            f"got {type(t).__name__}")
        if t.dim() != dims or t.is_floating_point() or t.dtype == torch.bool:
            raise TypeError(f"{name} must be a {dims}-D integer tensor, "
                            f"got shape {list(t.shape)}, dtype {t.dtype}")
    n, seq_len = filler.shape
    for name, t in (("values", values), ("positions", positions)):
        if t.device != filler.device:
            raise ValueError(f"{name} is on {t.device}, but filler is on {filler.device}: "
                             "put all three on one device")
    if values.shape != (n,) or positions.shape != (n,):
        raise ValueError(f"values {list(values.shape)} and positions "
                         f"{list(positions.shape)} must both be [N] = [{n}]")
    if n and (positions.min() < 0 or positions.max() > seq_len - 2):
        bad = positions[(positions < 0) | (positions > seq_len - 2)][0].item()
        raise ValueError(f"positions must lie in [0, T - 2] = [0, {seq_len - 2}], "
                         f"got {bad}")
    rows = torch.arange(n, device=filler.device)  # where the inputs are (a GPU too)
    x = filler.clone().long()
    x[rows, positions] = values.long()
    after = torch.arange(seq_len, device=filler.device) > positions[:, None]  # [N, T]
    y = torch.where(after, values.long()[:, None], torch.full_like(x, IGNORE))
    return x, y


def check_seq_len(seq_len: int) -> None:
    """Raise a clear error unless `seq_len` leaves room for a value and a position after
    it."""
    if not is_int(seq_len) or seq_len < 2:
        raise int_error(seq_len)(
            f"seq_len must be an int >= 2 (a value and a position after it), got {seq_len!r}")


def recall_batch(
    positions: torch.Tensor, seq_len: int, vocab: RecallVocab = RecallVocab(), *,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random fillers and values, a value per row at `positions` (`make_recall`).

    They are drawn where `generator` lives (the CPU without one), then moved to the
    positions' device: one generator gives the same batch on every device.

    Shape:
        positions `[N]` -> x `[N, T]`, y `[N, T]`, on the positions' device.
    """
    check_seq_len(seq_len)
    if not isinstance(positions, torch.Tensor) or positions.dim() != 1:
        got = (f"shape {list(positions.shape)}" if isinstance(positions, torch.Tensor)
               else type(positions).__name__)
        raise TypeError(f"positions must be a 1-D integer tensor, got {got}")
    n = positions.numel()
    where = generator.device if isinstance(generator, torch.Generator) else "cpu"
    filler = torch.randint(vocab.n_values, vocab.vocab_size, (n, seq_len),
                           generator=generator, device=where)
    values = torch.randint(0, vocab.n_values, (n,), generator=generator, device=where)
    return make_recall(filler.to(positions.device), values.to(positions.device), positions)


def value_distances(y: torch.Tensor) -> torch.Tensor:
    """How far back the value lies from each labelled position: 1 at the first, 2, ...

    Shape:
        y `[N, T]` -> `[N, T]` (long; 0 where `y` is `IGNORE`).
    """
    labelled = (y != IGNORE).long()
    return labelled.cumsum(dim=1) * labelled


def accuracy_by_distance(
    logits: torch.Tensor, y: torch.Tensor, max_distance: int
) -> torch.Tensor:
    """Accuracy of the argmax prediction at each distance `1 .. max_distance`.

    NaN at a distance where no position is labelled (0 / 0): "never tested", not
    "always wrong".

    The hits and positions are counted in integers and divided in at least float32:
    counted in bfloat16, a count would stop growing at 256.

    Shape:
        logits `[N, T, V]`, y `[N, T]` -> `[max_distance]`, the logits' dtype; entry
        `d - 1` is distance `d`.
    """
    if logits.dim() != 3 or logits.shape[:2] != y.shape:
        raise ValueError(f"expected logits [N, T, V] and y [N, T], "
                         f"got {list(logits.shape)} and {list(y.shape)}")
    if not logits.is_floating_point():  # a NaN (never tested) cast to ints is garbage
        raise TypeError(f"logits must be floating (the model's scores), got {logits.dtype}")
    check_int("max_distance", max_distance)
    d = value_distances(y).flatten()
    hits = (logits.argmax(-1) == y).flatten().long()
    keep = (d >= 1) & (d <= max_distance)
    total = hits.new_zeros(max_distance).index_add_(0, d[keep] - 1, torch.ones_like(hits[keep]))
    right = hits.new_zeros(max_distance).index_add_(0, d[keep] - 1, hits[keep])
    exact = torch.promote_types(logits.dtype, torch.float32)
    # 0 / 0 = NaN where no position has that distance
    return (right.to(exact) / total.to(exact)).to(logits.dtype)


def recall_batches(
    steps: int, batch_size: int, seq_len: int, vocab: RecallVocab = RecallVocab(), *,
    seed: int = 1,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`steps` training batches, each value's position uniform over `[0, T - 2]`.

    One generator seeded with `seed` draws, batch after batch, the positions and then
    `recall_batch`: the same `seed` gives the same batches (so several models can train
    on the same examples).

    Shape:
        a list of `steps` pairs `(x [batch_size, T], y [batch_size, T])`.
    """
    for name, value in (("steps", steps), ("batch_size", batch_size)):
        check_int(name, value)
    check_seq_len(seq_len)
    check_int("seed", seed, low=0)
    g = torch.Generator().manual_seed(seed)
    return [
        recall_batch(torch.randint(0, seq_len - 1, (batch_size,), generator=g), seq_len,
                     vocab, generator=g)
        for _ in range(steps)
    ]


def plateau_exit(losses: list[float], level: float, width: int = 20) -> int | None:
    r"""The first step at which the mean of the last `width` losses is below `level`.

    With `level` a little under $\ln n_\text{values}$ (the loss of guessing among the
    values), this is when a model leaves the plateau of guessing and starts to recall.

    Args:
        losses: the loss of every step, in order.
        level: the loss to get under.
        width: how many steps the mean runs over (one lucky batch does not count).

    Returns:
        The step (0-based), or None if the mean never gets below `level`.
    """
    check_int("width", width)
    check_number("level", level, low=-math.inf, expected="a finite number (a loss)")
    for i in range(width, len(losses) + 1):
        if sum(losses[i - width:i]) / width < level:
            return i - 1
    return None
