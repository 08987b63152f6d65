"""bench run as a user runs it, in a process of its own (under torchrun for more than one rank),
on the CPU with the tiny preset; its JSON rows."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.rank_launch import free_port

COMMON = ["--preset", "tiny", "--seq", "64", "--steps", "20", "--warmup", "1", "--accum", "2", "--device", "cpu", "--json"]


def bench(tmp_path: Path, *args: str, ranks: int = 1, env: dict | None = None) -> list[dict]:
    launcher = [sys.executable, "-m", "trainstack.cli"]
    if ranks > 1:
        torchrun = shutil.which("torchrun") or pytest.skip("torchrun not on PATH")
        launcher = [torchrun, "--nnodes", "1", "--nproc-per-node", str(ranks), "--master-addr", "127.0.0.1",
                    "--master-port", str(free_port()), "-m", "trainstack.cli"]
    done = subprocess.run([*launcher, "bench", *COMMON, *args], capture_output=True, text=True, timeout=1200, cwd=tmp_path,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout[done.stdout.index("{"):])["rows"]
