"""Shared rich consoles: results on stdout, progress and messages on stderr.

In a terminal, output fits the terminal's width. Anywhere else (a pipe, a file, a CI log)
lines are never hard-wrapped nor cut: text keeps its own line breaks and tables take the
width their content needs, so a log line can be copied and grepped whole.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TextIO

from rich.console import Console
from rich.text import Text

# Width given to a console that writes to no terminal: wide enough that no table is squeezed.
UNWRAPPED_WIDTH = 10_000


def make_console(stream: TextIO | None = None, *, stderr: bool = False) -> Console:
    """A console on ``stream`` (default stdout, or stderr): terminal-width in a terminal, unwrapped elsewhere."""
    target = stream if stream is not None else (sys.stderr if stderr else sys.stdout)
    if _is_terminal(target):
        return Console(file=stream, stderr=stderr)
    return Console(file=stream, stderr=stderr, width=_columns() or UNWRAPPED_WIDTH, soft_wrap=True)


def _is_terminal(stream: TextIO) -> bool:
    if os.environ.get("FORCE_COLOR") or os.environ.get("TTY_COMPATIBLE") == "1":
        return True
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _columns() -> int | None:
    """COLUMNS when the user set it: an explicit width is honoured even without a terminal."""
    try:
        return int(os.environ["COLUMNS"]) or None
    except (KeyError, ValueError):
        return None


class _LazyConsole:
    """A console made on first use, so that it sees the streams as they are then (pytest swaps them)."""

    def __init__(self, *, stderr: bool) -> None:
        self._stderr = stderr
        self._console: Console | None = None
        self._stream: TextIO | None = None

    def _get(self) -> Console:
        stream = sys.stderr if self._stderr else sys.stdout
        if self._console is None or stream is not self._stream:
            self._console, self._stream = make_console(stderr=self._stderr), stream
        return self._console

    def __getattr__(self, name: str):
        return getattr(self._get(), name)


out: Console = _LazyConsole(stderr=False)  # type: ignore[assignment]
err: Console = _LazyConsole(stderr=True)  # type: ignore[assignment]


def print_error(message: str, *, prefix: str = "error:") -> None:
    """``error: <message>`` on stderr, the message printed verbatim (never read as rich markup)."""
    line = Text(prefix, style="bold red")
    line.append(" ")
    line.append(message)
    err.print(line, highlight=False, soft_wrap=True)


def print_hint(message: str) -> None:
    """A second, dim line after an error: what to run or read next. Verbatim, like the error."""
    err.print(Text(message, style="dim"), highlight=False, soft_wrap=True)


def emit_json(document: str, *, to_stdout: bool, output: Path | None) -> None:
    """A verb's result: ``--output FILE`` writes the JSON document (atomically), ``--json`` prints it on stdout."""
    text = document if document.endswith("\n") else document + "\n"
    if output is not None:
        from trainstack.fsutil import atomic_write_text

        atomic_write_text(output, text)
    if to_stdout:
        sys.stdout.write(text)
        sys.stdout.flush()
