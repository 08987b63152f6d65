"""Load the rules data files shipped in the package and answer questions about them."""

from __future__ import annotations

import re
import sys
from functools import cache
from importlib import resources
from typing import Any

from packaging.version import InvalidVersion, Version

from trainstack.errors import RuleViolation
from trainstack.rules.schema import Rules, fill

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only: tomllib is in the standard library from 3.11
    import tomli as tomllib

FILES = ("torch", "cuda", "platforms", "extensions")


@cache
def shipped_data() -> dict[str, Any]:
    """The rules data files as parsed TOML (cached: the files ship read-only)."""
    folder = resources.files("trainstack.rules") / "data"
    return {name: tomllib.loads((folder / f"{name}.toml").read_text(encoding="utf-8")) for name in FILES}


@cache
def shipped_rules() -> Rules:
    return Rules.model_validate(shipped_data())


def merged_rules(extra: dict[str, Any]) -> Rules:
    """The shipped data with ``extra`` (same layout: torch, cuda, platforms, extensions tables)
    merged over it, table by table; validated like the shipped files (ValidationError)."""
    return Rules.model_validate(_merge(shipped_data(), extra))


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def torch_minor(torch_version: str) -> str:
    """'2.11.0' or '2.11.0+cu130' or '2.11' -> '2.11'."""
    try:
        release = Version(torch_version).release
    except InvalidVersion:
        raise RuleViolation(f"torch version '{torch_version}' is not a version (try '2.11.0')") from None
    return f"{release[0]}.{release[1] if len(release) > 1 else 0}"


def _release(rules: Rules, torch_version: str):
    torch = rules.torch
    minor = torch_minor(torch_version)
    if minor not in torch.releases:
        known = ", ".join(torch.releases)
        raise RuleViolation(f"torch {minor} is not in the rules data (known: {known})", hint=torch.index.source)
    return torch.releases[minor]


def cuda_variants(rules: Rules, torch_version: str) -> list[str]:
    """Variant tags ('cpu', 'cu128', ...) the PyTorch release publishes wheels for."""
    return list(_release(rules, torch_version).variants)


def pypi_default_variant(rules: Rules, torch_version: str) -> str:
    return _release(rules, torch_version).pypi_default


def torch_pythons(rules: Rules, torch_version: str) -> list[str]:
    return list(_release(rules, torch_version).pythons)


# the local labels of PyTorch's own wheel variants ('2.5.1+cu124'); any other marks a vendor's build
TORCH_VARIANT_LOCAL = re.compile(r"^(cpu|cu[0-9]+|rocm[0-9]+(\.[0-9]+)*|xpu)\Z")


def vendor_local(version: str) -> str | None:
    """What marks a vendor's build of torch, which PyTorch's indexes do not serve: its local label
    ('vendor1' of '2.5.1+vendor1') or a fourth release number ('2.5.1.6'); None for PyTorch's own
    releases and variants ('2.5.1', '2.5.1+cu124') and a version that does not parse."""
    try:
        parsed = Version(version)
    except InvalidVersion:
        return None
    if parsed.local is not None and not TORCH_VARIANT_LOCAL.fullmatch(parsed.local):
        return parsed.local
    return ".".join(str(part) for part in parsed.release) if len(parsed.release) > 3 else None


def index_for(rules: Rules, torch_version: str, cuda_tag: str, channel: str, arch: str = "x86_64") -> str | None:
    """The index serving that torch variant for ``arch``; None when PyPI (the default index) serves it."""
    index = rules.torch.index
    if channel == "nightly":
        return fill(index.nightly, variant=cuda_tag)
    release = _release(rules, torch_version)
    if cuda_tag not in release.variants:
        raise RuleViolation(
            f"torch {torch_minor(torch_version)} has no '{cuda_tag}' wheels (variants: {', '.join(release.variants)})",
            hint=release.source,
        )
    pypi = release.pypi_default
    machine = rules.torch.arch.get(arch)
    if machine is not None:
        missing = arch_cuda_missing(rules, torch_version, cuda_tag, arch)
        if missing:
            raise RuleViolation(missing, hint=machine.source)
        if machine.pypi_default is not None:
            pypi = machine.pypi_default
    return None if cuda_tag == pypi else fill(index.release, variant=cuda_tag)


def arch_cuda_missing(rules: Rules, torch_version: str, cuda_tag: str, arch: str) -> str | None:
    """Why torch ``torch_version`` has no ``cuda_tag`` build for ``arch``; None when it has one
    (or the rules say nothing about that arch)."""
    machine = rules.torch.arch.get(arch)
    if machine is None or cuda_tag == "cpu" or machine.cuda_from is None:
        return None
    minor = torch_minor(torch_version)
    if Version(minor) >= Version(machine.cuda_from):
        return None
    return f"torch {minor} has no {arch} {cuda_tag} wheels ({fill(machine.message, minor=machine.cuda_from)})"


def _cuda(rules: Rules, cuda: str):
    known = rules.cuda
    if cuda not in known.versions:
        raise RuleViolation(f"CUDA {cuda} is not in the rules data (known: {', '.join(known.versions)})", hint=known.driver.source)
    return known.versions[cuda]


def min_driver(rules: Rules, cuda: str) -> str:
    """Oldest Linux driver that runs CUDA ``cuda`` ('12.8' -> '570.26')."""
    return _cuda(rules, cuda).driver


def cuda_archs(rules: Rules, cuda: str) -> list[str]:
    """SM architectures nvcc of CUDA ``cuda`` can target, as '80', '90', '100'."""
    return list(_cuda(rules, cuda).archs)


def nvcc_package(rules: Rules, cuda: str) -> str:
    """The PyPI requirement for the nvcc matching ``cuda``: 'nvidia-cuda-nvcc==13.0.*'."""
    nvcc = rules.cuda.nvcc
    major = cuda.split(".")[0]
    if major not in nvcc.packages:
        raise RuleViolation(f"no nvcc wheel is known for CUDA {major} (known: {', '.join(nvcc.packages)})")
    return f"{nvcc.packages[major]}=={cuda}.*"


def python_platform(rules: Rules, os_name: str, arch: str = "x86_64") -> str:
    """uv's --python-platform for an OS and machine arch of the matrix: the OS's platform
    ('x86_64-manylinux_2_35') with its machine part replaced ('aarch64-manylinux_2_35')."""
    platforms = rules.platforms
    if os_name not in platforms.os:
        raise RuleViolation(f"OS '{os_name}' is not in the rules data (known: {', '.join(platforms.os)})", hint=platforms.glibc.source)
    platform = platforms.os[os_name].platform
    if arch == "x86_64" or not platform.startswith("x86_64-"):
        return platform
    return f"{arch}-{platform.removeprefix('x86_64-')}"


def nvcc_unusable(rules: Rules, cuda: str) -> str | None:
    """Why the nvcc wheels hold no compiler for CUDA ``cuda``; None when they do."""
    nvcc = rules.cuda.nvcc
    major = cuda.split(".")[0]
    if major not in nvcc.packages:
        return f"no nvcc wheel is known for CUDA {major}; known: CUDA {', '.join(nvcc.packages)}"
    if nvcc.compiles is not None and major not in nvcc.compiles:
        return f"{nvcc.packages[major]} holds only ptxas, not nvcc"
    return None


def nvcc_refusal(rules: Rules, cuda: str) -> str | None:
    """Why the nvcc wheels cannot compile extensions for CUDA ``cuda``, with what to do; None when they can."""
    why = nvcc_unusable(rules, cuda)
    return None if why is None else fill(rules.cuda.nvcc.refusal, cuda=cuda, why=why)


def os_pythons(rules: Rules, os_name: str) -> list[str]:
    """Python versions the OS's own archive packages (pythonX.Y); [] when the rules don't know."""
    platform = rules.platforms.os.get(os_name)
    return list(platform.pythons) if platform else []
