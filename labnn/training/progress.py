"""A progress bar that stays one line everywhere: terminals, live notebooks,
executed/rendered notebooks, CI logs.

Plain tqdm redraws with carriage returns on stderr; a notebook saved after execution
keeps every redraw, so a rendered page shows dozens of lines. In a Jupyter kernel the
bar is instead one display output updated in place (`update_display_data`), so the saved
notebook holds only its final state. Elsewhere it is tqdm, redrawn at most every few
seconds when stderr is not a terminal.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterable

from tqdm.std import tqdm

LOG_INTERVAL_S = 10.0  # redraw period when writing to a log file rather than a terminal


def in_notebook() -> bool:
    """True inside a Jupyter kernel (live or executed by nbclient/nbval)."""
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    return type(shell).__name__ == "ZMQInteractiveShell"


class NotebookBar(tqdm):
    """tqdm drawn as one text output that is replaced on every refresh."""

    def __init__(self, *args, **kwargs):
        """A tqdm that writes into a string; `display` shows it."""
        self._handle = None
        super().__init__(
            *args, file=io.StringIO(), ncols=kwargs.pop("ncols", 90), **kwargs
        )

    def display(self, msg: str | None = None, pos: int | None = None) -> None:
        """Show the bar in one notebook output, replaced at each refresh."""
        from IPython.display import display

        text = {"text/plain": msg or str(self)}
        if self._handle is None:
            self._handle = display(text, raw=True, display_id=True)
        else:
            self._handle.update(text, raw=True)


class LogBar(tqdm):
    """tqdm for a log: `set_postfix` waits for the next timed redraw (tqdm's redraws at
    once, which in a loop evaluating every step wrote a line per step)."""

    def set_postfix(self, ordered_dict=None, refresh: bool = True, **kwargs) -> None:
        """tqdm's `set_postfix`, shown at the next redraw (`mininterval`) or at `close`."""
        super().set_postfix(ordered_dict, refresh=False, **kwargs)


def progress(
    iterable: Iterable | None = None,
    total: int | None = None,
    desc: str | None = None,
    **kwargs,
) -> tqdm:
    """A tqdm-compatible bar (`update`, `set_postfix`, iteration) suited to where the
    code runs.

    Args:
        iterable: what to iterate over (optional).
        total: number of expected steps.
        desc: label shown before the bar.
        **kwargs: passed to tqdm (e.g. `disable=True`).
    """
    if in_notebook():
        return NotebookBar(iterable, total=total, desc=desc, **kwargs)
    if not kwargs.get("file", sys.stderr).isatty():
        kwargs.setdefault("mininterval", LOG_INTERVAL_S)
        return LogBar(iterable, total=total, desc=desc, dynamic_ncols=True, **kwargs)
    return tqdm(iterable, total=total, desc=desc, dynamic_ncols=True, **kwargs)
