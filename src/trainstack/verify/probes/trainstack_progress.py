"""pytest plugin loaded into suites run by trainstack (``-p trainstack_progress``).

Appends one JSON line per event to $TRAINSTACK_PROGRESS, opened and closed each time so
the file survives a test that kills the interpreter (os._exit, a segfault): the last
"start" without its "done" names the test that crashed. Absolute ids allow reruns. Every
report that pytest's summary line counts is written, so the counts can be compared with it.
The number of tests collected ("collected") lets trainstack show the run's progress live.

$TRAINSTACK_EXCLUDE, when set, is a JSON list of fnmatch patterns (the suite's exclusions):
each collected test whose id (relative or absolute) matches one is deselected before the run,
and an "excluded" event names it with the index of the first pattern it matched.
"""

import json
import os
from fnmatch import fnmatchcase

_PATH = os.environ.get("TRAINSTACK_PROGRESS")
_EXCLUDE = os.environ.get("TRAINSTACK_EXCLUDE")


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
        _write({"event": "report", "nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
                "xfail": hasattr(report, "wasxfail")})


def pytest_collectreport(report):
    # a module that fails to import (a collection error) or skips itself as a whole
    if report.failed or report.skipped:
        _write({"event": "collect", "nodeid": report.nodeid or str(report.fspath), "outcome": report.outcome})


def pytest_runtest_logfinish(nodeid, location):
    _write({"event": "done", "nodeid": nodeid})
