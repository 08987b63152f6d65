"""Level 3 all-reduce bus bandwidth: torchrun starts one worker per GPU; the result comes back as JSON."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from pydantic import BaseModel

from trainstack import proc


class AllreduceResult(BaseModel):
    world_size: int
    backend: str
    bytes: int
    median_s: float
    algbw_gbps: float
    busbw_gbps: float  # algbw * 2(n-1)/n, as nccl-tests defines it
    correct: bool
    iters: int


class AllreduceFailed(Exception):
    """The workers did not finish; the message holds the end of their output."""


def run_allreduce(nprocs: int, *, backend: str, nbytes: int, iters: int = 20, warmup: int = 5, timeout: float = 300) -> AllreduceResult:
    """Start ``nprocs`` ranks through torchrun and return rank 0's measurement."""
    with tempfile.TemporaryDirectory(prefix="trainstack-allreduce-") as tmp:
        out = Path(tmp) / "result.json"
        argv = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={nprocs}",
            "-m",
            "trainstack.health.allreduce_worker",
            f"--bytes={nbytes}",
            f"--iters={iters}",
            f"--warmup={warmup}",
            f"--backend={backend}",
            f"--out={out}",
        ]
        # One thread per rank: the ranks share the node's cores with each other.
        result = proc.run(argv, env={"OMP_NUM_THREADS": "1"}, timeout=timeout)
        if not result.ok or not out.is_file():
            tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
            raise AllreduceFailed(f"torchrun exited {result.returncode}: {' | '.join(tail)}")
        return AllreduceResult.model_validate(json.loads(out.read_text(encoding="utf-8")))
