"""run_health end to end on the recorded H200 NVML answers: driver minimum from the rules or --min-driver."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from trainstack.health.schema import Status
from trainstack.health.nvml import RecordedSource
from trainstack.health.run import HealthOptions, Torch, run_health

RECORDING = Path(__file__).parent / "data" / "health" / "nvml_h200.json"


def _report(tmp_path, torch: Torch, raw=None, **opts):
    raw = raw or json.loads(RECORDING.read_text())
    return run_health(HealthOptions(disk_path=tmp_path, **opts), nvml_factory=lambda: RecordedSource(raw),
                      torch_probe=lambda: torch)


def _check(report, name):
    return next(c for c in report.checks if c.name == name)


def test_driver_minimum_comes_from_the_rules_for_torch_cuda(tmp_path):
    report = _report(tmp_path, Torch(cuda="13.0", devices=1))
    driver = _check(report, "driver.version")
    assert driver.status is Status.ok and driver.threshold == ">= 580.65.06"
    assert driver.message.startswith("rules: CUDA 13.0")
    assert report.gpu_model == "NVIDIA H200" and report.thresholds_profile == "h200"


def test_old_driver_is_critical_under_the_rules(tmp_path):
    raw = json.loads(RECORDING.read_text())
    old = copy.deepcopy(raw)
    old["driver_version"] = "560.35.03"
    old["cuda_driver_version"] = 12060
    report = _report(tmp_path, Torch(cuda="12.8", devices=1), raw=old)
    driver = _check(report, "driver.version")
    assert (driver.status, driver.value, driver.threshold) == (Status.critical, "560.35.03", ">= 570.26")
    assert report.exit_code == 2


def test_min_driver_flag_overrides_the_rules(tmp_path):
    report = _report(tmp_path, Torch(cuda="13.0", devices=1), min_driver="590.1")
    driver = _check(report, "driver.version")
    assert (driver.status, driver.message) == (Status.critical, "from --min-driver")


def test_cuda_unknown_to_the_rules_leaves_no_minimum(tmp_path):
    driver = _check(_report(tmp_path, Torch(cuda="99.9", devices=1)), "driver.version")
    assert driver.status is Status.ok and driver.threshold is None


def test_level2_without_torch_gpu_is_unknown_with_the_reason(tmp_path):
    report = _report(tmp_path, Torch(reason="torch is not installed"), level=2, expect_gpus=1)
    gemm = _check(report, "gemm.bf16")
    assert (gemm.status, gemm.message) == (Status.unknown, "torch is not installed")
    assert _check(report, "gpu.count").status is Status.ok
    assert report.exit_code == 3
