"""memplan per rank: sharded and offloaded layouts predicted against what torch's
FSDPMemTracker counts on each of 2 CPU ranks (gloo under torchrun, loopback only)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from trainstack.memplan.costs import Overheads
from trainstack.memplan.offload import Placement
from trainstack.nn.presets import preset

WORKER = Path(__file__).with_name("rank_memory_worker.py")
BATCH, SEQ = 2, 64


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    """Both layouts measured in one launch of 2 ranks."""
    tmp_path = tmp_path_factory.mktemp("ranks")
    torchrun = shutil.which("torchrun") or pytest.skip("torchrun not on PATH")
    argv = [torchrun, "--nnodes", "1", "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(_free_port()),
            str(WORKER), str(tmp_path), str(BATCH), str(SEQ)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]


def _plan(offload: frozenset[str]):
    from trainstack.memplan import plan_memory

    return plan_memory(preset("tiny"), batch=BATCH, seq=SEQ, budget_bytes=1 << 33, world_size=2,
                       placement=Placement(shard="fsdp2", offload=offload), overheads=Overheads())


def test_fsdp2_per_rank_bytes_by_kind_match_fsdp_mem_tracker(ranks):
    plan = _plan(frozenset())
    kinds = plan.breakdown.per_kind
    assert {k: kinds[k]["where"] for k in kinds} == {"params": "sharded", "grads": "sharded", "master": "sharded", "optimizer": "sharded"}
    for rank in (r["plain"] for r in ranks):
        measured = rank["after_backward"]
        assert kinds["params"]["gpu_bytes"] == pytest.approx(measured["SHARDED_PARAM"], rel=0.03)
        assert kinds["params"]["gpu_bytes"] == rank["local"]["params"]  # half of the whole on each of 2 ranks
        assert kinds["grads"]["gpu_bytes"] == pytest.approx(measured["SHARDED_GRAD"], rel=0.03)
        assert kinds["optimizer"]["gpu_bytes"] + kinds["master"]["gpu_bytes"] == pytest.approx(measured["OPT"], rel=0.03)
        # process-wide: the heap grew by the state the first step made, and by little more (malloc's own blocks)
        assert kinds["optimizer"]["gpu_bytes"] <= rank["state_heap"] <= 1.5 * kinds["optimizer"]["gpu_bytes"]


def test_offloaded_state_is_predicted_on_the_host_at_the_bytes_the_ranks_hold(ranks):
    plan = _plan(frozenset({"params", "grads", "master", "optimizer"}))
    b = plan.breakdown
    assert all(placed["where"] == "host" and placed["gpu_bytes"] == 0 for placed in b.per_kind.values())
    for rank in (r["offload"] for r in ranks):
        measured = rank["after_backward"]  # CPUOffloadPolicy: sharded parameters, gradients and state in host memory
        held = measured["SHARDED_PARAM"] + measured["SHARDED_GRAD"] + measured["OPT"]
        assert b.host_bytes == pytest.approx(held, rel=0.03)
