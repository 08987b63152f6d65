"""A build step that runs long says so while it runs: in a CI log (not a terminal) a start
line naming its log, then a plain line every HEARTBEAT_S seconds with its last line of
output, then its result line; its log grows as the output comes."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from trainstack.builder import steps
from trainstack.builder.steps import Steps


# The step goes on only when told: after its first line it waits until a heartbeat has shown
# that line, after its second until one has shown the second; no sleep decides the order.
WAITING_STEP = """import sys, time
from pathlib import Path
def wait_for(name):
    for _ in range(3000):
        if Path(name).exists():
            return
        time.sleep(0.01)
    sys.exit('never told to go on: ' + name)
print('compiling unit 1 of 2', flush=True)
wait_for('shown-1')
print('linking', file=sys.stderr, flush=True)
wait_for('shown-2')
"""


def test_a_long_step_prints_a_line_while_it_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(steps, "HEARTBEAT_S", 0.05)
    log = tmp_path / "logs" / "01-slow-step.log"
    seen: list[str] = []
    original_run, original_print = steps.proc.run, steps.err.print

    def watching(*args, **kwargs):  # the log as it stands while the step runs
        def line(text: str) -> None:
            seen.append(log.read_text())
            kwargs["on_line"](text)

        return original_run(*args, **{**kwargs, "on_line": line})

    def printing(*args, **kwargs):  # the step goes on once a heartbeat line showed its last line
        original_print(*args, **kwargs)
        text = str(args[0]) if args else ""
        if text.endswith("; last: compiling unit 1 of 2"):
            (tmp_path / "shown-1").touch()
        elif text.endswith("; last: linking"):
            (tmp_path / "shown-2").touch()

    monkeypatch.setattr(steps.proc, "run", watching)
    monkeypatch.setattr(steps.err, "print", printing)
    result = Steps(tmp_path).run("slow-step", [sys.executable, "-c", WAITING_STEP], cwd=tmp_path)
    assert result.ok and result.stdout == "compiling unit 1 of 2\n" and result.stderr == "linking\n", result.stderr
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("… slow-step (log: ") and lines[0].endswith("01-slow-step.log)")
    running = [line for line in lines if line.startswith("  slow-step: running for ")]
    assert all(re.fullmatch(r"  slow-step: running for \d+ s(; last: (compiling unit 1 of 2|linking))?", line) for line in running), running
    # each output line was shown while the step ran, in the order it came
    lasts = [line.split("; last: ")[1] for line in running if "; last: " in line]
    assert "compiling unit 1 of 2" in lasts and "linking" in lasts, running
    assert lasts.index("linking") > max(i for i, last in enumerate(lasts) if last == "compiling unit 1 of 2"), running
    assert lines[-1].startswith("✓ slow-step ") and lines.index(running[-1]) < len(lines) - 1
    # the log grows while the step runs: the first line is there before the step ends
    assert "compiling unit 1 of 2" in seen[0] and "[exit" not in seen[0]
    text = log.read_text()
    assert text.startswith("$ ") and "compiling unit 1 of 2\nlinking\n[exit 0 after " in text


def test_a_quick_step_prints_no_running_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Steps(tmp_path).run("quick", [sys.executable, "-c", "pass"])
    lines = capsys.readouterr().err.splitlines()
    assert [line for line in lines if "running for" in line] == [] and lines[-1].startswith("✓ quick ")
