"""Run a list of modes, each in a fresh worker process, and collect one row per mode.

Under torchrun every rank starts its own worker for each mode; the workers of one mode
meet on a port of their own, so no process group outlives its mode.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from trainstack import proc
from trainstack.bench import runtime
from trainstack.bench.device import MEETING, dist_from_env
from trainstack.bench.runner import RunSpec
from trainstack.fsutil import atomic_write_json

SOURCE = str(Path(__file__).resolve().parents[2])  # the folder that holds this trainstack package
# every rank starts the same workers in the same order: the n-th launch of each rank meet
_LAUNCHES = itertools.count()


def run_ablation(
    specs: list[RunSpec],
    *,
    timeout_s: float | None = None,
    on_row: Callable[[dict], None] | None = None,
) -> list[dict]:
    """One row per spec (usually one base spec in several modes), each from a fresh worker."""
    rows = []
    for index, spec in enumerate(specs):
        row = run_mode(spec, index, timeout_s)
        rows.append(row)
        if on_row is not None:
            on_row(row)
    return rows


def run_mode(spec: RunSpec, index: int, timeout_s: float | None, python: str | None = None) -> dict:
    """One worker; with ``python``, in that interpreter (another environment's), this trainstack's
    source first on its path so that every environment runs the same bench."""
    with tempfile.TemporaryDirectory(prefix="trainstack-bench-") as tmp:
        spec_path, result_path = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        atomic_write_json(spec_path, spec.to_json())
        argv = [python or sys.executable, "-m", "trainstack.bench.worker", str(spec_path), str(result_path)]
        env = _worker_env(index, next(_LAUNCHES)) | ({"PYTHONPATH": SOURCE, runtime.VARIABLE: runtime.site_folders()} if python else {})
        try:
            result = proc.run(argv, env=env, timeout=timeout_s, echo=dist_from_env().rank == 0)
        except subprocess.TimeoutExpired:
            return _failed(spec, "timeout", f"no result after {timeout_s:.0f} s")
        if result_path.is_file():
            return json.loads(result_path.read_text(encoding="utf-8"))
        return _failed(spec, _status_of(result), _last_line(result.stderr) or f"worker exited {result.returncode}")


def _worker_env(index: int, launch: int) -> dict[str, str]:
    env = {"PYTHONUNBUFFERED": "1"}
    if "MASTER_PORT" not in os.environ:
        return env
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        env[MEETING] = str(launch)  # the workers meet through torchrun's store (device.init_process_group)
    else:
        # torchrun's store is not to be shared: a store of the launch's own, on a port after torchrun's
        env["MASTER_PORT"] = str(int(os.environ["MASTER_PORT"]) + 1 + index)
    return env


def _status_of(result: proc.Result) -> str:
    # SIGKILL with no result is how the kernel's OOM killer ends a process
    if result.returncode == -9 or "out of memory" in result.stderr.lower():
        return "oom"
    return "error"


def _failed(spec: RunSpec, status: str, error: str) -> dict:
    return {
        "model": spec.model,
        "mode": spec.mode.name,
        "batch": spec.batch,
        "seq": spec.seq,
        "seed": spec.seed,
        "status": status,
        "error": error,
    }


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
