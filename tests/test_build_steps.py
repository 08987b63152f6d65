"""A build step that runs long says so while it runs: in a CI log (not a terminal) a start
line naming its log, then a plain line every HEARTBEAT_S seconds with its last line of
output, then its result line; its log grows as the output comes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trainstack.builder import steps
from trainstack.builder.steps import Steps


def test_a_long_step_prints_a_line_while_it_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(steps, "HEARTBEAT_S", 0.4)
    script = "import sys, time\nprint('compiling unit 1 of 2', flush=True)\ntime.sleep(1.2)\nprint('linking', file=sys.stderr, flush=True)\ntime.sleep(0.6)"
    log = tmp_path / "logs" / "01-slow-step.log"
    seen: list[str] = []
    original = steps.proc.run

    def watching(*args, **kwargs):  # the log as it stands while the step runs
        def line(text: str) -> None:
            seen.append(log.read_text())
            kwargs["on_line"](text)

        return original(*args, **{**kwargs, "on_line": line})

    monkeypatch.setattr(steps.proc, "run", watching)
    result = Steps(tmp_path).run("slow-step", [sys.executable, "-c", script])
    assert result.ok and result.stdout == "compiling unit 1 of 2\n" and result.stderr == "linking\n"
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("… slow-step (log: ") and lines[0].endswith("01-slow-step.log)")
    running = [line for line in lines if line.startswith("  slow-step: running for ")]
    assert len(running) >= 2, lines  # at 0.4, 0.8, 1.2, 1.6 s
    assert running[0].endswith("; last: compiling unit 1 of 2") and running[-1].endswith("; last: linking"), running
    assert lines[-1].startswith("✓ slow-step ") and lines.index(running[-1]) < len(lines) - 1
    # the log grows while the step runs: the first line is there before the step ends
    assert "compiling unit 1 of 2" in seen[0] and "[exit" not in seen[0]
    text = log.read_text()
    assert text.startswith("$ ") and "compiling unit 1 of 2\nlinking\n[exit 0 after " in text


def test_a_quick_step_prints_no_running_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Steps(tmp_path).run("quick", [sys.executable, "-c", "pass"])
    lines = capsys.readouterr().err.splitlines()
    assert [line for line in lines if "running for" in line] == [] and lines[-1].startswith("✓ quick ")
