"""Counting a suite's results: JUnit XML (junitparser), pytest's summary line, progress events."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from junitparser import Error, Failure, JUnitXml, Skipped

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

    @property
    def failed(self) -> int:
        return self.failures + self.errors


def read_junit(path: Path) -> XmlCounts:
    """Counts from the test cases themselves (not the suite attributes, which tools fill unevenly)."""
    xml = JUnitXml.fromfile(str(path))
    suites = [xml] if xml._tag == "testsuite" else list(xml)
    counts = XmlCounts()
    for suite in suites:
        for case in suite:
            counts.tests += 1
            results = case.result or []
            if any(isinstance(r, Failure) for r in results):
                counts.failures += 1
            elif any(isinstance(r, Error) for r in results):
                counts.errors += 1
            else:
                counts.skipped += any(isinstance(r, Skipped) for r in results)
                continue
            counts.failed_ids.append(f"{case.classname}::{case.name}")
    return counts


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


def read_progress(path: Path) -> Progress:
    progress = Progress()
    open_tests: list[str] = []
    if not path.is_file():
        return progress
    progress.recorded = True
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            event = json.loads(raw)
        except json.JSONDecodeError:
            continue  # a line cut short by the crash itself
        nodeid = event.get("nodeid", "")
        kind = event.get("event")
        if kind == "item":
            progress.rerun_ids[nodeid] = event.get("rerun", nodeid)
        elif kind == "start":
            open_tests.append(nodeid)
        elif kind == "done" and nodeid in open_tests:
            open_tests.remove(nodeid)
        elif kind == "collect" and event.get("outcome") == "failed" and nodeid not in progress.collect_errors:
            progress.collect_errors.append(nodeid)
        if kind == "report" and event.get("outcome") == "failed" and nodeid not in progress.failed:
            progress.failed.append(nodeid)
        key = summary_key(event) if kind in ("report", "collect") else None
        if key:
            progress.counts[key] = progress.counts.get(key, 0) + 1
    progress.running = open_tests[-1] if open_tests else None
    return progress
