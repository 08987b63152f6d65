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
