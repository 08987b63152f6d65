"""bench's distributed frameworks on the CPU: FSDP2 and FSDP2 with CPUOffloadPolicy over 2
gloo ranks (torchrun, loopback) train the tiny preset to the loss one process reaches on the
same global batches, with gradient accumulation; each row says where its state lived."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

COMMON = ["--preset", "tiny", "--seq", "64", "--steps", "20", "--warmup", "1", "--accum", "2", "--device", "cpu", "--json"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench(tmp_path, *args: str, ranks: int = 1, env: dict | None = None) -> list[dict]:
    launcher = [sys.executable, "-m", "trainstack.cli"]
    if ranks > 1:
        torchrun = shutil.which("torchrun") or pytest.skip("torchrun not on PATH")
        launcher = [torchrun, "--nnodes", "1", "--nproc-per-node", str(ranks), "--master-addr", "127.0.0.1",
                    "--master-port", str(_free_port()), "-m", "trainstack.cli"]
    done = subprocess.run([*launcher, "bench", *COMMON, *args], capture_output=True, text=True, timeout=1200, cwd=tmp_path,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout[done.stdout.index("{"):])["rows"]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> dict:
    (row,) = bench(tmp_path_factory.mktemp("one"), "--batch", "4", "--modes", "eager")
    return row


def test_fsdp2_and_its_offload_over_two_ranks_reach_one_process_loss(tmp_path, one_process):
    rows = bench(tmp_path, "--batch", "2", "--modes", "fsdp2,offload", "--ablation", ranks=2)
    assert [r["mode"] for r in rows] == ["fsdp2", "offload"] and all(r["status"] == "ok" for r in rows)
    for row in rows:
        assert row["world_size"] == 2 and row["accum"] == 2 and row["timed_steps"] == 20
        assert row["loss_final"] == pytest.approx(one_process["loss_final"], abs=1e-5)
        assert row["loss_final"] < row["loss_first"]
    assert rows[0]["state_lived"] == {"params": "sharded", "grads": "sharded", "master": "sharded", "optimizer": "sharded"}
    assert rows[1]["state_lived"] == {"params": "host", "grads": "host", "master": "host", "optimizer": "host"}
    assert rows[1]["cpu_optimizer_ms_per_step"] > 0 and "CPU" in rows[1]["optimizer"]
    assert one_process["state_lived"] == {"params": "gpu", "grads": "gpu", "master": "gpu", "optimizer": "gpu"}
