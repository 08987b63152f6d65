"""The CUDA toolchain rule (data/toolchain.toml): one CUDA release for every compiler component,
the release of the flavour's torch, and GPU targets that release's nvcc can build. Pure."""

from __future__ import annotations

import re
import sys
from functools import cache
from importlib import resources

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from trainstack.rules.schema import Cited, Data, fill

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only: tomllib is in the standard library from 3.11
    import tomli as tomllib

ARCH_RE = re.compile(r"^\d{2,3}[af]?$")


class Release(Cited):
    metapackage: str
    extras: dict[str, list[str]]  # CUDA major -> extras of the metapackage
    components: dict[str, list[str]]  # CUDA major -> wheels whose version must be of the release


class ToolchainRules(Data):
    release: Release
    archs: Cited


@cache
def toolchain_rules() -> ToolchainRules:
    text = (resources.files("trainstack.rules") / "data" / "toolchain.toml").read_text(encoding="utf-8")
    return ToolchainRules.model_validate(tomllib.loads(text))


def toolkit_requirement(cuda: str) -> str | None:
    """'cuda-toolkit[cccl,crt,cudart,nvcc,nvvm]==13.0.*' for CUDA '13.0'; None for a major the rules don't know."""
    release = toolchain_rules().release
    extras = release.extras.get(cuda.split(".")[0])
    if extras is None:
        return None
    return f"{release.metapackage}[{','.join(sorted(extras))}]=={cuda}.*"


def release_mismatches(cuda: str, pins: dict[str, str]) -> list[str]:
    """'name==version' for each pinned CUDA component that is not of release ``cuda`` (major.minor)."""
    names = {canonicalize_name(n) for n in toolchain_rules().release.components.get(cuda.split(".")[0], [])}
    return [
        f"{name}=={version}"
        for name, version in sorted(pins.items())
        if canonicalize_name(name) in names and not _of_release(version, cuda)
    ]


def requirement_mismatches(cuda: str, lines: list[str]) -> list[str]:
    """The requirement lines (stack-given) that pin a CUDA component outside release ``cuda``."""
    names = {canonicalize_name(n) for majors in toolchain_rules().release.components.values() for n in majors}
    bad = []
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) not in names or not str(req.specifier):
            continue
        own_major = _component_major(req.name)
        if own_major is not None and own_major != cuda.split(".")[0]:
            bad.append(line)  # a CUDA 12 wheel for a CUDA 13 flavour, or the reverse
            continue
        if not _admits_release(req, cuda):
            bad.append(line)
    return bad


def release_message(cuda: str, found: list[str]) -> str:
    return fill(toolchain_rules().release.message, cuda=cuda, found=", ".join(found))


def bad_archs(archs: list[str], targetable: list[str]) -> list[str]:
    """Entries of toolchain.archs the release's nvcc cannot build ('90a' is judged by '90')."""
    return [a for a in archs if not ARCH_RE.match(a) or a.rstrip("af") not in targetable]


def _admits_release(req: Requirement, cuda: str) -> bool:
    """An exact pin must be of the release; a range must admit some version of it (sampled)."""
    exact = [spec.version for spec in req.specifier if spec.operator in ("==", "===") and "*" not in spec.version]
    if exact:
        return all(_of_release(version, cuda) for version in exact)
    return any(req.specifier.contains(f"{cuda}.{patch}", prereleases=True) for patch in (0, 9, 99, 999, 9999))


def _of_release(version: str, cuda: str) -> bool:
    try:
        release = Version(version).release
    except InvalidVersion:
        return False
    return ".".join(str(part) for part in release[:2]) == cuda


def _component_major(name: str) -> str | None:
    """'12' for nvidia-cuda-nvcc-cu12, '13' for nvidia-nvvm; None when the name fits several majors."""
    canon = canonicalize_name(name)
    majors = [m for m, names in toolchain_rules().release.components.items() if canon in map(canonicalize_name, names)]
    return majors[0] if len(majors) == 1 else None
