"""pytest plugin loaded into suites run by trainstack (``-p trainstack_progress``).

Appends one JSON line per event to $TRAINSTACK_PROGRESS, opened and closed each time so
the file survives a test that kills the interpreter (os._exit, a segfault): the last
"start" without its "done" names the test that crashed. Absolute ids allow reruns. Every
report that pytest's summary line counts is written, so the counts can be compared with it.
The number of tests collected ("collected") lets trainstack show the run's progress live.

$TRAINSTACK_EXCLUDE, when set, is a JSON list of fnmatch patterns (the suite's exclusions):
each collected test whose id (relative or absolute) matches one is deselected before the run,
and an "excluded" event names it with the index of the first pattern it matched.

A failed report carries "message": why it failed in one line, as pytest's short summary shows
it (the assertion or the exception's line; for a module that fails to import, the "E" line of
its error), cut at MESSAGE_CHARS.
"""

import json
import os
from fnmatch import fnmatchcase

_PATH = os.environ.get("TRAINSTACK_PROGRESS")
_EXCLUDE = os.environ.get("TRAINSTACK_EXCLUDE")
MESSAGE_CHARS = 500


def _message(report):
    """The one line pytest's short summary gives a failure (reprcrash), else the last 'E' line
    of its text (a collection error's longrepr is a plain string), else its last line."""
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    text = getattr(crash, "message", None) if crash is not None else None
    if not text:
        lines = [line.strip() for line in str(longrepr or "").splitlines() if line.strip()]
        marked = [line[1:].strip() for line in lines if line.startswith("E ")]
        text = marked[-1] if marked else (lines[-1] if lines else "")
    first = " ".join(text.split())
    return first if len(first) <= MESSAGE_CHARS else first[: MESSAGE_CHARS - 3] + "..."


def _write(record):
    if _PATH:
        with open(_PATH, "a") as fh:
            fh.write(json.dumps(record) + "\n")


def _rerun_id(item):
    parts = item.nodeid.split("::", 1)
    return str(item.path) + ("::" + parts[1] if len(parts) > 1 else "")


def pytest_runtest_logstart(nodeid, location):
    _write({"event": "start", "nodeid": nodeid})


def pytest_itemcollected(item):
    _write({"event": "item", "nodeid": item.nodeid, "rerun": _rerun_id(item)})


def pytest_collection_modifyitems(session, config, items):
    if not _EXCLUDE:
        return
    with open(_EXCLUDE, encoding="utf-8") as fh:
        patterns = [p for p in json.load(fh) if isinstance(p, str)]
    kept, dropped = [], []
    for item in items:
        ids = (item.nodeid, _rerun_id(item))
        hit = next((n for n, p in enumerate(patterns) if any(fnmatchcase(i, p) for i in ids)), None)
        if hit is None:
            kept.append(item)
        else:
            dropped.append(item)
            _write({"event": "excluded", "nodeid": item.nodeid, "pattern": hit})
    _write({"event": "exclusions", "patterns": len(patterns)})
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_collection_finish(session):
    _write({"event": "collected", "total": len(session.items)})


def pytest_runtest_logreport(report):
    if report.failed or report.when == "call" or report.skipped:
        record = {
            "event": "report",
            "nodeid": report.nodeid,
            "when": report.when,
            "outcome": report.outcome,
            "xfail": hasattr(report, "wasxfail"),
        }
        if report.failed:
            record["message"] = _message(report)
        _write(record)


def pytest_collectreport(report):
    # a module that fails to import (a collection error) or skips itself as a whole
    if report.failed or report.skipped:
        record = {"event": "collect", "nodeid": report.nodeid or str(report.fspath), "outcome": report.outcome}
        if report.failed:
            record["message"] = _message(report)
        _write(record)


def pytest_runtest_logfinish(nodeid, location):
    _write({"event": "done", "nodeid": nodeid})
