"""A real lock of one torch-cuda flavour that PyPI serves (reads wheel metadata, not wheels),
and the planning of the flavours whose index this machine cannot reach."""

from __future__ import annotations

import pytest

from trainstack.lock import lock_dir, lock_stack, parse_pins
from trainstack.lock.requests import flavour_requests
from trainstack.stackfile import Flavour, load_stack

from .conftest import EXAMPLES

PYPI_FLAVOUR = "cu130-ubuntu2404-py312-release"


def test_plans_pick_the_variant_index_from_the_rules() -> None:
    stack = load_stack(EXAMPLES / "torch-cuda.toml")
    cu130 = flavour_requests(stack, Flavour("13.0", "ubuntu24.04", "3.12", "release"))
    cu128 = flavour_requests(stack, Flavour("12.8", "ubuntu22.04", "3.11", "release"))
    nightly = flavour_requests(stack, Flavour("12.8", "ubuntu24.04", "3.12", "nightly"))
    assert cu130.variant_index is None
    assert cu128.variant_index == "https://download.pytorch.org/whl/cu128"
    assert cu128.full.extra_index_urls == ("https://download.pytorch.org/whl/cu128",)
    assert cu128.full.platform == "x86_64-manylinux_2_35" and cu128.full.python == "3.11"
    assert nightly.variant_index == "https://download.pytorch.org/whl/nightly/cu128"
    assert nightly.full.prerelease and "torch" in nightly.full.requirements
    assert not any(r.startswith("triton") for r in nightly.full.requirements)
    # CUDA 12's nvcc wheels hold only ptxas: the cu128 toolchain layer locks no CUDA wheel at all
    assert not [r for r in cu128.layers["toolchain"].requirements if r.startswith(("nvidia-", "cuda-toolkit"))]
    assert "nvidia-cuda-nvcc==13.0.*" in cu130.layers["toolchain"].requirements
    assert [m.name for m in cu130.full.metadata] == ["deepspeed", "flash-attn"]
    assert "apex" in cu130.sources and "packaging>20.6" in cu130.full.requirements
    assert cu128.inputs_hash() != cu130.inputs_hash()


@pytest.mark.slow
def test_real_lock_of_one_torch_cuda_flavour(example_stack) -> None:
    stack = example_stack("torch-cuda")
    manifest = lock_stack(stack, flavour=PYPI_FLAVOUR)
    assert list(manifest.flavours) == [PYPI_FLAVOUR]
    locked = manifest.flavours[PYPI_FLAVOUR]
    pins = locked.packages
    assert pins["torch"] == "2.11.0" and pins["torchvision"] == "0.26.0" and pins["triton"] == "3.6.0"
    assert pins["deepspeed"] == "0.18.9" and pins["flash-attn"] == "2.8.3"
    assert pins["nvidia-cuda-runtime"].startswith("13.0.")  # PyPI's torch 2.11 is the cu130 build
    assert locked.index is None
    assert locked.sources == {"apex": "git+https://github.com/NVIDIA/apex@a19fe0e5090a5d3f57a5e854286e89a2a2729f47"}
    root = lock_dir(stack)
    torch_layer = parse_pins((root / locked.layers["torch"]).read_text())
    assert {"torch", "torchvision", "torchaudio", "triton", "numpy"} <= torch_layer.keys()
    assert "deepspeed" not in torch_layer and "transformers" not in torch_layer
    assert all(pins[name] == version for name, version in torch_layer.items())  # the layer agrees with the lock
    toolchain = parse_pins((root / locked.layers["toolchain"]).read_text())
    assert toolchain["nvidia-cuda-nvcc"].startswith("13.0.") and toolchain["ninja"] == pins["ninja"]
    assert "cmake" in toolchain
