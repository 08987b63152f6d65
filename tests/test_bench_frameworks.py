"""bench's distributed frameworks on the CPU: FSDP2 and FSDP2 with CPUOffloadPolicy over 2
gloo ranks (torchrun, loopback) train the tiny preset to the loss one process reaches on the
same global batches, with gradient accumulation; each row says where its state lived."""

from __future__ import annotations

import pytest

from tests.benchrun import bench


def test_fsdp2_and_its_offload_over_two_ranks_reach_one_process_loss(tmp_path, one_process_bench):
    rows = bench(tmp_path, "--batch", "2", "--modes", "fsdp2,offload", "--ablation", ranks=2)
    assert [r["mode"] for r in rows] == ["fsdp2", "offload"] and all(r["status"] == "ok" for r in rows)
    for row in rows:
        assert row["world_size"] == 2 and row["accum"] == 2 and row["timed_steps"] == 20
        assert row["loss_final"] == pytest.approx(one_process_bench["loss_final"], abs=1e-5)
        assert row["loss_final"] < row["loss_first"]
    assert rows[0]["state_lived"] == {"params": "sharded", "grads": "sharded", "master": "sharded", "optimizer": "sharded"}
    assert rows[1]["state_lived"] == {"params": "host", "grads": "host", "master": "host", "optimizer": "host"}
    assert rows[1]["cpu_optimizer_ms_per_step"] > 0 and "CPU" in rows[1]["optimizer"]
    assert one_process_bench["state_lived"] == {"params": "gpu", "grads": "gpu", "master": "gpu", "optimizer": "gpu"}
