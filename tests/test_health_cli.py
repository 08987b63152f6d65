"""`trainstack health` on this machine: nvidia-ml-py is installed but there is no driver (no NVML library).

These run the real verb: the NVML failure is the real NVMLError_LibraryNotFound,
and torch (CPU build) reports no GPU.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from tests.clirun import assert_no_traceback
from trainstack import cli
from trainstack.health.schema import HealthReport, Status


def _invoke(*args: str):
    return CliRunner().invoke(cli.app, ["health", *args])


@pytest.fixture(scope="module")
def no_driver():
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return f"{type(exc).__name__}"
    pynvml.nvmlShutdown()
    pytest.skip("this machine has an NVIDIA driver")


def test_level1_without_nvml_reports_unknown_and_exits_3(no_driver, tmp_path):
    result = _invoke("--json", "--disk", str(tmp_path))
    assert result.exit_code == 3, result.output
    report = HealthReport.model_validate_json(result.stdout)
    by_name = {c.name: c for c in report.checks}
    assert by_name["gpu.count"].status is Status.unknown
    assert no_driver in by_name["gpu.count"].message
    assert by_name["host.disk_free"].status in (Status.ok, Status.warn, Status.critical)
    assert by_name["host.disk_free"].message == str(tmp_path)
    assert report.status is Status.unknown and report.exit_code == 3


def test_level3_without_gpu_lists_every_gpu_check_as_unknown(no_driver):
    result = _invoke("--json", "--level", "3")
    assert result.exit_code == 3
    report = HealthReport.model_validate_json(result.stdout)
    gpu_checks = [c for c in report.checks if c.level > 1]
    names = {c.name for c in gpu_checks}
    assert {"gemm.bf16", "gemm.correctness", "copy.device", "copy.h2d", "copy.d2h", "allreduce.busbw",
            "gemm.sustained", "clocks.under_load"} <= names
    assert all(c.status is Status.unknown and c.message.startswith("no GPU") for c in gpu_checks)


def test_table_for_people(no_driver):
    result = _invoke("--level", "2")
    assert result.exit_code == 3
    assert "health level 2: unknown (exit 3)" in result.stdout
    assert "gemm.bf16" in result.stdout


def test_subprocess_prints_json_and_no_traceback(no_driver):
    proc = subprocess.run([sys.executable, "-m", "trainstack.cli", "health", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert_no_traceback(proc.stderr + proc.stdout)
    assert json.loads(proc.stdout)["exit_code"] == 3


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--level", "4"], "--level 4: accepted values are 1, 2, 3"),
        (["--expect-gpus", "-1"], "--expect-gpus -1"),
        (["--duration", "0"], "--duration"),
    ],
)
def test_bad_options_give_one_line_and_exit_64(capsys, args, needle):
    assert cli.main(["health", *args]) == 64  # not 2: that is critical to a monitor
    err = capsys.readouterr().err
    assert_no_traceback(err)
    assert needle in err


def test_bad_thresholds_file_gives_one_line_and_exit_64(capsys, tmp_path):
    bad = tmp_path / "t.toml"
    bad.write_text("[default]\ngemm_bf16_tflops = { warn_below = 'fast' }\n")
    assert cli.main(["health", "--thresholds", str(bad)]) == 64
    err = capsys.readouterr().err
    assert str(bad) in err.replace("\n", "") and "gemm_bf16_tflops.warn_below" in err.replace("\n", "")


def test_entry_point_exits_with_the_verdict(no_driver):
    proc = subprocess.run([sys.executable, "-m", "trainstack.cli", "health"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 3
