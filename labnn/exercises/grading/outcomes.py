"""How an exercise check ends, as a learner sees it in a notebook.

* the stub still raises `NotImplementedError` -> `ExerciseNotDone`, one friendly line
  that points to the tiered hints below the cell (never the stub's own message, which
  could give the answer away); `is_stub` tells the stub's `raise` from torch's own
  `NotImplementedError`, which is a mistake in the learner's code;
* a diagnosis -> `ExerciseFailed`, one line naming the mistake and where it shows;
* everything matches -> a line saying so (printed by `labnn.exercises.grading.exercise`).
"""

from __future__ import annotations

import contextlib
import dis
import re
from pathlib import Path
from typing import Iterator

import torch

_TORCH = Path(torch.__file__).resolve().parent


class ExerciseError(AssertionError):
    """Base of the two exercise outcomes; rendered by IPython as a single line, without a
    traceback."""

    symbol = ""

    def _render_traceback_(self) -> list[str]:
        """What IPython prints instead of a traceback: the symbol and the message."""
        return [f"{self.symbol} {self}"]


class ExerciseNotDone(ExerciseError):
    """The exercise stub has not been filled in yet."""

    symbol = "✏️"


class ExerciseFailed(ExerciseError):
    """The learner's function runs but its result differs from the reference."""

    symbol = "❌"


NOT_DONE = ("not solved yet — fill in the code of this cell and run it again; stuck? open "
            "Hint 1 below the cell.")


def is_stub(err: BaseException) -> bool:
    """Whether `err` is an unfilled stub's `NotImplementedError`: raised by a `raise`
    statement outside torch, as `raise NotImplementedError()` in the exercise's cell, or
    in a helper the learner left unfilled.

    torch raises `NotImplementedError` too, from its operators: for a dtype an operator
    has no kernel for (`softmax` of a bool tensor: `"softmax_lastdim_kernel_impl" not
    implemented for 'Bool'`) and, since torch 2.14, for `1 - mask` on a bool mask. Such
    an error is a mistake in the learner's code, to be named or shown, never "not
    solved yet". The innermost frame of the traceback tells the two apart: the stub's
    is a `raise` in the learner's code; an operator's is the call that went into torch.
    """
    if not isinstance(err, NotImplementedError):
        return False
    tb = err.__traceback__
    if tb is None:  # never raised
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    if Path(code.co_filename).resolve().is_relative_to(_TORCH):
        return False
    return any(i.offset == tb.tb_lasti and i.opname == "RAISE_VARARGS"
               for i in dis.get_instructions(code))


def fail(message: str) -> None:
    """Stop the check with a diagnosis the learner can act on."""
    raise ExerciseFailed(message)


def first_line(err: BaseException | str, limit: int | None = None) -> str:
    """The first line of an error's message (at most `limit` characters), for a diagnosis
    that quotes what the learner's code raised."""
    return (str(err).strip().splitlines() or [""])[0][:limit]


@contextlib.contextmanager
def saved_changed(what: str, how: str = "e.g. x.mul_(2) or x += ... after an "
                  "operation used x", fix: str = "make a new tensor instead, x = x * 2"
                  ) -> Iterator[None]:
    """Name autograd's refusal to backpropagate through a tensor changed in place after
    an operation saved it for the backward pass, raised by the block (a gradient
    check); any other error goes on as it is.

    Args:
        what: the call whose gradient is checked, e.g. ``"shared_kv(m, norm, kv, 2)"``.
        how: how an answer does it, as the exercise invites.
        fix: what to write instead.
    """
    try:
        yield
    except RuntimeError as err:
        if "modified by an inplace operation" not in str(err):
            raise
        found = re.search(r"\[torch\.\w+ (\[[\d, ]*\])\]", str(err))
        which = f" (one of shape {found[1]})" if found else ""
        fail(f"the gradient of {what} cannot be computed: a tensor the backward pass "
             f"needs{which} was changed in place after use ({how}): {fix}.")


def copied_leaves(results: list[torch.Tensor], inputs: list[torch.Tensor]) -> str:
    """A sentence when `results` were computed from leaf tensors that require grad other
    than `inputs` (walking their autograd graphs): copies of the inputs or of a module's
    parameters, which take the gradient the originals should get; else ``""``."""
    known, seen, found = {id(t) for t in inputs}, set(), set()
    nodes = [r.grad_fn for r in results]
    while nodes:
        node = nodes.pop()
        if node is not None and node not in seen:
            seen.add(node)
            leaf = getattr(node, "variable", None)
            found |= {id(leaf)} - known if leaf is not None else set()
            nodes += [n for n, _ in node.next_functions]
    return (f"it is computed from {len(found)} tensor(s) of its own that require grad: copies "
            "(x.detach().requires_grad_(), copy.deepcopy(module), nn.Linear + load_state_dict) "
            "take the gradient; use the tensors and layers given.") if found else ""
