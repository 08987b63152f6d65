"""DeepSpeed's GPU ops built ahead of time on a machine without a GPU, from its sdist, with the
locked CUDA toolchain (PyPI wheels) and the stack's GPU target sm_90; then the wheel cache: a
second build of the flavour reuses the compiled wheel instead of compiling again."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.build_fixtures import copy_example, make_lock
from trainstack.cli import main
from trainstack.verify.fatbin import fatbin_archs

FLAVOUR = "cu130-ubuntu2404-py311-release"
ANSI = re.compile(r"\x1b\[[0-9;]*m")

pytestmark = pytest.mark.slow


def deepspeed_stack(tmp_path: Path) -> Path:
    ops = 'DS_BUILD_OPS = "0", DS_BUILD_FUSED_ADAM = "1", DS_BUILD_AIO = "0"'  # cpu_adam: test_build_deepspeed
    return copy_example(
        "torch-cuda",
        tmp_path,
        {
            r"\nflash-attn = [^\n]*": "",  # hours of nvcc on two cores: benchmarks/extension_build.py
            r"\napex = [^\n]*": "",  # its repository is not reachable from CI
            # the guard at what this venv and its DeepSpeed compile take (about 10 GB), not a whole image's 40
            r"min_free_disk_gb = 40": "min_free_disk_gb = 15",
            r'build_env = \{ DS_BUILD_OPS = "0"[^}]*\}': f"build_env = {{ {ops} }}",
            r'packages = \["ninja", "cmake"\]': 'packages = ["ninja", "cmake", "setuptools", "wheel"]\narchs = ["90"]',
        },
    )


@pytest.mark.python("3.11")  # builds a py311 flavour
def test_deepspeed_fused_adam_built_for_sm90_and_reused_from_the_cache(tmp_path: Path) -> None:
    stack = deepspeed_stack(tmp_path)
    make_lock(stack, FLAVOUR)
    build = tmp_path / "build"
    assert main(["build", str(stack), "--flavour", FLAVOUR, "--build-dir", str(build)]) == 0
    venv = build / FLAVOUR / "venv"
    record = json.loads((build / FLAVOUR / "build.json").read_text())
    names = [s["name"] for s in record["steps"]]
    assert names.index("nvcc-probe-sm_90") < names.index("compile-deepspeed")  # the toolchain is tried first
    first = record["extensions"]["deepspeed"]
    assert first["cache"] == "miss" and first["compile_seconds"] > 0 and first["wheel_bytes"] > 0

    report = subprocess.run([venv / "bin" / "ds_report"], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "DS_ACCELERATOR": "cuda"})  # no GPU here: DeepSpeed would pick its CPU accelerator
    assert report.returncode == 0, report.stderr[-2000:]
    table = ANSI.sub("", report.stdout)
    assert re.search(r"^fused_adam \.+ \[YES\] \.+ \[OKAY\]", table, re.M), table
    assert not re.search(r"^(fused_lamb|cpu_adam) \.+ \[YES\]", table, re.M)
    fused = next(venv.glob("lib/python*/site-packages/deepspeed/ops/adam/fused_adam_op*.so"))
    archs = fatbin_archs(fused)
    assert archs is not None and archs.sm == ("90",), archs

    assert main(["build", str(stack), "--flavour", FLAVOUR, "--build-dir", str(build), "--force"]) == 0
    again = json.loads((build / FLAVOUR / "build.json").read_text())
    hit = again["extensions"]["deepspeed"]
    assert hit["cache"] == "hit" and hit["key"] == first["key"] and hit["wheel"] == first["wheel"]
    step = next(s for s in again["steps"] if s["name"] == "compile-deepspeed")
    assert step["seconds"] < 5 and "cache hit" in step["detail"]
