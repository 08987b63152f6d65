"""A failed build step as the user sees it: marked failed (never first as done), its logs kept
at a stable path with the command, its exit, its last lines and the last URL it named."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trainstack.builder.api import _keep_failed_logs
from trainstack.builder.steps import FAILURE_FILE, Steps
from trainstack.errors import BuildError, NetworkError

FAILING = "import sys; print('fetching https://files.example.org/demo-1.0.tar.gz'); print('compile: error: bad thing'); sys.exit(3)"


def _staged(tmp_path: Path) -> tuple[Path, Path]:
    staging, final = tmp_path / "build" / ".flav.staging", tmp_path / "build" / "flav"
    staging.mkdir(parents=True)
    return staging, final


def test_failed_step_is_shown_failed_and_its_logs_are_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    staging, final = _staged(tmp_path)
    steps = Steps(staging)
    steps.run("prepare", [sys.executable, "-c", "print('ok')"])
    with pytest.raises(BuildError) as caught:
        steps.run("compile", [sys.executable, "-c", FAILING])
    err = capsys.readouterr().err
    assert "✓ prepare" in err and "✗ compile" in err and "✓ compile" not in err
    assert [r.status for r in steps.records] == ["ok", "failed"]

    kept = _keep_failed_logs(staging, final, caught.value)
    assert kept is not None and kept.parent == final / "logs" and kept.name.startswith("failed-")
    summary = (kept / FAILURE_FILE).read_text()
    assert "step: compile" in summary and "exit: 3" in summary and "compile: error: bad thing" in summary
    assert f"command: {sys.executable} -c" in summary
    assert "url: https://files.example.org/demo-1.0.tar.gz" in summary
    assert (kept / "02-compile.log").is_file()
    # the error points at the kept log, not at the staging folder that is removed
    assert str(kept / "02-compile.log") in str(caught.value) and ".staging" not in str(caught.value)


def test_network_failure_names_the_last_url(tmp_path: Path) -> None:
    staging, final = _staged(tmp_path)
    steps = Steps(staging, retries=2, retry_wait=0.01)
    flaky = "print('GET https://index.example.org/simple/demo/'); print('connection reset by peer'); raise SystemExit(1)"
    with pytest.raises(NetworkError) as caught:
        steps.run("download", [sys.executable, "-c", flaky], network=True)
    assert "last URL: https://index.example.org/simple/demo/" in str(caught.value)
    assert steps.records[-1].status == "failed"
    kept = _keep_failed_logs(staging, final, caught.value)
    assert kept is not None and "url: https://index.example.org/simple/demo/" in (kept / FAILURE_FILE).read_text()
    assert str(kept) in str(caught.value)
