"""Shared rich consoles: results on stdout, progress and messages on stderr.

In a terminal, output fits the terminal's width. Anywhere else (a pipe, a file, a CI log)
lines are never hard-wrapped nor cut: text keeps its own line breaks and tables take the
width their content needs, so a log line can be copied and grepped whole.

Every verb's ``-q``/``-v`` and ``--color`` land here (``configure``): ``-q`` leaves errors,
warnings and the verb's result; ``-v`` adds every command trainstack runs; ``--color auto``
colours a terminal unless NO_COLOR is set (FORCE_COLOR colours anything), ``always`` and
``never`` decide alone.

Every line either console writes, and every JSON result (``emit_json``), goes through one
masking pass (trainstack.redact): URL user info and the environment's credential values never
reach a terminal, a log that captures it, or a result file.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, TextIO, cast

from rich.console import Console
from rich.text import Text

from trainstack.redact import masked, redact

# Width given to a console that writes to no terminal: wide enough that no table is squeezed.
UNWRAPPED_WIDTH = 10_000

COLOR_CHOICES = ("auto", "always", "never")
_settings: dict[str, Any] = {"color": "auto", "verbosity": 0, "generation": 0}


def configure(*, color: str | None = None, verbosity: int | None = None) -> None:
    """Set ``--color`` (auto, always, never) and the verbosity (-1 quiet, 0, 1 or more verbose)."""
    if color is not None:
        if color not in COLOR_CHOICES:
            raise ValueError(f"--color {color}: accepted: {', '.join(COLOR_CHOICES)}")
        _settings["color"] = color
    if verbosity is not None:
        _settings["verbosity"] = verbosity
    _settings["generation"] = int(_settings["generation"]) + 1  # consoles are made again


def verbosity() -> int:
    """-1 with -q, 0 by default, 1 or more with -v: what a verb shows beyond its result."""
    return int(_settings["verbosity"])


def color_wanted(stream: TextIO) -> bool:
    """Whether ``stream`` gets colour: --color always/never, else FORCE_COLOR, NO_COLOR, a terminal."""
    choice = _settings["color"]
    if choice != "auto":
        return choice == "always"
    if os.environ.get("FORCE_COLOR"):
        return True
    if os.environ.get("NO_COLOR"):
        return False
    return _is_terminal(stream) and not _dumb_terminal()


def _dumb_terminal() -> bool:
    """A terminal that says it takes no escape codes (TERM=dumb, as in Emacs shells and minimal roots)."""
    return os.environ.get("TERM", "") in ("dumb", "unknown")


def make_console(stream: TextIO | None = None, *, stderr: bool = False, quiet: bool = False) -> Console:
    """A console on ``stream`` (default stdout, or stderr): terminal-width in a terminal, unwrapped elsewhere;
    coloured as ``color_wanted`` says. Markup is off: a string printed (a table cell, a title, a
    line) is printed as written, whatever brackets a file put in it; styles come from ``styled``
    (trusted markup) or rich Text."""
    target = masked(stream if stream is not None else (sys.stderr if stderr else sys.stdout))  # no credential shown
    terminal = _is_terminal(target)
    if not color_wanted(target):
        styling: dict = {"no_color": True, "color_system": None}
    else:  # colour named outright where no terminal is: colours, but no spinners in a log
        # asked for outright (FORCE_COLOR, --color always): colours even where TERM=dumb, which rich's own detection would drop
        styling = {"no_color": False, "color_system": "auto" if terminal and not _dumb_terminal() else "standard"}
    if terminal:
        return Console(file=target, stderr=stderr, quiet=quiet, markup=False, **styling)
    return Console(file=target, stderr=stderr, width=_columns() or UNWRAPPED_WIDTH, soft_wrap=True, quiet=quiet, markup=False, **styling)


def _masked_json(document: str) -> str:
    """``document`` with every credential masked inside its strings: a value that only looks like
    a credential (a number, a key) is left as it is, and the document stays JSON."""
    if redact(document) == document:
        return document
    import json

    def walk(value: object) -> object:
        if isinstance(value, str):
            return redact(value)
        if isinstance(value, list):
            return [walk(item) for item in value]
        if isinstance(value, dict):
            return {redact(key): walk(item) for key, item in value.items()}
        return value

    try:
        parsed = json.loads(document)
    except ValueError:
        return redact(document)
    return json.dumps(walk(parsed), indent=2, ensure_ascii=False)


def _is_terminal(stream: TextIO) -> bool:
    if os.environ.get("FORCE_COLOR") or os.environ.get("TTY_COMPATIBLE") == "1":
        return True
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def stdout_is_terminal() -> bool:
    return _is_terminal(sys.stdout)


def columns() -> int | None:
    """The width the user set in COLUMNS, if any."""
    return _columns()


def _columns() -> int | None:
    """COLUMNS when the user set it: an explicit width is honoured even without a terminal."""
    try:
        return int(os.environ["COLUMNS"]) or None
    except (KeyError, ValueError):
        return None


class _LazyConsole:
    """A console made on first use, so that it sees the streams as they are then (pytest swaps them)."""

    def __init__(self, *, stderr: bool, quietened: bool = False) -> None:
        self._stderr = stderr
        self._quietened = quietened  # silent under -q
        self._console: Console | None = None
        self._made: tuple[TextIO, object] | None = None

    def _get(self) -> Console:
        stream = sys.stderr if self._stderr else sys.stdout
        made = (stream, _settings["generation"])
        if self._console is None or made != self._made:
            quiet = self._quietened and verbosity() < 0
            self._console, self._made = make_console(stderr=self._stderr, quiet=quiet), made
        return self._console

    def __getattr__(self, name: str):
        return getattr(self._get(), name)


# stand-ins that make their Console on first use and forward every attribute to it
out = cast(Console, _LazyConsole(stderr=False))
err = cast(Console, _LazyConsole(stderr=True, quietened=True))  # progress, commands and notes: silent under -q
_alerts = cast(Console, _LazyConsole(stderr=True))  # errors and warnings: shown even under -q


def styled(markup: str) -> Text:
    """Rich markup written in trainstack's own code (a status word, a label), as Text; a value
    from a file or a command goes in it only through ``rich.markup.escape``, or beside it as Text."""
    return Text.from_markup(markup)


def print_error(message: str, *, prefix: str = "error:") -> None:
    """``error: <message>`` on stderr, the message printed verbatim (never read as rich markup)."""
    line = Text()
    line.append(prefix, style="bold red")  # the prefix alone in colour, the message as written
    line.append(" ")
    line.append(message)
    _alerts.print(line, highlight=False, soft_wrap=True)


def print_hint(message: str) -> None:
    """A second, dim line after an error: what to run or read next. Verbatim, like the error."""
    _alerts.print(Text(message, style="dim"), highlight=False, soft_wrap=True)


def emit_json(document: str, *, to_stdout: bool, output: Path | None) -> None:
    """A verb's result: ``--output FILE`` writes the JSON document (atomically), ``--json`` prints it on stdout."""
    text = _masked_json(document)
    text = text if text.endswith("\n") else text + "\n"
    if output is not None:
        from trainstack.errors import OutputError
        from trainstack.fsutil import atomic_write_text, describe_os_error

        try:
            atomic_write_text(output, text)
        except OSError as exc:  # checked before the work, then the disk filled: one line, exit 10
            raise OutputError(f"{output}: cannot write: {describe_os_error(exc)}", hint="a previous file there is unchanged") from None
    if to_stdout:
        masked(sys.stdout).write(text)
        sys.stdout.flush()
