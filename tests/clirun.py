"""The trainstack CLI run as a user runs it, in a process of its own, and the check every
refusal shares: the output holds no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import trainstack
from tests.test_run_hook import clean_env

SRC = str(Path(trainstack.__file__).resolve().parent.parent)  # this checkout's trainstack, for the child


def run_cli(*argv: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m trainstack.cli ARGV`` with no TRAINSTACK_ variable of the test's environment;
    stdout and stderr captured as text, never raising on a non-zero exit."""
    return subprocess.run([sys.executable, "-m", "trainstack.cli", *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=clean_env(PYTHONPATH=SRC), check=False)


def assert_no_traceback(*outputs: str) -> None:
    """Bad input is one clear line, never a Python traceback (the README's conventions)."""
    text = "".join(outputs)
    assert "Traceback" not in text, text[-2000:]
