"""kineto's own stderr lines kept out of bench's output, on what torch wrote when it ran here
(tests/data/kineto/): its start and stop marks always, its failed GPU count only where no GPU
is usable; every other line passed on. (tests/test_bench_cli.py checks a real profiled bench run
prints no mark.)"""

from __future__ import annotations

from pathlib import Path

from torch.profiler import ProfilerActivity

from trainstack.bench.kineto import without_kineto_noise
from trainstack.bench.profile import activities_for

DATA = Path(__file__).parent / "data" / "kineto"


def recorded(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def test_the_marks_of_a_cpu_torch_go_and_bench_own_line_stays() -> None:
    text = recorded("torch-2.13.0+cpu-bench.stderr")
    assert text.count("USDT:") == 2
    for gpu in (False, True):
        assert without_kineto_noise(text, gpu=gpu) == text.splitlines(keepends=True)[0]


def test_a_cuda_torch_without_gpu_loses_only_its_failed_device_count() -> None:
    text = recorded("torch-2.11.0+cu130-no-gpu.stderr")
    kept = without_kineto_noise(text, gpu=False)
    assert "gpuGetDeviceCount" in text and "gpuGetDeviceCount" not in kept
    assert kept.splitlines() == [line for line in text.splitlines() if "gpuGetDeviceCount" not in line]
    assert "UserWarning: Warning: Profiler clears events" in kept and kept.endswith("profiled ['breakdown']\n")
    # on a machine with a GPU the same line is a real failure: it stays
    assert without_kineto_noise(text, gpu=True) == text


def test_kineto_other_lines_stay() -> None:
    text = recorded("torch-2.13.0+cpu-daemon.stderr")
    kept = without_kineto_noise(text, gpu=False)
    assert "USDT:" not in kept
    assert kept.count("IpcFabricConfigClient.cpp:178] Failed to send config") == 3 and kept.startswith("INFO:")


def test_gpu_kernels_are_asked_only_on_a_gpu() -> None:
    assert activities_for(False) == [ProfilerActivity.CPU]
    assert activities_for(True) == [ProfilerActivity.CPU, ProfilerActivity.CUDA]
