"""Terminal output for the commands: results on stdout, progress and errors on stderr.

Colour and spinners only where the stream is a terminal (rich decides, and honours NO_COLOR); piped
output is plain text that says the same thing, so scripts and tests see what a person sees.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text


def _console(stderr: bool) -> Console:
    # markup off: model output and prompts are full of [brackets] that must print as written;
    # soft_wrap: long lines are never broken, so a printed prompt keeps its lines (--plain is byte-exact).
    return Console(stderr=stderr, markup=False, highlight=False, emoji=False, soft_wrap=True)


def out() -> Console:
    """stdout. Made per command, because test runners swap sys.stdout between invocations."""
    return _console(stderr=False)


def err() -> Console:
    return _console(stderr=True)


@contextmanager
def step(message: str) -> Iterator[None]:
    """A spinner on a terminal while a long step runs; one line on stderr otherwise."""
    console = err()
    if console.is_terminal:
        with console.status(message):
            yield
    else:
        console.print(f"{message} ...")
        yield


class Bar:
    """A progress bar over units that come in labelled groups (an eval run: scenarios per configuration)."""

    def __init__(self, console: Console, progress: Progress | None = None, total: int = 0) -> None:
        self._console = console
        self._progress = progress
        self._task = progress.add_task("", total=total) if progress else None

    def group(self, label: str) -> None:
        """A new group of units begins."""
        if self._progress is None:
            self._console.print(f"{label} ...")  # piped: one line per group, not a redrawn bar
            return
        self._progress.update(self._task, description=label)

    def advance(self) -> None:
        if self._progress is not None:
            self._progress.advance(self._task)


@contextmanager
def progress_bar(total: int) -> Iterator[Bar]:
    """A live bar on a terminal (gone when done); group lines on piped stderr."""
    console = err()
    if not console.is_terminal:
        yield Bar(console)
        return
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        yield Bar(console, progress, total)


def labelled(console: Console, label: str, value: str, width: int = 12) -> None:
    """``label`` in a bold column, then ``value``: the layout of every step and setting the commands list."""
    console.print(Text.assemble((label.ljust(width), "bold"), value))
