"""What counts as out of memory, CPU step timing, and the CPU memory cap."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from trainstack.bench import device as dev  # noqa: E402


def test_out_of_memory_errors_are_recognised():
    assert dev.is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert dev.is_oom(MemoryError())
    # what torch.compile raises when the allocator fails inside a compiled graph
    assert dev.is_oom(RuntimeError("backend='inductor' raised: RuntimeError: CUDA out of memory."))
    assert dev.is_oom(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 6291456 bytes"))
    assert not dev.is_oom(ValueError("shapes do not match"))


def test_cpu_step_timer_measures_each_step():
    """Three steps of at least 20, 60 and 100 ms: each measured as at least its own length, in
    its own place, and together no longer than the wall clock around them."""
    timer = dev.StepTimer(torch.device("cpu"))
    least = [0.02, 0.06, 0.10]
    start = time.perf_counter()
    timer.mark()
    for seconds in least:
        torch.ones(64, 64) @ torch.ones(64, 64)
        time.sleep(seconds)  # a lower bound on the step: sleep never returns early
        timer.mark()
    outside = time.perf_counter() - start
    measured = timer.step_seconds()
    assert len(measured) == 3
    assert all(m >= s for m, s in zip(measured, least)), measured
    assert sum(measured) <= outside
    assert measured[2] - measured[0] > 0.0  # the 100 ms step is not the 20 ms one shifted (beyond noise, per the bounds)


def test_rank_and_world_size_come_from_torchrun_variables(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert dev.dist_from_env() == dev.Dist() and not dev.Dist().enabled
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert dev.dist_from_env() == dev.Dist(rank=1, world_size=2, local_rank=1)
    assert dev.dist_from_env().enabled


def test_cpu_has_no_allocator_peaks_and_no_gpu_name():
    cpu = torch.device("cpu")
    assert dev.peak_memory(cpu) == (None, None)
    assert dev.device_name(cpu).startswith("cpu (")
    assert dev.memory_budget(cpu, 123) == 123
