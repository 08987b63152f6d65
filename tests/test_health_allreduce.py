"""The level-3 all-reduce check through torchrun, on CPU ranks with gloo (on GPUs the same code uses NCCL)."""

from __future__ import annotations

import pytest

from trainstack.health.allreduce import run_allreduce
from trainstack.health.gpu_checks import allreduce_check
from trainstack.health.schema import Status
from trainstack.health.thresholds import Limit, load_thresholds

pytest.importorskip("torch")
MIB = 2**20


@pytest.mark.slow
def test_two_gloo_ranks_through_the_check():
    t = load_thresholds(None)
    check = allreduce_check(2, t, backend="gloo", nbytes=8 * MIB)
    assert check.status is Status.ok, check
    assert check.value > 0 and check.unit == "GB/s"
    assert "2 ranks, gloo" in check.message
    # A limit no CPU reaches turns the same measurement critical.
    strict = t.model_copy(update={"allreduce_busbw_gbps": Limit(critical_below=1e6)})
    assert allreduce_check(2, strict, backend="gloo", nbytes=1 * MIB).status is Status.critical


@pytest.mark.slow
def test_three_ranks_bus_bandwidth_formula_and_sum():
    r = run_allreduce(3, backend="gloo", nbytes=4 * MIB, iters=5, warmup=2)
    assert r.correct and r.world_size == 3 and r.bytes == 4 * MIB
    assert r.algbw_gbps == pytest.approx(r.bytes / r.median_s / 1e9)
    assert r.busbw_gbps == pytest.approx(r.algbw_gbps * 2 * 2 / 3)


@pytest.mark.slow
def test_failed_ranks_are_critical_with_the_reason():
    # NCCL needs GPUs: on this machine the ranks fail, and the check says so in one line.
    check = allreduce_check(2, load_thresholds(None), backend="nccl", nbytes=MIB)
    assert check.status is Status.critical
    assert check.message.startswith("torchrun exited")


def test_one_gpu_skips():
    check = allreduce_check(1, load_thresholds("NVIDIA H200"), backend="nccl", nbytes=MIB)
    assert check.status is Status.ok and check.value is None
    assert check.message.startswith("skip: one GPU")
