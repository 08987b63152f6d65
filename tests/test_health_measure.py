"""Level 2 and sustained measurements on the CPU device: the same functions the GPUs run, small sizes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainstack.health import measure
from trainstack.health.gpu_checks import level2, sustained_checks
from trainstack.health.schema import Status
from trainstack.health.nvml import RecordedSource
from trainstack.health.thresholds import load_thresholds

torch = pytest.importorskip("torch")
CPU = torch.device("cpu")
RECORDING = Path(__file__).parent / "data" / "health" / "nvml_h200.json"


def test_time_repeats_counts_each_repeat_after_warmup():
    calls = []
    times = measure.time_repeats(lambda: calls.append(1), CPU, warmup=2, repeats=5)
    assert len(calls) == 7 and len(times) == 5 and all(t >= 0 for t in times)


def test_gemm_rate_and_error_against_float64():
    g = measure.gemm(CPU, n=192, warmup=1, repeats=3)
    assert g.finite
    # bf16 output of a 192-long dot product: rounding error of order 2^-9
    assert 1e-4 < g.relative_error < 1e-2
    assert g.rate.value > 0 and g.rate.repeats == 3


def test_copies_are_exact():
    assert measure.device_copy(CPU, nbytes=4 * 2**20, repeats=3).exact
    for direction in ("h2d", "d2h"):
        assert measure.host_copy(CPU, direction, nbytes=4 * 2**20, repeats=3).exact
    with pytest.raises(ValueError):
        measure.host_copy(CPU, "sideways", nbytes=1024)


def test_level2_checks_with_default_thresholds():
    checks = level2(CPU, load_thresholds(None), gpu=0, gemm_n=128, copy_bytes=2**20)
    assert [c.name for c in checks] == ["gemm.bf16", "gemm.correctness", "copy.device", "copy.h2d", "copy.d2h"]
    assert all(c.status is Status.ok and c.gpu == 0 for c in checks)
    assert checks[0].unit == "TFLOP/s" and checks[2].unit == "GB/s"


def test_level2_on_h200_thresholds_flags_a_slow_device():
    checks = {c.name: c for c in level2(CPU, load_thresholds("NVIDIA H200"), gpu=0, gemm_n=128, copy_bytes=2**20)}
    assert checks["gemm.bf16"].status is Status.critical
    assert checks["gemm.bf16"].threshold == "< 710 warn, < 590 critical"
    assert checks["gemm.correctness"].status is Status.ok


def test_sustained_with_recorded_clock_watch():
    nvml = RecordedSource(json.loads(RECORDING.read_text()))
    checks = {c.name: c for c in sustained_checks([CPU], 1.2, nvml, load_thresholds(None), [0], n=128, window_s=0.2)}
    assert checks["gemm.sustained"].value > 0
    assert 0 < checks["gemm.sustained_drop"].value <= 1.0
    watch = checks["clocks.under_load"]
    assert watch.status is Status.ok and "samples" in watch.message


def test_sustained_without_nvml_is_unknown_for_clocks():
    checks = {c.name: c for c in sustained_checks([CPU], 0.2, None, load_thresholds(None), [0], n=64, window_s=0.05)}
    assert checks["clocks.under_load"].status is Status.unknown
    assert checks["gemm.sustained"].status is Status.ok
