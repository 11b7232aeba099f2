"""What every checker test asserts: a wrong answer gets its diagnosis, a right one the ✅ line."""

import re

import pytest

from labnn.exercises.grading import ExerciseFailed


def fails_with(check, *args, match=None):
    """`check(*fns)` fails with a diagnosis matching the regex `match` (keyword, or the last argument)."""
    fns, match = (args, match) if match is not None else (args[:-1], args[-1])
    with pytest.raises(ExerciseFailed, match=match):
        check(*fns)


def passes(check, *args, capsys=None):
    """`check(*fns)` accepts the answer and says so (`capsys`: keyword, or the last argument)."""
    fns, capsys = (args, capsys) if capsys is not None else (args[:-1], args[-1])
    check(*fns)
    assert "✅" in capsys.readouterr().out


def named_briefly(check, fns, pattern, flags=0):
    """A learner trial's case: `check(*fns)` fails with a message matching `pattern`, in under 400 characters."""
    with pytest.raises(ExerciseFailed) as info:
        check(*fns)
    message = str(info.value)
    assert re.search(pattern, message, flags), message
    assert len(message) < 400, message
