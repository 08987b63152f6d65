"""The seeds' platform range: CUDA 11.8 and 12.0-12.9, torch 2.0, Ubuntu 20.04, the matrix's
arch (x86_64, aarch64) flowing into uv's platform, and the nvcc the toolchain can really supply."""

from __future__ import annotations

import pytest

from trainstack import rules
from trainstack.cli import main
from trainstack.lock import lock_dir, lock_stack
from trainstack.lock.requests import flavour_requests
from trainstack.stackfile import load_stack
from trainstack.stackfile.compat import check_stack, errors
from trainstack.stackfile.matrix import expand_flavours

STACK = """\
[stack]
name = "seed"
release = "1"
image = "trainstack/seed"

[components]
{components}

[matrix]
cuda = {cuda}
os = ["{os}"]
python = ["{python}"]
arch = {arch}

[toolchain]
packages = []
nvcc = {nvcc}

[build]
retries = 2

[verify]
smoke = {smoke}
"""


def seed(write_stack, components='torch = { version = "==2.5.1" }', cuda='["cpu"]', os="ubuntu22.04",
         python="3.11", arch='["x86_64"]', nvcc="false", smoke='["imports", "matmul"]'):
    text = STACK.format(components=components, cuda=cuda, os=os, python=python, arch=arch, nvcc=nvcc, smoke=smoke)
    return write_stack(text)


def findings(path):
    return [(f.flavour, f.rule, f.message) for f in errors(check_stack(load_stack(path)))]


@pytest.mark.parametrize("cuda", ["11.8", "12.0", "12.1", "12.2", "12.3", "12.4", "12.5", "12.6", "12.8", "12.9"])
def test_every_cuda_release_of_the_seeds_is_known_with_its_driver_archs_and_notes(cuda) -> None:
    shipped = rules.shipped_rules()
    assert rules.min_driver(shipped, cuda)
    assert "90" in rules.cuda_archs(shipped, cuda)
    assert shipped.cuda.versions[cuda].source.startswith("https://docs.nvidia.com/cuda/")


def test_torch_2_0_on_ubuntu_20_04_with_cuda_11_8_and_python_3_8(write_stack) -> None:
    path = seed(write_stack, 'torch = "==2.0.1"', cuda='["11.8"]', os="ubuntu20.04", python="3.8")
    assert findings(path) == []
    stack = load_stack(path)
    (flavour,) = expand_flavours(stack)
    plan = flavour_requests(stack, flavour)
    assert plan.full.platform == "x86_64-manylinux_2_31"
    assert plan.variant_index == "https://download.pytorch.org/whl/cu118"
    assert rules.index_for(stack.rules_in_effect, "2.0.1", "cu117", "release") is None  # PyPI's own


def test_any_version_in_table_form(write_stack) -> None:
    stack = load_stack(seed(write_stack, 'numpy = { version = "*", group = "torch" }'))
    assert stack.components["numpy"].requirement() == "numpy"


def test_arch_enters_the_slug_only_when_not_x86_64_and_the_platform_always(write_stack) -> None:
    stack = load_stack(seed(write_stack, arch='["x86_64", "aarch64"]'))
    plans = {f.slug: flavour_requests(stack, f) for f in expand_flavours(stack)}
    assert set(plans) == {"cpu-ubuntu2204-py311-release", "cpu-ubuntu2204-py311-release-aarch64"}
    assert plans["cpu-ubuntu2204-py311-release"].full.platform == "x86_64-manylinux_2_35"
    assert plans["cpu-ubuntu2204-py311-release-aarch64"].full.platform == "aarch64-manylinux_2_35"
    # aarch64: PyPI serves torch's CPU build; x86_64's CPU build comes from the PyTorch index
    assert plans["cpu-ubuntu2204-py311-release-aarch64"].variant_index is None
    assert plans["cpu-ubuntu2204-py311-release"].variant_index == "https://download.pytorch.org/whl/cpu"


def test_aarch64_cuda_wheels_only_from_torch_2_5(write_stack) -> None:
    old = seed(write_stack, 'torch = "==2.4.1"', cuda='["12.1"]', arch='["aarch64"]')
    (found,) = findings(old)
    assert found[0] == "cu121-ubuntu2204-py311-release-aarch64" and found[1] == "torch.arch"
    assert "no aarch64 cu121 wheels" in found[2] and "from 2.5 on" in found[2]
    new = seed(write_stack, 'torch = "==2.5.1"', cuda='["12.4"]', arch='["aarch64"]')
    assert findings(new) == []
    stack = load_stack(new)
    (flavour,) = expand_flavours(stack)
    assert flavour_requests(stack, flavour).variant_index == "https://download.pytorch.org/whl/cu124"


def test_unknown_arch_is_refused_in_one_line(write_stack, capsys) -> None:
    path = seed(write_stack, arch='["ppc64le"]')
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "matrix.arch" in err[0] and "aarch64" in err[0]


DEEPSPEED = ('torch = "==2.5.1"\ndeepspeed = { version = "==0.15.4", source = "sdist", requires = ["torch"], '
             'build_env = { DS_BUILD_FUSED_ADAM = "1" } }')  # one op ahead of time: nvcc needed


def test_check_refuses_cuda_11_with_the_wheels_nvcc_and_says_how_to_proceed(write_stack, capsys) -> None:
    path = seed(write_stack, DEEPSPEED, cuda='["11.8"]', nvcc="true")
    assert main(["check", str(path)]) == 3
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "toolchain.nvcc" in text and "no nvcc wheel" in text and "nvcc = false" in text and "devel" in text
    # without the wheels' nvcc (a base image that has one) the same flavour passes
    assert findings(seed(write_stack, DEEPSPEED, cuda='["11.8"]', nvcc="false")) == []


def test_check_names_the_ptxas_only_cuda_12_wheels(write_stack) -> None:
    stack = load_stack(seed(write_stack, DEEPSPEED, cuda='["12.4"]', nvcc="true"))
    (found,) = [f for f in check_stack(stack) if f.rule == "toolchain.nvcc"]
    assert "nvidia-cuda-nvcc-cu12 holds only ptxas" in found.message and "nvcc = false" in found.message
    assert rules.nvcc_refusal(rules.shipped_rules(), "13.0") is None  # CUDA 13's wheels hold nvcc


def test_aarch64_flavour_locks_to_aarch64_wheels_from_pypi(write_stack) -> None:
    path = seed(write_stack, 'numpy = "==2.2.6"\ntorch = "==2.5.1"', arch='["aarch64"]')
    manifest = lock_stack(path)
    (slug,) = manifest.flavours
    locked = manifest.flavours[slug]
    assert slug == "cpu-ubuntu2204-py311-release-aarch64" and locked.arch == "aarch64"
    assert locked.packages["torch"] == "2.5.1" and locked.packages["numpy"] == "2.2.6"
    # torch 2.5.1 requires triton and the nvidia-* CUDA wheels on x86_64 only
    assert "triton" not in locked.packages
    assert not [name for name in locked.packages if name.startswith("nvidia-")]
    text = (lock_dir(path) / locked.lock_file).read_text()
    assert "torch==2.5.1 \\" in text and "--hash=sha256:" in text


def test_compile_on_python_before_3_12_needs_setuptools_in_the_stack(write_stack, capsys) -> None:
    """A warning, not a refusal: the stack still builds; its compile smoke check would fail."""
    compile_smoke = '["imports", "compile"]'
    path = seed(write_stack, 'torch = "==2.5.1"', smoke=compile_smoke)
    assert main(["check", str(path), "--verbose"]) == 0
    captured = capsys.readouterr()
    assert "warning" in captured.out and "torch.compile" in captured.out and "add setuptools" in captured.out
    assert findings(seed(write_stack, 'torch = "==2.5.1"\nsetuptools = ">=70"', smoke=compile_smoke)) == []
    assert findings(seed(write_stack, 'torch = "==2.5.1"', smoke=compile_smoke, python="3.12")) == []
    assert findings(seed(write_stack, 'torch = "==2.5.1"')) == []  # no compile check asked for


def test_an_aarch64_flavour_is_built_as_an_image_for_arm64_not_as_a_venv_here(write_stack, capsys, tmp_path) -> None:
    import platform

    from trainstack.builder.oci import platform_option

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the refusal is for a machine other than the flavour's")
    path = seed(write_stack, 'numpy = "==2.2.6"', arch='["aarch64"]')
    lock_stack(path)
    capsys.readouterr()
    assert main(["build", str(path), "--build-dir", str(tmp_path / "build")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: flavour cpu-ubuntu2204-py311-release-aarch64 is for aarch64")
    assert "--backend oci" in err[0] and not (tmp_path / "build").exists()
    assert platform_option("aarch64") == ["--platform", "linux/arm64"] and platform_option("x86_64") == []
