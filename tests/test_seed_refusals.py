"""The seeds replayed from stack files written apart from examples/seeds/: what check refuses,
lock and render refuse too, and what compiles nothing needs no nvcc. Real: the CLI runs on the
committed seed stacks and locks, with the host's nvcc pointed at an empty CUDA_HOME."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clirun import assert_no_traceback

SEEDS = Path(__file__).resolve().parent.parent / "examples" / "seeds"
ACS = "acs-training-25.07"
DEVEL = "docker.io/nvidia/cuda:12.6.3-cudnn-devel-ubuntu22.04"


def trainstack(*args: str, cuda_home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CUDA_HOME": str(cuda_home), "COLUMNS": "400"}
    return subprocess.run([sys.executable, "-m", "trainstack", *args], capture_output=True, text=True, env=env,
                          timeout=300, check=False)


@pytest.fixture()
def acs(tmp_path: Path) -> Path:
    """ACS 25.07 with its committed lock, in a folder of its own; CUDA_HOME without nvcc beside it."""
    shutil.copy(SEEDS / f"{ACS}.toml", tmp_path / f"{ACS}.toml")
    shutil.copytree(SEEDS / f"{ACS}.lock", tmp_path / f"{ACS}.lock")
    (tmp_path / "no-cuda").mkdir()
    return tmp_path / f"{ACS}.toml"


def test_a_flavour_check_refuses_is_neither_locked_nor_rendered(acs: Path) -> None:
    """On plain ubuntu:22.04 DeepSpeed's ops have no nvcc 12.6: check refuses the flavour, and so
    do lock (before resolving anything) and render (no Dockerfile without CUDA_HOME and the
    GPU targets); with the seed's devel base, render writes the Dockerfile with its CUDA_HOME."""
    empty = acs.parent / "no-cuda"
    out = acs.parent / "render"
    assert trainstack("render", str(acs), "--out", str(out), cuda_home=empty).returncode == 0
    assert "CUDA_HOME=/usr/local/cuda" in next(out.glob("*/Dockerfile")).read_text()
    acs.write_text(acs.read_text().replace(DEVEL, "docker.io/library/ubuntu:22.04"))
    lock_before = sorted((p.name, p.read_bytes()) for p in acs.with_suffix(".lock").rglob("*") if p.is_file())
    check = trainstack("check", str(acs), cuda_home=empty)
    assert check.returncode == 3 and "toolchain.nvcc: no nvcc of CUDA 12.6" in check.stdout
    lock = trainstack("lock", str(acs), cuda_home=empty)
    assert lock.returncode == 3, lock.stderr
    assert lock.stderr.startswith("error: ") and "cu126-ubuntu2204-py310-release: no nvcc of CUDA 12.6" in lock.stderr
    assert "locking" not in lock.stderr  # refused before any resolution
    assert sorted((p.name, p.read_bytes()) for p in acs.with_suffix(".lock").rglob("*") if p.is_file()) == lock_before
    render = trainstack("render", str(acs), "--out", str(acs.parent / "render2"), cuda_home=empty)
    assert render.returncode == 3 and "no nvcc of CUDA 12.6 for its extensions in an image build" in render.stderr
    assert "ubuntu:22.04 is no CUDA 12.6 devel image" in render.stderr and not (acs.parent / "render2").exists()
    assert_no_traceback(lock.stderr + render.stderr)


def test_deepspeed_that_compiles_nothing_needs_no_nvcc(acs: Path) -> None:
    """DS_BUILD_OPS=0 and no op asked for: DeepSpeed's build compiles nothing (its ops JIT-compile
    on use), so a flavour on a base without nvcc is not refused for want of one."""
    text = acs.read_text().replace(DEVEL, "docker.io/library/ubuntu:22.04")
    acs.write_text(text.replace('DS_BUILD_OPS = "1"', 'DS_BUILD_OPS = "0"'))
    check = trainstack("check", str(acs), "-v", cuda_home=acs.parent / "no-cuda")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "toolchain.nvcc" not in check.stdout and "toolchain.route" not in check.stdout
    acs.write_text(text.replace('DS_BUILD_OPS = "1", DS_BUILD_SPARSE_ATTN = "0"', 'DS_BUILD_OPS = "0", DS_BUILD_FUSED_ADAM = "1"'))
    assert trainstack("check", str(acs), cuda_home=acs.parent / "no-cuda").returncode == 3  # one op asked for: nvcc needed


def test_a_vendor_base_declared_cuda_devel_gives_the_image_its_nvcc(tmp_path: Path) -> None:
    """CoreWeave builds on its own base image, whose tag does not say 'CUDA 12.1 devel': refused
    until [build] base_cuda declares it, then checked and rendered with the base's toolkit."""
    name = "coreweave-torch-extras-2024.5.0"
    stack = tmp_path / f"{name}.toml"
    shutil.copytree(SEEDS / f"{name}.lock", tmp_path / f"{name}.lock")
    (tmp_path / "no-cuda").mkdir()
    vendor = "ghcr.io/coreweave/ml-containers/torch-base:es-cuda12.1.1-ubuntu22.04"
    text = (SEEDS / f"{name}.toml").read_text().replace("docker.io/nvidia/cuda:12.1.1-cudnn8-devel-ubuntu22.04", vendor)
    stack.write_text(text)
    refused = trainstack("check", str(stack), cuda_home=tmp_path / "no-cuda")
    assert refused.returncode == 3 and 'base_cuda = { "ubuntu22.04" = "12.1" }' in refused.stdout
    stack.write_text(text.replace(f'"{vendor}" }}', f'"{vendor}" }}\nbase_cuda = {{ "ubuntu22.04" = "12.1" }}', 1))
    check = trainstack("check", str(stack), "-v", cuda_home=tmp_path / "no-cuda")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "declared CUDA 12.1 devel by [build] base_cuda" in check.stdout
    out = tmp_path / "render"
    assert trainstack("render", str(stack), "--out", str(out), cuda_home=tmp_path / "no-cuda").returncode == 0
    dockerfile = next(out.glob("*/Dockerfile")).read_text()
    assert f"FROM {vendor}" in dockerfile and "CUDA_HOME=/usr/local/cuda" in dockerfile
    wrong = text.replace(f'"{vendor}" }}', f'"{vendor}" }}\nbase_cuda = {{ "ubuntu20.04" = "12.1" }}', 1)
    stack.write_text(wrong)
    bad = trainstack("check", str(stack), cuda_home=tmp_path / "no-cuda")
    assert bad.returncode == 2 and "build.base_cuda" in bad.stderr and "'ubuntu20.04' has no base image" in bad.stderr
