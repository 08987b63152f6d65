"""Two releases of a two-flavour stack (a release and a nightly channel) as lock manifests made in
code: torch, numpy and an apex commit moved, a package added and one removed."""

from __future__ import annotations

import hashlib

from trainstack.lock.manifest import LockedFlavour, Manifest

APEX_OLD = "git+https://github.com/NVIDIA/apex@2386a912164b0c5cfcd8be7a2b890fbac5607c82"
APEX_NEW = "git+https://github.com/NVIDIA/apex@a7de60e57f2e0b1c0e2d3c4e5f6a7b8c9d0e1f2a"
R128 = "cu128-ubuntu2404-py312-release"
N128 = "cu128-ubuntu2404-py312-nightly"


def flavour(packages: dict[str, str], sources: dict[str, str] | None = None, *, cuda: str = "12.8",
            channel: str = "release", slug: str = R128) -> LockedFlavour:
    return LockedFlavour(
        cuda=cuda, os="ubuntu24.04", python="3.12", channel=channel, lock_file=f"locks/{slug}.txt",
        lock_sha256="0" * 64, index=None, cache_key=f"ml/torch-{slug}-0123456789ab",
        packages=packages, sources=sources or {},
    )


def manifest(release: str, flavours: dict[str, LockedFlavour], stack: str = "torch-cuda") -> Manifest:
    return Manifest(stack=stack, release=release, image="registry.example.com/ml/torch", inputs_hash=hashlib.sha256(release.encode()).hexdigest(),
                    uv_version="0.9.0", generated_at="2026-12-01T00:00:00Z", flavours=flavours)


def two_releases() -> tuple[Manifest, Manifest]:
    old = manifest("2026.11.0", {
        R128: flavour({"torch": "2.10.0", "apex": "0.1", "numpy": "2.2.6", "filelock": "3.18.0"}, {"apex": APEX_OLD}),
        N128: flavour({"torch": "2.11.0.dev20261101", "apex": "0.1", "numpy": "2.2.6", "triton": "3.5.0"},
                      {"apex": APEX_OLD}, channel="nightly", slug=N128),
    })
    new = manifest("2026.12.0", {
        R128: flavour({"torch": "2.11.0", "apex": "0.1", "numpy": "2.3.5", "einops": "0.8.1"}, {"apex": APEX_NEW}),
        N128: flavour({"torch": "2.12.0.dev20261201", "apex": "0.1", "numpy": "2.3.5"},
                      {"apex": APEX_NEW}, channel="nightly", slug=N128),
    })
    return old, new


COMPONENTS = ["torch", "apex", "numpy", "triton"]
