"""The host's nvcc for venv builds (the edge: it runs nvcc --version through trainstack.proc).

Found the way torch.utils.cpp_extension finds it: $CUDA_HOME/bin/nvcc when CUDA_HOME is set,
else nvcc on PATH (its CUDA home the folder above its bin/, links resolved)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from trainstack import proc
from trainstack.rules.nvcc import HostNvcc

# 'Cuda compilation tools, release 12.4, V12.4.131'
_RELEASE = re.compile(r"\brelease ([0-9]{1,2}\.[0-9]{1,2})\b")
TIMEOUT_S = 30.0


def find_host_nvcc(env: Mapping[str, str] | None = None) -> HostNvcc:
    env = os.environ if env is None else env
    home = env.get("CUDA_HOME", "")
    if home:
        program = Path(home) / "bin" / "nvcc"
        if not (program.is_file() and os.access(program, os.X_OK)):
            return HostNvcc("CUDA_HOME", problem=f"no nvcc at CUDA_HOME/bin/nvcc (CUDA_HOME={home})")
        return _versioned(HostNvcc("CUDA_HOME", str(program), home))
    found = shutil.which("nvcc", path=env.get("PATH", ""))
    if found is None:
        return HostNvcc("PATH", problem="no nvcc on PATH and CUDA_HOME unset")
    return _versioned(HostNvcc("PATH", found, str(Path(found).resolve().parent.parent)))


def _versioned(found: HostNvcc) -> HostNvcc:
    try:
        result = proc.run([str(found.nvcc), "--version"], echo=False, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return HostNvcc(found.found_by, found.nvcc, found.home, None, f"nvcc --version: {type(exc).__name__}")
    match = _RELEASE.search(result.stdout) if result.ok else None
    if match is None:
        return HostNvcc(found.found_by, found.nvcc, found.home, None, f"nvcc --version exited {result.returncode}")
    return HostNvcc(found.found_by, found.nvcc, found.home, match.group(1))
