"""The CUDA toolchain rule: one release (the torch build's) for nvcc, crt, nvvm, cudart and cccl.

Fast tests judge stacks and lock pins; the real ones lock the toolchain layer with uv, install
it into a venv from PyPI's wheels and compile a kernel with it: the locked toolchain builds
sm_90 code, and the mix that the rule refuses (nvcc 13.0 with the crt and nvvm of 13.5) fails
in the build's probe step with ptxas's own error.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.build_fixtures import copy_example, make_lock
from tests.clirun import assert_no_traceback
from trainstack.builder.extensions import cuda_home, probe_compile
from trainstack.builder.steps import Steps
from trainstack.cli import main
from trainstack.errors import BuildError, LockError
from trainstack.lock import lock_dir, parse_pins
from trainstack.lock.requests import flavour_requests, require_one_release
from trainstack.stackfile import Flavour
from trainstack.stackfile.compat import check_flavour, errors
from trainstack.stackfile.load import parse_stack
from trainstack.verify.fatbin import fatbin_archs

CU130 = Flavour("13.0", "ubuntu24.04", "3.12", "release")
FLAVOUR = "cu130-ubuntu2404-py311-release"  # the Python running the tests
# what `lock` pinned before the rule: nvcc of 13.0, its dependencies of 13.5 (unpinned by nvcc)
MIXED = {"nvidia-cuda-nvcc": "13.0.88", "nvidia-cuda-crt": "13.5.37", "nvidia-nvvm": "13.5.37", "ninja": "1.13.2"}

STACK = """\
[stack]
name = "t"
release = "1"
image = "trainstack/t"

[components]
torch = {{ version = "==2.11.0", group = "torch" }}

[matrix]
cuda = ["13.0"]
os = ["ubuntu24.04"]
python = ["3.12"]

[toolchain]
packages = {packages}
archs = {archs}
"""


def findings(packages: str = '["ninja"]', archs: str = '["90"]'):
    stack = parse_stack(STACK.format(packages=packages, archs=archs), Path("t.toml"))
    return stack, errors(check_flavour(stack, CU130))


def test_a_toolchain_component_of_another_release_is_refused_with_its_version() -> None:
    _, found = findings('["ninja", "nvidia-cuda-crt==13.5.37", "nvidia-nvvm==13.0.88"]')
    assert [f.rule for f in found] == ["toolchain.release"]
    assert "CUDA 13.0" in found[0].message and "nvidia-cuda-crt==13.5.37" in found[0].message
    assert "nvvm" not in found[0].message  # 13.0.88 is of the release
    _, cu12 = findings('["nvidia-cuda-nvcc-cu12==12.8.*"]')
    assert [f.rule for f in cu12] == ["toolchain.release"]
    assert findings('["ninja", "nvidia-cuda-nvcc==13.0.*", "cuda-toolkit[nvcc]>=13.0,<13.1"]')[1] == []


def test_gpu_targets_must_be_buildable_by_the_release() -> None:
    _, found = findings(archs='["90", "60"]')
    assert [f.rule for f in found] == ["toolchain.archs"] and "sm_60" in found[0].message
    assert findings(archs='["90a", "100"]')[1] == []


def test_check_refuses_the_mix_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.toml"
    path.write_text(STACK.format(packages='["nvidia-cuda-crt==13.5.37"]', archs="[]"), encoding="utf-8")
    assert main(["check", str(path)]) == 3
    out = capsys.readouterr()
    assert_no_traceback(out.out + out.err)
    assert "toolchain.release" in out.out and "13.5.37" in out.out


def test_the_toolchain_layer_asks_for_every_component_of_one_release() -> None:
    stack, _ = findings()
    layer = flavour_requests(stack, CU130).layers["toolchain"].requirements
    assert "cuda-toolkit[cccl,crt,cudart,nvcc,nvvm]==13.0.*" in layer and "nvidia-cuda-nvcc==13.0.*" in layer
    # CUDA 12's nvcc wheels hold only ptxas: its nvcc comes from Debian's archive or the host
    cu128 = flavour_requests(stack, Flavour("12.8", "ubuntu24.04", "3.12", "release")).layers["toolchain"].requirements
    assert cu128 == ("ninja",)


def test_a_lock_that_mixes_releases_is_refused() -> None:
    with pytest.raises(LockError, match=r"nvidia-cuda-crt==13\.5\.37, nvidia-nvvm==13\.5\.37"):
        require_one_release(CU130, "locks/x.toolchain.txt", MIXED, "t.toml")
    require_one_release(CU130, "locks/x.toolchain.txt", {**MIXED, "nvidia-cuda-crt": "13.0.88", "nvidia-nvvm": "13.0.88"}, "t.toml")


def _venv_with(tmp_path: Path, name: str, requirements: list[str]) -> Path:
    venv = tmp_path / name
    subprocess.run(["uv", "venv", "--quiet", "--python", sys.executable, venv], check=True)
    subprocess.run(["uv", "pip", "install", "--quiet", "--python", venv / "bin" / "python", *requirements], check=True)
    return venv


@pytest.mark.slow
def test_the_locked_toolchain_compiles_and_the_mixed_one_fails_fast(tmp_path: Path) -> None:
    stack = copy_example("torch-cuda", tmp_path)
    manifest = make_lock(stack, FLAVOUR)
    toolchain_lock = lock_dir(stack) / manifest.flavours[FLAVOUR].layers["toolchain"]
    pins = parse_pins(toolchain_lock.read_text(encoding="utf-8"))
    cuda = {n: v for n, v in pins.items() if n.startswith(("nvidia-cuda", "nvidia-nvvm", "cuda-toolkit"))}
    assert {"nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm", "nvidia-cuda-runtime", "nvidia-cuda-cccl"} <= cuda.keys()
    assert all(v.startswith("13.0.") for v in cuda.values()), cuda
    assert cuda["nvidia-cuda-runtime"] == manifest.flavours[FLAVOUR].packages["nvidia-cuda-runtime"]  # torch's own

    locked = _venv_with(tmp_path, "locked", ["--require-hashes", "-r", str(toolchain_lock)])
    home = cuda_home(locked, tmp_path / "cuda-home")
    assert home is not None and (home / "lib64" / "libcudart.so").exists()
    steps = Steps(tmp_path / "steps")
    probe_compile(steps, home, "90", tmp_path / "probe")
    assert steps.records[-1].status == "ok"
    compiled = fatbin_archs(tmp_path / "probe" / "probe.o")  # read back from the object's .nv_fatbin
    assert compiled is not None and compiled.sm == ("90",) and compiled.ptx == ("90",)

    mixed = _venv_with(tmp_path, "mixed", [f"{n}=={v}" for n, v in MIXED.items()])
    with pytest.raises(BuildError) as failed:
        probe_compile(Steps(tmp_path / "steps-mixed"), cuda_home(mixed, tmp_path / "mixed-home"), "90", tmp_path / "p2")
    message = str(failed.value)
    assert "cannot compile a kernel for sm_90" in message and "fatal : Unsupported .version 9.5" in message, message
