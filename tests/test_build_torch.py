"""The torch-cuda stack as a venv on a CPU machine: CUDA torch wheels from PyPI install anywhere on x86_64."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.build_fixtures import copy_example, make_lock
from trainstack.cli import main

FLAVOUR = "cu130-ubuntu2404-py311-release"  # PyPI serves it; the cu128 flavours need PyTorch's own index

pytestmark = pytest.mark.slow


@pytest.mark.python("3.11")  # builds a py311 flavour
def test_torch_flavour_wheels_only_venv(tmp_path: Path) -> None:
    stack = copy_example("torch-cuda", tmp_path)
    manifest = make_lock(stack, FLAVOUR)
    build = tmp_path / "build"
    assert main(["build", str(stack), "--flavour", FLAVOUR, "--skip-sources", "--build-dir", str(build)]) == 0
    venv = build / FLAVOUR / "venv"
    probe = "import torch, torchvision, transformers; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())"
    out = subprocess.run([venv / "bin" / "python", "-c", probe], check=True, capture_output=True, text=True).stdout.split()
    locked = manifest.flavours[FLAVOUR]
    assert out[0].split("+")[0] == locked.packages["torch"] and out[1].startswith("13.0") and out[2] == "False"
    record = json.loads((build / FLAVOUR / "build.json").read_text())
    assert sorted(record["skipped_sources"]) == ["apex", "deepspeed", "flash-attn"]
    assert record["sizes"]["venv"] > 2 * 1024**3  # the CUDA libraries come as wheels
    assert record["cache_key"] == locked.cache_key
