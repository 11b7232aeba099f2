"""Program tracking: tiny programs whose printed values a model must predict (Fan et al. 2020, section 4.1.2).

Dimension letters: `N` programs, `T` tokens per program (padded), `V` vocabulary.

A program starts by setting every variable, then runs random statements, one per `;`:

    a = 3 ; b = 7 ; c = 0 ; a ++ ; if a > 3 : c = 5 ; b = a ; print b 4 ; c -- ; print c 4 ; ...

assignments (`x = 5`, `x = y`), increments and decrements (`x ++`, `x --`, always kept within
`[0, max_value]`), conditionals (`if x > 4 : <assignment or increment>`, also with `<`) and prints
(`print x` followed by the value of `x`). Only the printed values are predictable; they are what
`printed_accuracy` scores. Knowing a value needs the whole history of its variable since its last constant
assignment, which a transformer with a short attention span can only see in part.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass

import torch

KEYWORDS = ("<pad>", ";", "=", "++", "--", "if", ">", "<", ":", "print")


class ProgramTokenizer:
    """Word-level vocabulary: keywords, variable names `a, b, ...` and the values `0 .. max_value`.

    Args:
        n_vars: number of variables (at most 26).
        max_value: largest value a variable can hold.
    """

    def __init__(self, n_vars: int, max_value: int = 9):
        if not isinstance(n_vars, int) or isinstance(n_vars, bool) or not 1 <= n_vars <= 26:
            raise ValueError(f"n_vars must be an int in [1, 26], got {n_vars!r}")
        if not isinstance(max_value, int) or isinstance(max_value, bool) or max_value < 1:
            raise ValueError(f"max_value must be an int >= 1, got {max_value!r}")
        self.variables = [chr(ord("a") + i) for i in range(n_vars)]
        self.words = list(KEYWORDS) + self.variables + [str(v) for v in range(max_value + 1)]
        self.index = {w: i for i, w in enumerate(self.words)}
        self.pad_id = self.index["<pad>"]

    @property
    def vocab_size(self) -> int:
        return len(self.words)

    def encode(self, text: str | list[str]) -> torch.Tensor:
        """Words (a string split on spaces, or a list) -> LongTensor `[T]`."""
        if not isinstance(text, (str, list, tuple)):
            raise TypeError(f"text must be a str or a list of words, got {type(text).__name__}")
        words = text.split() if isinstance(text, str) else text
        unknown = [w for w in words if w not in self.index]
        if unknown:
            raise ValueError(f"text contains {unknown[0]!r}, not in the program vocabulary {self.words}")
        return torch.tensor([self.index[w] for w in words], dtype=torch.long)

    def decode(self, ids: torch.Tensor | list[int]) -> str:
        """Ids -> words joined by spaces, padding dropped."""
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        bad = [i for i in ids if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"id {bad[0]!r} is outside the program vocabulary [0, {self.vocab_size})")
        return " ".join(self.words[i] for i in ids if i != self.pad_id)


def generate_program(rng: random.Random, n_vars: int, n_statements: int, max_value: int = 9) -> list[str]:
    """One random program of `n_statements` statements after the initial assignments, as a list of words."""
    names = [chr(ord("a") + i) for i in range(n_vars)]
    values = {x: rng.randint(0, max_value) for x in names}
    words = [w for x in names for w in (x, "=", str(values[x]), ";")]
    for _ in range(n_statements):
        kind = rng.choices(["assign", "step", "if", "print"], weights=[2, 3, 2, 3])[0]
        if kind == "print":
            x = rng.choice(names)
            words += ["print", x, str(values[x]), ";"]
        elif kind == "if":
            x, op, c = rng.choice(names), rng.choice("<>"), rng.randint(0, max_value)
            taken = values[x] > c if op == ">" else values[x] < c
            words += ["if", x, op, str(c), ":"] + _update(rng, names, values, max_value, taken) + [";"]
        else:
            words += _update(rng, names, values, max_value, True, allow_assign=kind == "assign") + [";"]
    return words


def _update(rng, names, values, max_value, apply: bool, allow_assign: bool = True) -> list[str]:
    """An assignment or increment/decrement valid for the current values; applied to `values` if `apply`."""
    x = rng.choice(names)
    if allow_assign and rng.random() < 0.5:
        src = rng.choice(names + ["const"])
        new = rng.randint(0, max_value) if src == "const" else values[src]
        words = [x, "=", str(new) if src == "const" else src]
    else:
        op = "++" if values[x] == 0 or (values[x] < max_value and rng.random() < 0.5) else "--"
        new, words = values[x] + (1 if op == "++" else -1), [x, op]
    if apply:
        values[x] = new
    return words


def run_program(words: list[str]) -> list[int]:
    """Interpret a program and return the values its prints show (checks `generate_program`)."""
    values, printed, statements = {}, [], " ".join(words).split(";")
    for stmt in statements:
        w = stmt.split()
        if not w:
            continue
        if w[0] == "print":
            printed.append(values[w[1]])
            continue
        if w[0] == "if":
            taken = values[w[1]] > int(w[3]) if w[2] == ">" else values[w[1]] < int(w[3])
            if not taken:
                continue
            w = w[5:]
        if w[1] == "=":
            values[w[0]] = values[w[2]] if w[2] in values else int(w[2])
        else:
            values[w[0]] += 1 if w[1] == "++" else -1
    return printed


@dataclass
class ProgramData:
    """Programs as model inputs: `x` predicts `y` (shifted by one); `mask` marks printed values in `y`.

    Shape:
        x, y, mask `[N, T]` (padded with `tokenizer.pad_id`; padding is never in `mask`).
    """

    x: torch.Tensor
    y: torch.Tensor
    mask: torch.Tensor

    def __post_init__(self) -> None:
        for name in ("x", "y", "mask"):
            t = getattr(self, name)
            if not isinstance(t, torch.Tensor) or t.dim() != 2:
                got = list(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"ProgramData.{name} must be a [N, T] tensor, got {got}")
        if not self.x.shape == self.y.shape == self.mask.shape:
            raise ValueError(f"ProgramData needs x, y and mask of one shape, got {list(self.x.shape)}, "
                             f"{list(self.y.shape)} and {list(self.mask.shape)}")
        if self.mask.dtype != torch.bool:
            raise TypeError(
                f"ProgramData.mask must be a bool tensor (True = printed value), got {self.mask.dtype}"
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
    """Seeded train and test sets of distinct programs (no test program appears in training).

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
    for name, value in (("n_train", n_train), ("n_test", n_test), ("n_statements", n_statements)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an int (everything is a function of it), got {seed!r}")
    tok = ProgramTokenizer(n_vars, max_value)
    rng, seen, programs, repeats = random.Random(seed), set(), [], 0
    wanted = n_train + n_test
    patience = max(10_000, 10 * wanted)  # draws in a row that bring nothing new before concluding none is left
    while len(programs) < wanted:
        words = generate_program(rng, n_vars, n_statements, max_value)
        if tuple(words) in seen:
            repeats += 1
            if repeats >= patience:
                raise ValueError(
                    f"only {len(programs)} distinct programs found with n_vars={n_vars}, "
                    f"n_statements={n_statements}, max_value={max_value} ({patience} draws in a row gave none "
                    f"new), fewer than the n_train + n_test = {wanted} asked: ask for fewer, or for longer "
                    "programs"
                )
            continue
        seen.add(tuple(words))
        programs.append(words)
        repeats = 0
    return _encode(programs[:n_train], tok), _encode(programs[n_train:], tok), tok


def _encode(programs: list[list[str]], tok: ProgramTokenizer) -> ProgramData:
    length = max(len(p) for p in programs)
    ids = torch.full((len(programs), length), tok.pad_id, dtype=torch.long)
    printed = torch.zeros(len(programs), length, dtype=torch.bool)
    for i, words in enumerate(programs):
        ids[i, : len(words)] = tok.encode(words)
        printed[i, [j + 2 for j, w in enumerate(words) if w == "print"]] = True
    return ProgramData(ids[:, :-1], ids[:, 1:], printed[:, 1:])


def printed_accuracy(logits: torch.Tensor, data: ProgramData) -> float:
    """Fraction of printed values the model predicts (argmax) correctly; every other token is ignored.

    Shape:
        logits `[N, T, V]` for the inputs `data.x` `[N, T]`.
    """
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3 or logits.shape[:2] != data.y.shape:
        raise ValueError(
            f"logits have shape {list(getattr(logits, 'shape', []))}, expected [N, T, V] with "
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
    """Train `model` to predict the printed values (cross-entropy on `mask` only), then score the test set.

    Args:
        model: any labnn LM; called as `logits_fn(model, x)` (default `model(x)[0]`).
        train, test: from `program_task`.
        iters: optimisation steps (AdamW, 10% linear warm-up, cosine decay, gradients clipped at 1).
        batch_size: programs per step.
        lr: peak learning rate.
        seed: batch order.
        logits_fn: how to get `[B, T, V]` logits from `model` and `x`.
        eval_programs: score at most this many programs of each set.
        desc: progress-bar label.

    Returns:
        `{"train_acc", "test_acc", "seconds", "final_loss"}`; `seconds` is the training time.
    """
    from ..progress import progress  # late import: labnn.progress is not a data dependency

    for name, value in (("iters", iters), ("batch_size", batch_size), ("eval_programs", eval_programs)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr >= 0):
        raise ValueError(f"lr must be a finite number >= 0, got {lr!r}")
    if not train.mask.any():
        raise ValueError("train has no printed values: there is nothing to learn (every program prints nothing)")
    logits_fn = logits_fn or (lambda m, x: m(x)[0])
    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    warmup = max(1, iters // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: min(1.0, (i + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(i, iters) / iters))
    )
    g, start, loss = torch.Generator().manual_seed(seed), time.perf_counter(), torch.tensor(0.0)
    model.train()
    for _ in progress(range(iters), desc=desc):
        rows = torch.randint(0, train.x.size(0), (batch_size,), generator=g)
        while not train.mask[rows].any():  # no printed value: no target, its mean loss would be 0 / 0
            rows = torch.randint(0, train.x.size(0), (batch_size,), generator=g)
        x, y, mask = (t[rows].to(device) for t in (train.x, train.y, train.mask))
        logits = logits_fn(model, x)
        loss = torch.nn.functional.cross_entropy(logits[mask], y[mask])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    seconds = time.perf_counter() - start
    scores = {
        f"{name}_acc": evaluate_programs(model, d, logits_fn, max_programs=eval_programs)
        for name, d in (("train", train), ("test", test))
    }
    return {**scores, "seconds": seconds, "final_loss": loss.item()}


@torch.no_grad()
def evaluate_programs(
    model: torch.nn.Module, data: ProgramData, logits_fn=None, batch_size: int = 256, max_programs: int = 1024
) -> float:
    """`printed_accuracy` of `model` over the first `max_programs` programs of `data`, in eval mode.

    Batches without a printed value are skipped (they have nothing to score).
    """
    for name, value in (("batch_size", batch_size), ("max_programs", max_programs)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    logits_fn = logits_fn or (lambda m, x: m(x)[0])
    device, n = next(model.parameters()).device, min(max_programs, data.x.size(0))
    if not data.mask[:n].any():
        raise ValueError(f"data has no printed values to score in its first {n} programs")
    was_training = model.training
    model.eval()
    hits = total = 0
    try:
        for i in range(0, n, batch_size):
            part = ProgramData(*(t[i : i + batch_size] for t in (data.x, data.y, data.mask)))
            k = int(part.mask.sum())
            if k:
                logits = logits_fn(model, part.x.to(device)).cpu()
                hits, total = hits + printed_accuracy(logits, part) * k, total + k
    finally:
        model.train(was_training)
    return hits / total
