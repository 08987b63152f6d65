"""Load the rules data files shipped in the package and answer questions about them."""

from __future__ import annotations

import sys
from functools import cache
from importlib import resources
from typing import Any

from packaging.version import InvalidVersion, Version

from trainstack.errors import RuleViolation
from trainstack.rules.models import Rules, fill

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
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


def index_for(rules: Rules, torch_version: str, cuda_tag: str, channel: str) -> str | None:
    """The index serving that torch variant; None when PyPI (the default index) serves it."""
    index = rules.torch.index
    if channel == "nightly":
        return fill(index.nightly, variant=cuda_tag)
    release = _release(rules, torch_version)
    if cuda_tag not in release.variants:
        raise RuleViolation(
            f"torch {torch_minor(torch_version)} has no '{cuda_tag}' wheels (variants: {', '.join(release.variants)})",
            hint=release.source,
        )
    return None if cuda_tag == release.pypi_default else fill(index.release, variant=cuda_tag)


def _cuda(rules: Rules, cuda: str):
    known = rules.cuda
    if cuda not in known.versions:
        raise RuleViolation(
            f"CUDA {cuda} is not in the rules data (known: {', '.join(known.versions)})", hint=known.driver.source
        )
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


def python_platform(rules: Rules, os_name: str) -> str:
    """uv's --python-platform for an OS of the matrix."""
    platforms = rules.platforms
    if os_name not in platforms.os:
        raise RuleViolation(
            f"OS '{os_name}' is not in the rules data (known: {', '.join(platforms.os)})", hint=platforms.glibc.source
        )
    return platforms.os[os_name].platform


def os_pythons(rules: Rules, os_name: str) -> list[str]:
    """Python versions the OS's own archive packages (pythonX.Y); [] when the rules don't know."""
    platform = rules.platforms.os.get(os_name)
    return list(platform.pythons) if platform else []
