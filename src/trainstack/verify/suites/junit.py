"""Counting a suite's results: JUnit XML (junitparser), pytest's summary line, progress events."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from xml.etree.ElementTree import ParseError

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring as defused_fromstring
from junitparser import Error, Failure, JUnitXml, JUnitXmlError, Skipped, TestCase

from trainstack.fsutil import describe_os_error, loads_strict, read_regular

MAX_XML_BYTES = 256 * 2**20  # a JUnit report larger than this is not read
# the progress events file lies in the suite's writable folder: read at most this much of it in all,
# and of one line (a longer one is skipped), so that no file a suite plants holds verify's memory
MAX_EVENTS_BYTES = 256 * 2**20
MAX_EVENT_LINE = 2**20
MESSAGE_CHARS = 500  # a failure's reason, as kept and shown: one line at most this long


class JunitUnreadable(ValueError):
    """The suite's JUnit XML is not a report trainstack reads: one line saying why."""


SUMMARY_RE = re.compile(r"(\d+) (failed|passed|skipped|errors?|xfailed|xpassed|deselected|rerun)")
COUNTED = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
SUMMARY_LINE_RE = re.compile(r"\b(?:passed|failed|errors?|skipped|no tests ran)\b.* in [\d.]+s")


@dataclass
class XmlCounts:
    tests: int = 0
    failures: int = 0
    errors: int = 0
    skipped: int = 0
    failed_ids: list[str] = field(default_factory=list)  # "classname::name" of failures and errors
    messages: dict[str, str] = field(default_factory=dict)  # "classname::name" -> its failure's message

    @property
    def failed(self) -> int:
        return self.failures + self.errors


def read_junit(path: Path) -> XmlCounts:
    """Counts from the test cases themselves (not the suite attributes, which tools fill unevenly).

    The file is the suite's to write, so it is untrusted: a link, a special file or one over
    MAX_XML_BYTES is not read; a DTD (and with it any entity, internal or external) is refused
    before anything is expanded; malformed XML raises JunitUnreadable with one line."""
    try:
        found = os.lstat(path)
        if stat.S_ISLNK(found.st_mode):
            raise JunitUnreadable(f"{path.name} is a symbolic link, not the report pytest writes")
        if found.st_size > MAX_XML_BYTES:
            raise JunitUnreadable(f"{path.name} is {found.st_size} bytes, over the {MAX_XML_BYTES} read")
        data = read_regular(path, "JUnit XML report")
    except OSError as exc:
        raise JunitUnreadable(f"{path.name}: {describe_os_error(exc)}") from None
    try:
        root = defused_fromstring(data, forbid_dtd=True, forbid_entities=True, forbid_external=True)
        xml = JUnitXml.fromroot(root)
    except DefusedXmlException as exc:
        raise JunitUnreadable(f"{path.name}: refused ({type(exc).__name__}: a DTD or entity; nothing was expanded)") from None
    except (ParseError, JUnitXmlError, ValueError) as exc:
        raise JunitUnreadable(
            f"{path.name}: not well-formed JUnit XML ({str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__})"
        ) from None
    suites = [xml] if xml._tag == "testsuite" else list(xml)
    counts = XmlCounts()
    for suite in suites:
        for case in suite:
            if not isinstance(case, TestCase):  # only test cases count (a suite holds cases; its iteration is typed wider)
                continue
            counts.tests += 1
            results = case.result or []
            if any(isinstance(r, Failure) for r in results):
                counts.failures += 1
            elif any(isinstance(r, Error) for r in results):
                counts.errors += 1
            else:
                counts.skipped += any(isinstance(r, Skipped) for r in results)
                continue
            test_id = f"{case.classname}::{case.name}"
            counts.failed_ids.append(test_id)
            message = next((r.message for r in results if isinstance(r, (Failure, Error)) and r.message), None)
            if message:
                counts.messages[test_id] = one_line(message)
    return counts


def one_line(text: str) -> str:
    """A failure's message as kept: its words on one line, at most MESSAGE_CHARS."""
    words = " ".join(text.split())
    return words if len(words) <= MESSAGE_CHARS else words[: MESSAGE_CHARS - 3] + "..."


def error_line(output: str) -> str:
    """The line that says why pytest stopped before running tests (exit 2 to 4), as it prints
    it: the last 'E   ...' line (a conftest that fails to import), else the last 'ERROR:' or
    'error:' line, else ''."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    marked = [line[1:].strip() for line in lines if line.startswith("E ")]
    if marked:
        return one_line(marked[-1])
    stated = [line for line in lines if line.lower().startswith("error:")]
    return one_line(stated[-1]) if stated else ""


@dataclass
class Summary:
    line: str
    counts: dict[str, int]

    @property
    def failed(self) -> int:
        return self.counts.get("failed", 0) + self.counts.get("error", 0) + self.counts.get("errors", 0)

    def normalised(self) -> dict[str, int]:
        """Counts keyed as Progress.counts ('errors' -> 'error'), zeros dropped."""
        out: dict[str, int] = {}
        for kind, n in self.counts.items():
            key = "error" if kind == "errors" else kind
            if key in COUNTED and n:
                out[key] = out.get(key, 0) + n
        return out


def read_summary(stdout: str) -> Summary | None:
    """pytest's last line, e.g. '2 failed, 40 passed, 1 error in 3.21s'."""
    for line in reversed(stdout.strip().splitlines()):
        if SUMMARY_LINE_RE.search(line):
            counts = {kind: int(n) for n, kind in SUMMARY_RE.findall(line)}
            return Summary(line.strip("= \n"), counts)
    return None


@dataclass
class Progress:
    rerun_ids: dict[str, str] = field(default_factory=dict)  # nodeid -> absolute id for a rerun
    failed: list[str] = field(default_factory=list)  # nodeids with any failed phase, in order
    collect_errors: list[str] = field(default_factory=list)  # modules that failed to import
    running: str | None = None  # started but never finished: where a crash happened
    counts: dict[str, int] = field(default_factory=dict)  # as pytest's summary line counts them
    recorded: bool = False  # the plugin wrote events (else only the XML can tell)
    excluded: dict[str, int] = field(default_factory=dict)  # nodeid -> index of the exclusion that left it out
    exclusions_applied: bool = False  # the plugin read the suite's exclusions (so unmatched ones are known)
    messages: dict[str, str] = field(default_factory=dict)  # nodeid -> why it failed first (one line)

    @property
    def ran(self) -> int:
        """Tests that got as far as running (passed, failed, xfailed, xpassed)."""
        return sum(self.counts.get(k, 0) for k in ("passed", "failed", "xfailed", "xpassed"))


def summary_key(event: dict) -> str | None:
    """The word pytest's summary line counts a report under (its terminal reporter's rules)."""
    outcome, when, xfail = event.get("outcome"), event.get("when"), event.get("xfail")
    if event.get("event") == "collect":
        return "error" if outcome == "failed" else "skipped"
    if outcome == "failed":
        return "failed" if when == "call" else "error"
    if outcome == "skipped":
        return "xfailed" if xfail else "skipped"
    if outcome == "passed" and when == "call":
        return "xpassed" if xfail else "passed"
    return None


def open_events(path: Path):
    """The events file opened for reading as it is now: a regular file, opened without following a
    link and without blocking (a FIFO the suite planted is never waited on); None when it is absent
    or anything else."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None  # not even opened: a reader, even one that does not wait, would unblock the FIFO's writer
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


def event_lines(handle, limit: int = MAX_EVENTS_BYTES):
    """The lines of an events file, at most ``limit`` bytes read in all; a line longer than
    MAX_EVENT_LINE is skipped (not a line the plugin writes)."""
    read = 0
    while read < limit:
        raw = handle.readline(min(MAX_EVENT_LINE + 1, limit - read))
        if not raw:
            return
        read += len(raw)
        if len(raw) > MAX_EVENT_LINE or not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n") and read < limit:  # the rest of a long line
                raw = handle.readline(min(MAX_EVENT_LINE, limit - read))
                read += len(raw)
            continue
        yield raw


def parse_event(raw: bytes) -> dict | None:
    """One event line: an object whose nodeid, where it has one, is a string; None for anything
    else (a line cut short by a crash, or one a suite wrote)."""
    try:
        event = loads_strict(raw)
    except ValueError:
        return None
    return event if isinstance(event, dict) and isinstance(event.get("nodeid", ""), str) else None


def read_progress(path: Path) -> Progress:
    progress = Progress()
    open_tests: list[str] = []
    handle = open_events(path)
    if handle is None:
        return progress
    progress.recorded = True
    with handle:
        events = [event for event in map(parse_event, event_lines(handle)) if event is not None]
    for event in events:
        nodeid = event.get("nodeid", "")
        kind = event.get("event")
        if kind == "item":
            progress.rerun_ids[nodeid] = event.get("rerun", nodeid)
        elif kind == "start":
            open_tests.append(nodeid)
        elif kind == "done" and nodeid in open_tests:
            open_tests.remove(nodeid)
        elif kind == "excluded" and isinstance(event.get("pattern"), int):
            progress.excluded[nodeid] = event["pattern"]
        elif kind == "exclusions":
            progress.exclusions_applied = True
        elif kind == "collect" and event.get("outcome") == "failed" and nodeid not in progress.collect_errors:
            progress.collect_errors.append(nodeid)
        if kind == "report" and event.get("outcome") == "failed" and nodeid not in progress.failed:
            progress.failed.append(nodeid)
        if kind in ("report", "collect") and event.get("outcome") == "failed":
            message = event.get("message")
            if isinstance(message, str) and message and nodeid not in progress.messages:
                progress.messages[nodeid] = one_line(message)
        key = summary_key(event) if kind in ("report", "collect") else None
        if key:
            progress.counts[key] = progress.counts.get(key, 0) + 1
    progress.running = open_tests[-1] if open_tests else None
    return progress
