"""Environments shared by the verify, report, linkcheck, smoke and suite tests.

Each is made once per test session for every pytest-xdist worker (tests/session_cache.py; uv's
cache makes later sessions fast), so every test module that asks gets the same directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.session_cache import made_once
from tests.venvs import venv_over_this_python
from trainstack.stackfile import load_stack

REPO = Path(__file__).resolve().parent.parent


def _uv(*args: str | Path) -> None:
    subprocess.run(["uv", *map(str, args)], check=True, capture_output=True, text=True)


def make_venv(factory: pytest.TempPathFactory, key: str, packages: list[str], *, system_site: bool = False) -> Path:
    """A uv venv with ``packages`` (over this Python's packages where ``system_site``); returns its python."""

    def make(root: Path) -> None:
        if system_site:
            python = venv_over_this_python(root / "venv")
        else:
            _uv("venv", "-q", "--python", sys.executable, root / "venv")
            python = root / "venv" / "bin" / "python"
        if packages:
            _uv("pip", "install", "-q", "--python", python, *packages)

    return made_once(factory, key, make) / "venv" / "bin" / "python"


@pytest.fixture(scope="session")
def numpy_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Like the cpu-minimal build: numpy, pytest, hypothesis; no torch."""
    return make_venv(tmp_path_factory, "numpy-venv", ["numpy>=2.2,<2.5", "pytest>=8", "hypothesis>=6.100"])


@pytest.fixture(scope="session")
def cuda_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with the CUDA torch wheel of examples/stacks/torch-cuda.toml, from PyPI."""
    version = load_stack(REPO / "examples/stacks/torch-cuda.toml").components["torch"].version
    python = make_venv(tmp_path_factory, "cuda-venv", [f"torch{version}"])
    return python.parent.parent


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3.*/site-packages"))


def damaged_copy(venv: Path, dest: Path, victim: str) -> Path:
    """Hardlinked copy of torch/lib and nvidia/ (no data copied, the uv cache untouched), minus
    one library. Unlinking a hardlink in the copy leaves the original file in place."""
    site = site_packages(venv)
    target = dest / "site-packages"
    for part in ("torch/lib", "nvidia"):
        shutil.copytree(site / part, target / part, copy_function=_link)
    (target / victim).unlink()
    return target


def _link(src: str, dst: str) -> None:
    Path(dst).hardlink_to(src)


def planted_torch(factory: pytest.TempPathFactory, key: str, body: str) -> Path:
    """A venv whose 'torch' package is broken in a chosen way (a planted package, one ``body`` a
    ``key``); its python."""

    def make(root: Path) -> None:
        _uv("venv", "-q", "--python", sys.executable, root / "venv")
        site = site_packages(root / "venv")
        (site / "torch").mkdir()
        (site / "torch" / "__init__.py").write_text(body)
        info = site / "torch-2.11.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.11.0\n")

    return made_once(factory, key, make) / "venv" / "bin" / "python"


@pytest.fixture(scope="session")
def deepspeed_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """DeepSpeed (no ops built ahead of time) over this machine's CPU torch."""

    def make(root: Path) -> None:
        python = venv_over_this_python(root / "venv")
        subprocess.run(
            ["uv", "pip", "install", "-q", "--python", str(python), "--no-build-isolation", "--no-deps",
             "deepspeed==0.18.9", "hjson", "py-cpuinfo", "msgpack", "einops", "psutil", "ninja", "tqdm"],
            check=True, capture_output=True, text=True, env={**os.environ, "DS_BUILD_OPS": "0"},
        )

    return made_once(tmp_path_factory, "deepspeed-venv", make) / "venv" / "bin" / "python"
