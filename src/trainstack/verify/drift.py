"""Lock versus installed: missing, different version, extra. Pure."""

from __future__ import annotations

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from trainstack.verify.report_schema import Drift, VersionChange

# seeded into every venv by its creator, never part of a stack's lock
TOOLING = frozenset({"pip", "setuptools", "wheel"})


def same_version(locked: str, installed: str) -> bool:
    """Equal versions; a local label ("+cu128") on one side only does not count as a change."""
    try:
        a, b = Version(locked), Version(installed)
    except InvalidVersion:
        return locked == installed
    if a == b:
        return True
    return (a.local is None or b.local is None) and a.public == b.public


def compute_drift(locked: dict[str, str], installed: dict[str, str], label: str, also: dict[str, str] | None = None) -> Drift:
    """``also``: what the stack installs beyond the lock's packages (its toolchain layer, its
    path and git components), {name: pinned version or ""}: never extra, never missing (an
    image keeps its toolchain in its compile stages), compared where both sides have a version."""
    lock = {canonicalize_name(k): v for k, v in locked.items()}
    have = {canonicalize_name(k): v for k, v in installed.items()}
    besides = {canonicalize_name(k): v for k, v in (also or {}).items() if canonicalize_name(k) not in lock}
    pinned = {**lock, **{k: v for k, v in besides.items() if v}}
    return Drift(
        lock=label,
        missing=sorted(set(lock) - set(have)),
        different=[
            VersionChange(name=name, locked=pinned[name], installed=have[name])
            for name in sorted(set(pinned) & set(have))
            if not same_version(pinned[name], have[name])
        ],
        extra=sorted(set(have) - set(lock) - set(besides) - TOOLING),
    )
