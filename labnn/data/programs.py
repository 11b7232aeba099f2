r"""Program tracking: tiny programs whose printed values a model must predict (Fan et al.
2020, section 4.1.2).

Dimension letters (the package legend): `N` programs, `T` tokens per program (padded),
`B` programs per batch, `V` vocabulary.

The programs, their words and their interpreter are `labnn.data.program_language`:

    a = 3 ; b = 7 ; c = 0 ; a ++ ; if a > 3 : c = 5 ; b = a ; print b 4 ; c -- ; ...

Only the printed values (the word after `print x`) are predictable; they are what
`printed_accuracy` scores. Knowing one needs the whole history of its variable since its
last constant assignment, which a transformer with a short attention span can only see in
part.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass

import torch

from labnn.nn.arguments import check_int, check_number, is_int
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
    return hits.float().mean().item()


def train_on_programs(
    model: torch.nn.Module,
    train: ProgramData,
    test: ProgramData,
    *,
    iters: int,
    batch_size: int = 64,
    lr: float = 2e-3,
    seed: int = 0,
    logits_fn=None,
    eval_programs: int = 1024,
    desc: str | None = None,
) -> dict[str, float]:
    """Train `model` to predict the printed values, then score both sets.

    The loss is the cross-entropy of the printed values only (`mask`); every other token
    is context. Each step is `labnn.training.optim.update` (the trainer's step: clipping at 1,
    AdamW without weight decay) at the rate of `program_lr`.

    Args:
        model: any labnn LM; called as `logits_fn(model, x)` (default `model(x)[0]`).
        train, test: from `program_task`.
        iters: optimisation steps.
        batch_size: programs per step.
        lr: peak learning rate.
        seed: batch order.
        logits_fn: how to get `[B, T, V]` logits from `model` and `x`.
        eval_programs: score at most this many programs of each set.
        desc: progress-bar label.

    Returns:
        `{"train_acc", "test_acc", "seconds", "final_loss"}`; `seconds` is the training
        time.
    """
    from labnn.training.optim import update  # late imports: labnn.data does not depend on the trainer
    from labnn.training.progress import progress

    for name, value in (("iters", iters), ("batch_size", batch_size),
                        ("eval_programs", eval_programs)):
        check_int(name, value)
    check_number("lr", lr)
    if not train.mask.any():
        raise ValueError("train has no printed values: there is nothing to learn (every "
                         "program prints nothing)")
    logits_fn = logits_fn or (lambda m, x: m(x)[0])
    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    g, start = torch.Generator().manual_seed(seed), time.perf_counter()
    model.train()
    for i in progress(range(iters), desc=desc):
        rows = torch.randint(0, train.x.size(0), (batch_size,), generator=g)
        while not train.mask[
            rows
        ].any():  # no printed value: its mean loss would be 0 / 0
            rows = torch.randint(0, train.x.size(0), (batch_size,), generator=g)
        x, y, mask = (t[rows].to(device) for t in (train.x, train.y, train.mask))
        logits = logits_fn(model, x)
        loss = torch.nn.functional.cross_entropy(logits[mask], y[mask])
        update(model, opt, loss, lr=program_lr(i, iters, lr), grad_clip=1.0)
    seconds = time.perf_counter() - start
    scores = {
        f"{name}_acc": evaluate_programs(model, d, logits_fn, max_programs=eval_programs)
        for name, d in (("train", train), ("test", test))
    }
    return {**scores, "seconds": seconds, "final_loss": loss.item()}


def program_lr(i: int, iters: int, lr: float) -> float:
    r"""Learning rate of step `i` of `train_on_programs`: a linear warm-up over the first
    $w = \max(1, \lfloor n / 10 \rfloor)$ of $n$ steps times a cosine decay to 0
    over all of them,

    $$\eta_i = \eta \cdot \min\!\Big(1, \frac{i + 1}{w}\Big) \cdot
    \tfrac12\Big(1 + \cos\frac{\pi \min(i, n)}{n}\Big).$$

    Not `TrainConfig.lr_at` (which decays only after the warm-up, to `min_lr`): the
    notebooks' figures and claims were measured with this one.
    """
    warmup = max(1, iters // 10)
    factor = (
        min(1.0, (i + 1) / warmup)
        * 0.5
        * (1 + math.cos(math.pi * min(i, iters) / iters))
    )
    return lr * factor


@torch.no_grad()
def evaluate_programs(
    model: torch.nn.Module,
    data: ProgramData,
    logits_fn=None,
    batch_size: int = 256,
    max_programs: int = 1024,
) -> float:
    """`printed_accuracy` of `model` over the first `max_programs` programs of `data`,
    in eval mode.

    Batches without a printed value are skipped (they have nothing to score).
    """
    check_int("batch_size", batch_size)
    check_int("max_programs", max_programs)
    logits_fn = logits_fn or (lambda m, x: m(x)[0])
    device, n = next(model.parameters()).device, min(max_programs, data.x.size(0))
    if not data.mask[:n].any():
        raise ValueError(f"data has no printed values to score in its first {n} programs")
    was_training = model.training
    model.eval()
    hits = total = 0
    try:
        for i in range(0, n, batch_size):
            part = ProgramData(
                *(t[i : i + batch_size] for t in (data.x, data.y, data.mask))
            )
            k = int(part.mask.sum())
            if k:
                logits = logits_fn(model, part.x.to(device)).cpu()
                hits, total = hits + printed_accuracy(logits, part) * k, total + k
    finally:
        model.train(was_training)
    return hits / total
