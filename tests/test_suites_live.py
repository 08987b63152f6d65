"""A suite's live progress in verify: when stderr is not a terminal, whole plain lines come
within 2 s of the suite's start and while it runs (not all at the end), each failure as it
happens; in a terminal, one status line. Run on a real suite (tests/data/planted_suite/slow:
twenty tests of 0.2 s, one failing) through the real CLI."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.clirun import assert_no_traceback
from trainstack.verify.suites.live import EventTail, Tally

SLOW = Path(__file__).resolve().parent / "data" / "planted_suite" / "slow"
FAILING = "planted_slow.py::test_takes_a_while[7]"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
PROGRESS = re.compile(r"^  slow: (\d+)/20 tests \(\d+%\), (\d+) failed, [\d.]+s")


def stack(tmp_path: Path) -> Path:
    path = tmp_path / "stack.toml"
    path.write_text(textwrap.dedent(f'''
        [stack]
        name = "live"
        release = "2026.12.0"
        image = "trainstack/live"

        [components]
        pytest = ">=8"

        [matrix]
        cuda = ["cpu"]
        os = ["debian12"]
        python = ["{sys.version_info.major}.{sys.version_info.minor}"]

        [verify]
        max_failed_tests = 1

        [[verify.suite]]
        name = "slow"
        command = "python -m pytest -p no:cacheprovider -o python_files=planted_*.py {SLOW}"
        max_failed = 1
        rerun_failed = false
    '''))
    return path


def verify(tmp_path: Path, **env: str) -> tuple[subprocess.Popen[str], list[tuple[float, str]]]:
    """Run verify on the suite alone; every stderr line with the second it arrived."""
    argv = [sys.executable, "-m", "trainstack.cli", "verify", str(stack(tmp_path)), "--python", sys.executable,
            "--skip", "report,ops,linkcheck,smoke", "--output", str(tmp_path / "verify.json")]
    child = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, **env})
    lines = [(time.monotonic(), line.rstrip("\n")) for line in child.stderr]  # type: ignore[union-attr]
    child.wait(timeout=120)
    return child, lines


def test_plain_progress_lines_come_early_and_while_the_suite_runs(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "COLUMNS")}
    child, lines = verify(tmp_path, **env)
    text = "\n".join(line for _, line in lines)
    assert child.returncode == 0, text
    assert_no_traceback(text)
    start = next(t for t, line in lines if line == "suite slow")
    progress = [(t, line) for t, line in lines if line.startswith("  slow: ")]
    assert progress and progress[0][0] - start < 2.0, text  # the first line within 2 s of the suite's start
    finished = next(t for t, line in progress if line.startswith("  slow: finished: 20/20 tests (100%), 1 failed"))
    counted = [(t, int(PROGRESS.match(line).group(1))) for t, line in progress if PROGRESS.match(line)]
    running = [(t, n) for t, n in counted if 0 < n < 20]
    # periodic lines while tests run, seconds before the end, never one line per test
    assert len(running) >= 2 and finished - running[0][0] >= 1.0, text
    assert len(counted) < 20, text
    # the failure as it happened, its test id whole (no line is wrapped or cut)
    failed = [line for _, line in progress if line.startswith("  slow: failed ")]
    assert len(failed) == 1 and failed[0].endswith(FAILING), text
    assert all(not line.endswith("…") for _, line in lines), text


def test_terminal_shows_one_status_line_and_the_result(tmp_path: Path) -> None:
    child, lines = verify(tmp_path, TTY_COMPATIBLE="1", COLUMNS="100")
    text = ANSI.sub("", "\n".join(line for _, line in lines))
    assert child.returncode == 0, text
    assert_no_traceback(text)
    assert "slow: finished: 20/20 tests (100%), 1 failed" in text
    assert FAILING in text


def test_event_tail_waits_for_a_whole_line(tmp_path: Path) -> None:
    events = tmp_path / "events"
    tail, tally = EventTail(events), Tally()
    assert tail.read() == []  # no file yet
    events.write_text('{"event": "collected", "total": 2}\n{"event": "start", "nodeid": "t.py::a"}\n{"event": "rep')
    for event in tail.read():
        tally.feed(event)
    assert tally.total == 2 and tally.running == ["t.py::a"]
    with events.open("a") as fh:
        fh.write('ort", "nodeid": "t.py::a", "when": "call", "outcome": "failed"}\n{"event": "done", "nodeid": "t.py::a"}\n')
    failed = [tally.feed(event) for event in tail.read()]
    assert failed == ["t.py::a", None]
    assert tally.text(3.0) == "1/2 tests (50%), 1 failed, 3.0s"
