"""The command line's argparse parser: every usage mistake in one line naming the way out
(the nearest command or option, an option of the other command, a checkpoint given
without `--checkpoint`), and no option guessed from its first letters.

Why not argparse alone: its `error` prints the usage block and the bare mistake, and only
Python 3.14 adds `suggest_on_error` (the nearest command), not the others here.
"""

from __future__ import annotations

import argparse
import difflib
import re
import typing

# commands a user may reach for that go by another name here
OTHER_NAMES = {"generate": "sample", "gen": "sample", "infer": "sample",
               "eval": "train evaluates at every --eval-interval",
               "evaluate": "train evaluates at every --eval-interval", "fit": "train"}


def hint(message: str, given: list[str]) -> str:
    """`message` of argparse with the way out added: the nearest name of an invalid
    command, or the file that `given` (this command's arguments) holds where a required
    `--checkpoint` was looked for."""
    choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if choice:  # the choices quoted (Python 3.11) or not (3.12.8 and later)
        word, choices = choice[1], re.findall(r"[\w-]+", choice[2])
        near = OTHER_NAMES.get(word) or next(iter(
            difflib.get_close_matches(word, choices, n=1, cutoff=0.5)), None)
        if near in choices:
            return f"{message} (did you mean {near}?)"
        return f"{message} ({near})" if near else message
    stray = [a for a in given if not a.startswith("-")]
    if "required: --checkpoint" in message and stray:
        return f"{message}: give the file as --checkpoint {stray[0]}"
    return message


class Parser(argparse.ArgumentParser):
    """argparse, with errors on one line, and no option guessed from its first letters
    (`--tok 3` is refused, not read as `--tokens 3`)."""

    def __init__(self, *args, **kwargs):
        """As `argparse.ArgumentParser`, with `allow_abbrev=False` unless given."""
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        """As argparse's, keeping this (sub)command's `args` for `error`'s hint."""
        self.given = [] if args is None else list(args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> typing.NoReturn:
        """Exit with status 2 and one line naming the mistake, the way out (`hint`) and
        `--help`."""
        message = hint(message, getattr(self, "given", []))
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def options(self) -> list[str]:
        """Every option string of this (sub)command, `--help` included."""
        return [name for action in self._actions for name in action.option_strings]

    def refuse_unknown(self, extra: list[str],
                       elsewhere: dict[str, str] | None = None) -> typing.NoReturn:
        """Refuse the arguments `parse_known_args` left over, as this (sub)command's
        mistake (argparse leaves a subcommand's unknown options to the top-level parser,
        whose usage is the wrong one): an option of another command (`elsewhere`:
        option -> command) is said to be that command's, a misspelt one gets the
        nearest name."""
        known, elsewhere = self.options(), elsewhere or {}
        this = self.prog.split()[-1]
        named = []
        for arg in extra:
            flag = arg.partition("=")[0]
            near = difflib.get_close_matches(flag, known, n=1) if flag.startswith("-") else []
            if flag in elsewhere:
                arg += f" (an option of `{elsewhere[flag]}`, not of `{this}`)"
            elif near:
                arg += f" (did you mean {near[0]}?)"
            named.append(arg)
        self.error(f"unrecognized arguments: {' '.join(named)}")
