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


def judge(check, fns, pattern, capsys):
    """A learner trial's case, crash or not: `named_briefly`; for an answer that crashes, the
    check's notice (on stderr) printed before the learner's own error, which it re-raises, is
    the message (the pattern may match the notice or the error's own line)."""
    try:
        named_briefly(check, fns, pattern, re.S)
    except AssertionError:
        raise
    except Exception as error:  # the learner's own error, after the check's notice
        out = capsys.readouterr().err
        notice = out[out.rfind("⚠️"):]
        assert re.search(pattern, notice + f"{type(error).__name__}: {error}", re.S), notice
        assert len(notice) < 400, notice
