"""Which backend can build which flavour, said before any work: check fails (exit 3) a flavour the
backend build will take (--backend, else the stack's [build] backend, else venv) cannot compile,
naming the ways out; build refuses it (exit 6, a tool missing) before anything is downloaded.

Real: check and build run as processes against this host's nvcc (CUDA_HOME pointed at an empty
folder: no CUDA 12.4 toolkit), build on the committed lock of the Debian 13 CUDA 12.4 example."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.stacks import nvcc_stack
from trainstack.cli import main

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "stacks" / "deepspeed-cuda12-debian.toml"


def test_check_fails_a_flavour_the_default_backend_cannot_build_and_says_which_can(tmp_path: Path, capsys, monkeypatch) -> None:
    empty = tmp_path / "no-cuda"
    empty.mkdir()
    monkeypatch.setenv("CUDA_HOME", str(empty))
    monkeypatch.setenv("COLUMNS", "400")
    stack = nvcc_stack(tmp_path, "12.4", "debian13", "3.13")

    def check(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(["check", str(stack), "-v", *args])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    code, stdout, stderr = check()
    assert code == 3, stdout + stderr
    [error] = [line for line in stdout.splitlines() if line.startswith("error ")]
    assert " toolchain.backend: builds: oci can, venv (build's default) cannot: no nvcc of CUDA 12.4 for deepspeed" in error
    assert "--backend oci" in error and "--skip-sources (leaves out deepspeed)" in error and "CUDA_HOME" in error
    assert "all rules hold" not in stdout
    assert check("--backend", "oci")[0] == 0
    # a stack shipped as images says so once: check (and build) take its backend
    stack.write_text(stack.read_text().replace("[build]\n", '[build]\nbackend = "oci"\n'), encoding="utf-8")
    assert check()[0] == 0
    code, stdout, _ = check("--backend", "venv")
    assert code == 3 and "toolchain.backend" in stdout
    code, _, stderr = check("--backend", "conda")
    assert code == 2 and "error: --backend: unknown backend 'conda'" in stderr


def test_build_refuses_before_downloading_anything_and_names_skip_sources(tmp_path: Path) -> None:
    empty = tmp_path / "no-cuda"
    empty.mkdir()
    project = tmp_path / "project"
    shutil.copytree(EXAMPLE.parent, project, ignore=shutil.ignore_patterns("*.toml", "*.lock"))
    shutil.copy(EXAMPLE, project / EXAMPLE.name)
    shutil.copytree(EXAMPLE.with_suffix(".lock"), project / EXAMPLE.with_suffix(".lock").name)
    cache = tmp_path / "uv-cache"
    env = {**os.environ, "CUDA_HOME": str(empty), "UV_CACHE_DIR": str(cache), "COLUMNS": "400"}
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "trainstack", "build", EXAMPLE.name, "--backend", "venv",
                           "--build-dir", str(tmp_path / "build")], cwd=project, env=env, capture_output=True,
                          text=True, timeout=120)
    seconds = time.monotonic() - start
    assert done.returncode == 6, done.stderr  # a tool missing: the nvcc of CUDA 12.4
    [line] = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert "flavour cu124-debian13-py313-release: no nvcc of CUDA 12.4" in line and "nothing was downloaded" in line
    assert "--skip-sources" in line and "--backend oci" in line
    assert not cache.exists() or not any(cache.iterdir()), "uv fetched something before the refusal"
    assert not any((tmp_path / "build").glob(".*staging*"))
    assert seconds < 60
