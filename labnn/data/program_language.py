r"""The language of the program-tracking task: its words, a random program, an
interpreter.

A program starts by setting every variable, then runs random statements, one per `;`:

    a = 3 ; b = 7 ; c = 0 ; a ++ ; if a > 3 : c = 5 ; b = a ; print b 4 ; c -- ; ...

assignments (`x = 5`, `x = y`), increments and decrements (`x ++`, `x --`, always kept
within `[0, max_value]`), conditionals (`if x > 4 : <assignment or increment>`, also
with `<`) and prints (`print x` followed by the value of `x`). Knowing a printed value
needs the whole history of its variable since its last constant assignment.
`labnn.data.programs` turns such programs into a model's inputs and targets.

Dimension letters (the package legend): `T` words of one program.
"""

from __future__ import annotations

import random

import torch

from labnn.nn.arguments import is_int

KEYWORDS = ("<pad>", ";", "=", "++", "--", "if", ">", "<", ":", "print")


class ProgramTokenizer:
    """Word-level vocabulary: keywords, variable names `a, b, ...` and the values
    `0 .. max_value`.

    Args:
        n_vars: number of variables (at most 26).
        max_value: largest value a variable can hold.
    """

    def __init__(self, n_vars: int, max_value: int = 9):
        """Keywords first, then the variables, then the values (so `<pad>` is id 0)."""
        if not is_int(n_vars) or not 1 <= n_vars <= 26:
            raise ValueError(f"n_vars must be an int in [1, 26], got {n_vars!r}")
        if not is_int(max_value) or max_value < 1:
            raise ValueError(f"max_value must be an int >= 1, got {max_value!r}")
        self.variables = [chr(ord("a") + i) for i in range(n_vars)]
        self.words = (
            list(KEYWORDS) + self.variables + [str(v) for v in range(max_value + 1)]
        )
        self.index = {w: i for i, w in enumerate(self.words)}
        self.pad_id = self.index["<pad>"]

    @property
    def vocab_size(self) -> int:
        """`V`, the number of words."""
        return len(self.words)

    def encode(self, text: str | list[str]) -> torch.Tensor:
        """Words (a string split on spaces, or a list) -> LongTensor `[T]`."""
        if not isinstance(text, (str, list, tuple)):
            raise TypeError(
                f"text must be a str or a list of words, got {type(text).__name__}"
            )
        words = text.split() if isinstance(text, str) else text
        unknown = [w for w in words if w not in self.index]
        if unknown:
            raise ValueError(
                f"text contains {unknown[0]!r}, not in the program vocabulary "
                f"{self.words}"
            )
        return torch.tensor([self.index[w] for w in words], dtype=torch.long)

    def decode(self, ids: torch.Tensor | list[int]) -> str:
        """Ids -> words joined by spaces, padding dropped."""
        if isinstance(ids, torch.Tensor) and (ids.dim() != 1 or ids.is_floating_point()):
            raise ValueError(f"ids must be a 1-D tensor of integer ids, got "
                             f"{str(ids.dtype)[6:]} {list(ids.shape)}")
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        bad = [
            i
            for i in ids
            if not is_int(i) or not 0 <= i < self.vocab_size
        ]
        if bad:
            raise ValueError(
                f"id {bad[0]!r} is outside the program vocabulary [0, {self.vocab_size})"
            )
        return " ".join(self.words[i] for i in ids if i != self.pad_id)


def generate_program(
    rng: random.Random, n_vars: int, n_statements: int, max_value: int = 9
) -> list[str]:
    """One random program of `n_statements` statements after the initial assignments, as
    a list of words."""
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
            words += (
                ["if", x, op, str(c), ":"]
                + _update(rng, names, values, max_value, taken)
                + [";"]
            )
        else:
            words += _update(
                rng, names, values, max_value, True, allow_assign=kind == "assign"
            ) + [";"]
    return words


def _update(
    rng, names, values, max_value, apply: bool, allow_assign: bool = True
) -> list[str]:
    """An assignment or increment/decrement valid for the current values; applied to
    `values` if `apply`."""
    x = rng.choice(names)
    if allow_assign and rng.random() < 0.5:
        src = rng.choice(names + ["const"])
        new = rng.randint(0, max_value) if src == "const" else values[src]
        words = [x, "=", str(new) if src == "const" else src]
    else:
        up = values[x] == 0 or (values[x] < max_value and rng.random() < 0.5)
        op = "++" if up else "--"
        new, words = values[x] + (1 if op == "++" else -1), [x, op]
    if apply:
        values[x] = new
    return words


def run_program(words: list[str]) -> list[int]:
    """Interpret a program and return the values its prints show (checks
    `generate_program`)."""
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
