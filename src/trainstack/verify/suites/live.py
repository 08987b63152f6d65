"""Live progress of a running suite, read from the events its pytest plugin appends
(trainstack_progress): tests done of those collected, failures so far, the test running
now and the time elapsed.

In a terminal: one status line, updated in place. Anywhere else (a CI log): plain whole
lines — one within a second of the start, one when collection ends, then one every 10% of
the tests or every 10 s, whichever comes first (at most one a second), each new failure as
it happens (the first few), and one at the end. A command that is not pytest writes no events: its lines say
how long it has run.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.status import Status
from rich.text import Text

from trainstack.console import err
from trainstack.verify.suites.junit import MAX_EVENT_LINE, MAX_EVENTS_BYTES, open_events, parse_event

POLL_SECONDS = 0.25
FIRST_LINE_SECONDS = 1.0  # a first line by then, even before pytest has collected
EVERY_SECONDS = 10.0
EVERY_FRACTION = 0.1
MIN_GAP_SECONDS = 1.0
FAILURES_SHOWN = 10  # failures printed as they happen, per run; the verdict lists them all


@dataclass
class Tally:
    """What the events said so far."""

    total: int | None = None  # tests collected (None until collection ends)
    done: int = 0
    failed: list[str] = field(default_factory=list)  # tests and modules, in the order they failed
    running: list[str] = field(default_factory=list)  # started, not finished

    def feed(self, event: dict) -> str | None:
        """Count one event; a test or module that failed just now is returned."""
        kind, nodeid = event.get("event"), event.get("nodeid", "")
        if kind == "collected":
            self.total = int(event.get("total", 0))
        elif kind == "start":
            self.running.append(nodeid)
        elif kind == "done":
            self.done += 1
            if nodeid in self.running:
                self.running.remove(nodeid)
        elif kind in ("report", "collect") and event.get("outcome") == "failed" and nodeid not in self.failed:
            self.failed.append(nodeid)
            return nodeid
        return None

    def text(self, seconds: float) -> str:
        if self.total is None:
            where = f"collecting ({len(self.failed)} module(s) failed to import)" if self.failed else "collecting"
            return f"{where}, {seconds:.1f}s"
        share = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        now = f"; running {self.running[-1]}" if self.running else ""
        return f"{self.done}/{self.total} tests{share}, {len(self.failed)} failed, {seconds:.1f}s{now}"


class EventTail:
    """The complete lines appended to a file since the last read (a line still being written waits).
    The file lies in the suite's writable folder: it is read as junit.open_events opens it (a
    regular file, through no link, never waiting on a FIFO), at most MAX_EVENTS_BYTES in all and
    READ_CHUNK a poll; a line longer than MAX_EVENT_LINE is dropped."""

    READ_CHUNK = 8 * 2**20

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""

    def read(self) -> list[dict]:
        if self.offset >= MAX_EVENTS_BYTES:
            return []
        handle = open_events(self.path)
        if handle is None:
            return []
        with handle:
            handle.seek(self.offset)
            chunk = handle.read(min(self.READ_CHUNK, MAX_EVENTS_BYTES - self.offset))
        self.offset += len(chunk)
        *lines, self.partial = (self.partial + chunk).split(b"\n")
        if len(self.partial) > MAX_EVENT_LINE:
            self.partial = b""  # the rest of that line parses as nothing
        return [event for event in map(parse_event, lines) if event is not None]


class SuiteProgress:
    """``with SuiteProgress("numpy", events_file):`` around the run of a suite."""

    def __init__(self, label: str, events: Path | None, console: Console | None = None) -> None:
        self.label = label
        self.tail = EventTail(events) if events is not None else None
        self.tally = Tally()
        self.console = console or err
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, name=f"progress-{label}", daemon=True)
        self.start = 0.0
        self.last_line: float | None = None
        self.last_done = 0
        self.announced_total = False
        self.shown_failures = 0
        self.status: Status | None = None

    def __enter__(self) -> SuiteProgress:
        self.start = time.monotonic()
        if self.console.is_terminal:
            self.status = status = self.console.status(self._status_text())
            status.start()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self._read()
        if self.status is not None:
            self.status.stop()
        self._line("finished: ")

    def _elapsed(self) -> float:
        return time.monotonic() - self.start

    def _watch(self) -> None:
        while not self.stop.wait(POLL_SECONDS):
            self._read()
            if self.status is not None:
                self.status.update(self._status_text())
            elif self._line_due():
                self._line()

    def _read(self) -> None:
        if self.tail is None:
            return
        for event in self.tail.read():
            failed = self.tally.feed(event)
            if failed and self.shown_failures < FAILURES_SHOWN:
                self.shown_failures += 1
                self.console.print(Text.assemble((f"  {self.label}: ", "dim"), ("failed ", "red"), failed), highlight=False, soft_wrap=True)

    def _line_due(self) -> bool:
        now = self._elapsed()
        if self.last_line is None:
            return now >= FIRST_LINE_SECONDS or self.tally.total is not None
        since = now - self.last_line
        if since >= EVERY_SECONDS:
            return True
        if self.tally.total is not None and not self.announced_total:
            return since >= MIN_GAP_SECONDS
        total = self.tally.total or 0
        step = max(1, int(total * EVERY_FRACTION))
        return since >= MIN_GAP_SECONDS and total > 0 and self.tally.done - self.last_done >= step

    def _progress_text(self) -> str:
        if self.tail is None:
            return f"running, {self._elapsed():.1f}s (not pytest: no per-test progress)"
        return self.tally.text(self._elapsed())

    def _line(self, prefix: str = "") -> None:
        self.last_line, self.last_done = self._elapsed(), self.tally.done
        self.announced_total = self.tally.total is not None
        self.console.print(Text.assemble((f"  {self.label}: ", "dim"), prefix + self._progress_text()), highlight=False, soft_wrap=True)

    def _status_text(self) -> Text:
        text = Text.assemble((f"suite {self.label}", "bold"), " ", self._progress_text())
        text.no_wrap, text.overflow = True, "ellipsis"
        return text
