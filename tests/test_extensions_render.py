"""The rendered image builds extensions as the venv backend does: uv installs every layer, each
compile stage links a CUDA home out of the locked toolchain wheels, compiles a one-line kernel
for the stack's first GPU target before the extension, and hands the targets to each package."""

from __future__ import annotations

import re
from pathlib import Path

from tests.build_fixtures import copy_example, hadolint_errors, make_lock
from trainstack.cli import main

SLUG = "cu130-ubuntu2404-py311-release"


def test_compile_stages_probe_the_toolchain_and_get_the_gpu_targets(tmp_path: Path) -> None:
    stack = copy_example("torch-cuda", tmp_path, {r'packages = \["ninja", "cmake"\]': 'packages = ["ninja", "cmake"]\narchs = ["90a", "100"]'})
    make_lock(stack, SLUG)
    out = tmp_path / "render"
    assert main(["render", str(stack), "--flavour", SLUG, "--out", str(out)]) == 0
    dockerfile = out / SLUG / "Dockerfile"
    text = dockerfile.read_text()
    assert hadolint_errors(dockerfile) == []
    assert not re.search(r"^\s*pip (install|wheel)", text, re.M)  # installs go through uv
    assert re.search(r"^    /opt/uv/bin/uv pip install --no-deps --require-hashes --no-cache --python /opt/venv/bin/python -r /opt/trainstack/locks/torch.txt$", text, re.M)
    compile_ds = text.split("AS compile-deepspeed", 1)[1].split("\nFROM ", 1)[0]
    probe = compile_ds.index("/opt/cuda/bin/nvcc -gencode=arch=compute_90a,code=sm_90a -c /tmp/probe.cu")
    assert probe < compile_ds.index("uv build --wheel --no-build-isolation")
    assert "TORCH_CUDA_ARCH_LIST='9.0a;10.0'" in compile_ds and "FLASH_ATTN_CUDA_ARCHS='90a;100'" in compile_ds
    assert "CUDA_HOME=/opt/cuda" in compile_ds and "DS_ACCELERATOR=cuda" in compile_ds
    assert "PYTORCH_NVCC='ccache /opt/cuda/bin/nvcc'" in compile_ds
    final = text.split("FROM extras AS final", 1)[1]
    assert "/opt/uv/bin/uv pip install --no-deps --no-cache --python /opt/venv/bin/python /tmp/wheels/deepspeed/*.whl" in final
