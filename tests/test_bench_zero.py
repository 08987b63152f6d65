"""bench's DeepSpeed modes on the CPU: ZeRO-1, ZeRO-2, ZeRO-3 and ZeRO-Offload over 2 gloo
ranks train the tiny preset to the loss one process reaches on the same global batches
(torch's AdamW under ZeRO; DeepSpeed's cpu_adam under ZeRO-Offload; clipping off on both
sides). DeepSpeed's ops (its shared-memory collectives, cpu_adam) are built once by its JIT
into the session's one folder for such builds (conftest.py's torch_extensions)."""

from __future__ import annotations

import pytest

from tests.benchrun import bench

pytest.importorskip("deepspeed")


@pytest.fixture
def extensions(torch_extensions) -> dict:
    """DeepSpeed's JIT builds in the session's one folder (conftest.py), for its CPU accelerator."""
    return {"TORCH_EXTENSIONS_DIR": str(torch_extensions), "DS_ACCELERATOR": "cpu"}


@pytest.mark.slow
def test_zero_stages_and_zero_offload_over_two_ranks_reach_one_process_loss(tmp_path, extensions, one_process_bench):
    rows = bench(tmp_path, "--batch", "2", "--modes", "zero1,zero2,zero3,zero2+offload", "--ablation", ranks=2, env=extensions)
    assert [r["mode"] for r in rows] == ["zero1", "zero2", "zero3", "zero2+offload"], [r.get("error") for r in rows]
    for row in rows:
        assert row["status"] == "ok", row.get("error")
        assert row["loss_final"] == pytest.approx(one_process_bench["loss_final"], abs=1e-5)
    assert rows[0]["state_lived"] == {"params": "gpu", "grads": "gpu", "master": "sharded", "optimizer": "sharded"}
    assert rows[2]["state_lived"] == {"params": "sharded", "grads": "sharded", "master": "sharded", "optimizer": "sharded"}
    assert rows[3]["state_lived"] == {"params": "gpu", "grads": "host", "master": "host", "optimizer": "host"}
    assert rows[3]["optimizer"] in ("DeepSpeed cpu_adam (JIT-built)", "DeepSpeed cpu_adam (prebuilt)")


@pytest.mark.slow
def test_each_ranks_zero_state_is_what_memplan_predicts(tmp_path, extensions):
    """Over 2 gloo ranks, ZeRO-1, -2, -3 and ZeRO-Offload each in one engine: a rank's
    parameters (whole, or its partition under ZeRO-3), the fp32 copy of its partition
    DeepSpeed's optimizer steps (kept in fp32 training too), its AdamW moments and, offloaded,
    its fp32 gradient partition in host memory, within 3% of memplan's per-rank bytes."""
    from pathlib import Path

    from tests.rank_launch import launch
    from trainstack.memplan import plan_memory
    from trainstack.memplan.costs import Overheads
    from trainstack.memplan.offload import Placement
    from trainstack.nn.presets import preset

    worker = Path(__file__).with_name("zero_memory_worker.py")
    ranks = launch(tmp_path, 2, "2", "64", "1,2,3,2+offload", worker=worker, env=extensions)
    zero_offload = frozenset({"optimizer", "master", "grads"})
    for stage, offload in (("zero1", frozenset()), ("zero2", frozenset()), ("zero3", frozenset()), ("zero2+offload", zero_offload)):
        plan = plan_memory(preset("tiny"), batch=2, seq=64, budget_bytes=1 << 33, world_size=2, precision="fp32", optimizer="adamw-forloop",
                           placement=Placement(shard=stage[:5], offload=offload), overheads=Overheads())
        kinds = plan.breakdown.per_kind
        assert kinds["master"]["total_bytes"] == kinds["params"]["total_bytes"]  # an fp32 copy of fp32 parameters
        for rank in ranks:
            for kind in ("params", "master", "optimizer", *(("grads",) if offload else ())):
                predicted = kinds[kind]["host_bytes" if kind in offload else "gpu_bytes"]
                assert predicted == pytest.approx(rank[stage][kind], rel=0.03), (stage, kind)
        if offload:  # the fp32 gradient partition, the master weights and the moments: all the host holds
            assert plan.breakdown.host_bytes == pytest.approx(sum(ranks[0][stage][k] for k in offload), rel=0.03)
