"""A build step that runs long says so while it runs: in a CI log (not a terminal) a start
line naming its log, then a plain line every HEARTBEAT_S seconds, then its result line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trainstack.build import steps
from trainstack.build.steps import Steps


def test_a_long_step_prints_a_line_while_it_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(steps, "HEARTBEAT_S", 0.4)
    result = Steps(tmp_path).run("slow-step", [sys.executable, "-c", "import time; time.sleep(1.5)"])
    assert result.ok
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("… slow-step (log: ") and lines[0].endswith("01-slow-step.log)")
    running = [line for line in lines if line.startswith("  slow-step: running for ")]
    assert len(running) >= 2, lines  # at 0.4, 0.8, 1.2 s
    assert lines[-1].startswith("✓ slow-step ") and lines.index(running[-1]) < len(lines) - 1


def test_a_quick_step_prints_no_running_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Steps(tmp_path).run("quick", [sys.executable, "-c", "pass"])
    lines = capsys.readouterr().err.splitlines()
    assert [line for line in lines if "running for" in line] == [] and lines[-1].startswith("✓ quick ")
