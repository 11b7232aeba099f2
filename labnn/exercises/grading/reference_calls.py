"""The reference refused however it is reached.

`expect_own_code` reads which functions an answer names; an answer can still reach the
package's own version through a module (`labnn.data.recall.make_recall(...)`), an unbound
method (`FeedbackTransformer.forward(model, tokens)`) or a private one. `reference_refused`
watches the learner's call instead: Python's profile hook reports every function entered,
and entering one of the references from outside the checkers fails by name.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from pathlib import Path
from typing import Callable, Iterator

from labnn.exercises.grading.outcomes import fail

_CHECKERS = str(Path(__file__).resolve().parents[1])  # labnn/exercises: its own calls pass,
_GRADING = str(Path(__file__).resolve().parent)  # but not grading's `call` of the answer


def _by_the_learner(frame) -> bool:
    """Whether `frame` was entered from the learner's code (or is the answer itself,
    handed to grading's `call`), not from a checker's own computation."""
    caller = frame.f_back.f_code.co_filename if frame.f_back else ""
    return caller.startswith(_GRADING) or not caller.startswith(_CHECKERS)


@contextlib.contextmanager
def reference_refused(what: str, references: dict[Callable, str],
                      build: str) -> Iterator[None]:
    """Fail, after the block, if the learner's code entered one of `references`.

    Args:
        what: the call, e.g. ``"make_recall(filler, values, positions)"``.
        references: each function the exercise re-implements -> the name to say, e.g.
            ``{make_recall: "labnn.data.recall.make_recall"}``.
        build: what to build the answer from, e.g. ``"build x and y from tensor
            operations"``.

    Raises:
        ExerciseFailed: a reference was entered from the learner's code, or handed in as
            the answer (a checker's own diagnosis may compute one); raised even when the
            block raised, which it replaces.
    """
    codes = {inspect.unwrap(f).__code__: name for f, name in references.items()}
    called: list[str] = []

    def profile(frame, event, arg):
        if event == "call" and not called and frame.f_code in codes and _by_the_learner(frame):
            called.append(codes[frame.f_code])

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield
    finally:  # named even when a guard of the checker raised first
        sys.setprofile(previous)
        if called:
            fail(f"{what} runs {called[0]}, the reference it is checked against, so it "
                 f"would pass without implementing anything: {build}.")
