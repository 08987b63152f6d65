"""The trainstack CLI run as a user runs it, in a process of its own, and the check every
refusal shares: the output holds no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import trainstack

SRC = str(Path(trainstack.__file__).resolve().parent.parent)  # this checkout's trainstack, for the child
CLI = [sys.executable, "-m", "trainstack.cli"]


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what would steer a child trainstack or job: no
    TRAINSTACK_ variable, no PYTHONPATH, none of the allocator's variables (a bench test run in
    this process may have set them); then ``extra``."""
    dropped = {"PYTHONPATH", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINSTACK_") and k not in dropped}
    return {**env, **extra}


def run_cli(*argv: str, cwd: Path | None = None, timeout: float = 120, env: Mapping[str, str] | None = None,
            python: str | Path = sys.executable) -> subprocess.CompletedProcess[str]:
    """``python -m trainstack.cli ARGV`` with no TRAINSTACK_ variable of the test's environment
    (those of ``env`` are kept); stdout and stderr captured as text, never raising on a non-zero exit."""
    return subprocess.run([str(python), "-m", "trainstack.cli", *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=clean_env(PYTHONPATH=SRC, **(env or {})), check=False)


def assert_no_traceback(*outputs: str) -> None:
    """Bad input is one clear line, never a Python traceback (the README's conventions)."""
    text = "".join(outputs)
    assert "Traceback" not in text, text[-2000:]
