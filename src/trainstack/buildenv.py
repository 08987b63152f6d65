"""The environment a flavour's compile steps get, the same for an image's Dockerfile and a venv
build: the compiler cache's variables, the GPU targets as each package's variable and nvcc's
flags, and the job budget of each package. Pure, but for looking the cache program up on PATH."""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

from packaging.utils import canonicalize_name

from trainstack.errors import SpecError
from trainstack.rules import Rules, cuda_archs
from trainstack.stackfile.paths import stack_path
from trainstack.stackfile.schema import CompilerCache, Component, JobBudget

# Compiling these packages needs far more memory per job than CPUs per job, hence the divisors.
DEFAULT_BUDGETS: dict[str, JobBudget] = {
    "torch": JobBudget(divisor=3, cap=32),
    "torchvision": JobBudget(divisor=3, cap=32),
    "torchaudio": JobBudget(divisor=3, cap=32),
    "triton": JobBudget(divisor=3, cap=32),
    "pytorch-triton": JobBudget(divisor=3, cap=32),
    "flash-attn": JobBudget(divisor=8, cap=12),
    "deepspeed": JobBudget(divisor=4, cap=24),
    "apex": JobBudget(divisor=8, cap=24),
}
FALLBACK_BUDGET = JobBudget(divisor=1, cap=64)
_LAUNCHERS = ("CMAKE_C_COMPILER_LAUNCHER", "CMAKE_CXX_COMPILER_LAUNCHER", "CMAKE_CUDA_COMPILER_LAUNCHER")


def cache_dir(settings: CompilerCache, base: Path, stack_folder: Path | None = None) -> Path | None:
    """Absolute cache directory, None when disabled: a relative setting is taken from ``base``
    (the build directory); with ``stack_folder`` (the setting is the stack's) any other leads only
    where the stack path rule lets it, inside the stack's folder or the user's ~/.cache."""
    if settings.kind == "none":
        return None
    if stack_folder is None:  # trainstack's own setting (the image's cache mount)
        path = Path(settings.dir)
    else:
        try:
            path = stack_path(settings.dir, stack_folder, "build.compiler_cache.dir")
        except ValueError as exc:
            raise SpecError(f"build.compiler_cache.dir: {exc}") from None
    return path if path.is_absolute() else base / path


def compiler_cache_env(
    settings: CompilerCache, base: Path, *, launcher: bool | None = None, stack_folder: Path | None = None
) -> dict[str, str]:
    """Where the cache lives and how large it may grow; CMake launchers only when the program
    is there (``launcher=None``: look it up on PATH), since CMake fails on a missing launcher."""
    directory = cache_dir(settings, base, stack_folder)
    if directory is None:
        return {}
    if settings.kind == "sccache":
        env = {"SCCACHE_DIR": str(directory), "SCCACHE_CACHE_SIZE": settings.max_size}
    else:
        # CCACHE_CONFIGPATH: ccache reads no ccache.conf from the cache folder, which a build folder
        # brings (its prefix_command or compiler_check would run what it names at every compile)
        env = {"CCACHE_DIR": str(directory), "CCACHE_MAXSIZE": settings.max_size, "CCACHE_CONFIGPATH": os.devnull}
    if launcher is None:
        launcher = shutil.which(settings.kind) is not None
    if launcher:
        env.update({name: settings.kind for name in _LAUNCHERS})
    return env


def missing_compiler_cache(settings: CompilerCache) -> str | None:
    """One line when the stack asks for a compiler cache this machine does not have (not on
    PATH): the compiles then run without one, which a build says rather than leaving silent."""
    if settings.kind == "none" or shutil.which(settings.kind) is not None:
        return None
    return (
        f"build.compiler_cache asks for {settings.kind}, which is not installed here (not on PATH): "
        f'the compiles run without a cache; install {settings.kind}, or set compiler_cache = {{ kind = "none" }}'
    )


def torch_arch_list(archs: list[str]) -> str:
    """['90', '100a'] -> '9.0;10.0a' (TORCH_CUDA_ARCH_LIST, read by DeepSpeed, apex and torch)."""
    parts = []
    for arch in archs:
        base, suffix = arch.rstrip("af"), arch[len(arch.rstrip("af")) :]
        parts.append(f"{base[:-1]}.{base[-1]}{suffix}")
    return ";".join(parts)


def arch_env(archs: list[str]) -> dict[str, str]:
    """The stack's GPU targets as each package's variable; {} leaves the packages' defaults."""
    if not archs:
        return {}
    return {"TORCH_CUDA_ARCH_LIST": torch_arch_list(archs), "FLASH_ATTN_CUDA_ARCHS": ";".join(a.rstrip("f") for a in archs)}


def nvcc_arch_flags(arch: str) -> list[str]:
    """'90' -> -arch=sm_90; '90a' -> the -gencode form, which assembles arch-specific targets alone."""
    if arch[-1] in "af":
        return [f"-gencode=arch=compute_{arch},code=sm_{arch}"]
    return [f"-arch=sm_{arch}"]


def probe_arch(rules: Rules, archs: list[str], cuda: str) -> str:
    """The first GPU target of the stack, else the oldest one the release's nvcc builds."""
    return archs[0] if archs else cuda_archs(rules, cuda)[0]


def budget_for(component: Component) -> JobBudget:
    """The component's own ``jobs`` setting, else the table's row for its package, else 1/1 capped at 64."""
    if component.jobs is not None:
        return component.jobs
    return DEFAULT_BUDGETS.get(canonicalize_name(component.name), FALLBACK_BUDGET)


def max_jobs(cpus: float, budget: JobBudget) -> int:
    return max(1, min(budget.cap, math.floor(cpus / budget.divisor)))
