"""What counts as out of memory, CPU step timing, and the CPU memory cap."""

from __future__ import annotations

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
    timer = dev.StepTimer(torch.device("cpu"))
    timer.mark()
    for _ in range(3):
        torch.ones(64, 64) @ torch.ones(64, 64)
        timer.mark()
    seconds = timer.step_seconds()
    assert len(seconds) == 3 and all(s > 0 for s in seconds)


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
