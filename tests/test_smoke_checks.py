"""Smoke checks in real environments: a venv without torch, this machine's CPU torch, and
a torch whose import kills the interpreter."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.verify_fixtures import make_venv, numpy_python, planted_torch  # noqa: F401 - fixture
from trainstack.stackfile.schema import SMOKE_CHECKS
from trainstack.verify.smoke import run_smoke
from trainstack.verify.target import open_target


def host_has_gpu() -> bool:
    return Path("/dev/nvidiactl").exists() or Path("/dev/kfd").exists()


def by_name(results) -> dict:
    return {r.name: r for r in results}


def test_without_torch(numpy_python: Path) -> None:  # noqa: F811
    results = by_name(run_smoke(open_target(numpy_python), list(SMOKE_CHECKS), ["numpy", "pytest", "hypothesis", "flash-attn"]))
    assert results["import numpy"].status == "pass"
    assert results["import flash-attn"].status == "fail" and "not installed" in results["import flash-attn"].reason
    assert results["matmul[cpu]"].status == "pass" and "numpy" in results["matmul[cpu]"].reason
    for check in ("sdpa", "compile", "cpp_extension", "distributed"):
        assert (results[f"{check}[cpu]"].status, results[f"{check}[cpu]"].reason) == ("skip", "torch not installed")
    if not host_has_gpu():
        for check in ("matmul", "sdpa", "compile", "cpp_extension", "distributed"):
            assert (results[f"{check}[gpu]"].status, results[f"{check}[gpu]"].reason) == ("skip", "no GPU")
    assert all(r.seconds >= 0 for r in results.values())


def test_crashing_import_fails_the_check_never_drops_it(tmp_path_factory: pytest.TempPathFactory) -> None:
    python = planted_torch(tmp_path_factory, "crashing-torch", "import os\nos.abort()\n")
    results = run_smoke(open_target(python), ["imports", "sdpa"], ["torch"])
    assert [(r.name, r.status) for r in results] == [("import torch", "fail"), ("sdpa", "fail")]
    assert all("signal 6" in r.reason for r in results)


def test_unknown_check_fails(numpy_python: Path) -> None:  # noqa: F811
    [result] = run_smoke(open_target(numpy_python), ["warp_drive"], [])
    assert result.status == "fail" and "unknown smoke check" in result.reason


@pytest.mark.slow
def test_all_checks_in_a_venv_over_this_machines_torch(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    python = make_venv(tmp_path_factory, "system-torch-venv", [], system_site=True)
    results = by_name(run_smoke(open_target(python), list(SMOKE_CHECKS), ["torch", "numpy"], tmp_path))
    for check in ("matmul", "sdpa", "compile", "cpp_extension", "distributed"):
        cpu = results[f"{check}[cpu]"]
        assert cpu.status == "pass", (check, cpu.reason)
        gpu = results[f"{check}[gpu]"]
        if not torch.cuda.is_available():
            assert (gpu.status, gpu.reason) == ("skip", "no GPU")
    assert results["import torch"].status == "pass"
    assert results["compile[cpu]"].seconds > 0 and "inductor" in results["compile[cpu]"].reason
