"""How an exercise check ends, as a learner sees it in a notebook.

* the stub still raises `NotImplementedError` -> `ExerciseNotDone`, one friendly line
  that points to the tiered hints below the cell (never the stub's own message, which
  could give the answer away);
* a diagnosis -> `ExerciseFailed`, one line naming the mistake and where it shows;
* everything matches -> a line saying so (printed by `labnn.exercises.grading.exercise`).
"""

from __future__ import annotations


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


NOT_DONE = ("not solved yet — fill in the cell above and run it again; stuck? open "
            "Hint 1 below the cell.")


def fail(message: str) -> None:
    """Stop the check with a diagnosis the learner can act on."""
    raise ExerciseFailed(message)
