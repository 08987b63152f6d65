"""What to ask uv for each flavour: requirements, indexes, platform, static metadata. Pure."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from trainstack import rules
from trainstack.errors import LockError
from trainstack.rules.nvcc import wheel_route
from trainstack.rules.toolchain import release_message, release_mismatches, toolkit_requirement
from trainstack.stackfile.compat import torch_version
from trainstack.stackfile.matrix import Flavour, components_for
from trainstack.stackfile.schema import Component, Stack


@dataclass(frozen=True)
class StaticMetadata:
    """Requires-Dist of a source build, handed to uv so it never builds it to find out."""

    name: str
    version: str
    requires_dist: tuple[str, ...]


@dataclass(frozen=True)
class Request:
    """One `uv pip compile` run. ``constrained`` layers are resolved with the full lock as constraints."""

    requirements: tuple[str, ...]
    python: str
    platform: str
    index_url: str | None
    extra_index_urls: tuple[str, ...]
    find_links: tuple[str, ...]
    metadata: tuple[StaticMetadata, ...] = ()
    prerelease: bool = False
    constrained: bool = False

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()

    @property
    def indexes(self) -> tuple[str, ...]:
        return ((self.index_url or "https://pypi.org/simple"),) + self.extra_index_urls


@dataclass(frozen=True)
class FlavourRequests:
    flavour: Flavour
    full: Request
    layers: dict[str, Request]  # "torch", "toolchain"
    variant_index: str | None  # the CUDA-variant index (None: PyPI serves it)
    sources: dict[str, Component] = field(default_factory=dict)  # git/path components, not resolved by uv

    def inputs_hash(self) -> str:
        parts = {
            "full": self.full.digest(),
            "layers": {name: req.digest() for name, req in sorted(self.layers.items())},
            "sources": {key: c.requirement() for key, c in sorted(self.sources.items())},
        }
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def flavour_requests(stack: Stack, flavour: Flavour) -> FlavourRequests:
    components = components_for(stack, flavour)
    variant = _variant_index(stack, flavour)
    base: dict[str, Any] = dict(
        python=flavour.python,
        platform=rules.python_platform(stack.rules_in_effect, flavour.os, flavour.arch),
        index_url=stack.index.url,
        extra_index_urls=tuple(stack.index.extra) + ((variant,) if variant else ()),
        find_links=tuple(stack.index.find_links),
        prerelease=flavour.channel == "nightly",
    )
    resolved = [c for c in components if c.git is None and c.path is None]
    sources = {c.key: c for c in components if c.git is not None or c.path is not None}
    extra_requires = [r for c in sources.values() for r in (c.requires or [])]
    full = Request(
        requirements=tuple(sorted(_line(c, flavour) for c in resolved)) + tuple(sorted(set(extra_requires))),
        metadata=tuple(_metadata(c) for c in resolved if c.requires is not None),
        **base,
    )
    layers = {}
    torch_group = [c for c in resolved if c.group == "torch"]
    if torch_group:
        layers["torch"] = Request(requirements=tuple(sorted(_line(c, flavour) for c in torch_group)), constrained=True, **base)
    toolchain = toolchain_requirements(stack, flavour)
    if toolchain:
        layers["toolchain"] = Request(requirements=tuple(sorted(toolchain)), constrained=True, **base)
    return FlavourRequests(flavour, full, layers, variant, sources)


def toolchain_requirements(stack: Stack, flavour: Flavour) -> list[str]:
    """The stack's build tools, and for a CUDA flavour whose release has an nvcc wheel, nvcc with
    every component it compiles with (crt, nvvm, cudart, cccl) from the flavour's CUDA release,
    through NVIDIA's metapackage that pins one release exactly. Resolved against the full lock,
    the release is torch's own. Other releases take nvcc from Debian's archive or the host
    (trainstack.rules.nvcc), not from wheels."""
    wanted = list(stack.toolchain.packages)
    if stack.toolchain.nvcc and flavour.cuda != "cpu" and wheel_route(stack.rules_in_effect, flavour.cuda) is not None:
        wanted.append(rules.nvcc_package(stack.rules_in_effect, flavour.cuda))
        toolkit = toolkit_requirement(flavour.cuda)
        if toolkit is not None:
            wanted.append(toolkit)
    return wanted


def require_one_release(flavour: Flavour, lock_file: str, pins: dict[str, str], where: str) -> None:
    """LockError when a resolved layer mixes CUDA releases (nvcc 13.0 with a crt of 13.5, say)."""
    if flavour.cuda == "cpu":
        return
    mixed = release_mismatches(flavour.cuda, pins)
    if mixed:
        raise LockError(f"{where}: flavour {flavour.slug}, {lock_file}: {release_message(flavour.cuda, mixed)}")


def stack_inputs_hash(stack: Stack, all_requests: list[FlavourRequests]) -> str:
    """What makes the lock: every flavour's requests; not verify, bench or the timestamp."""
    parts = {
        "stack": stack.stack.name,
        "flavours": {p.flavour.slug: p.inputs_hash() for p in sorted(all_requests, key=lambda p: p.flavour)},
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _variant_index(stack: Stack, flavour: Flavour) -> str | None:
    """PyTorch's index of the flavour's torch variant, as the stack reaches it ([index] pytorch)."""
    return stack.index.variant_index(_pytorch_index(stack, flavour))


def _pytorch_index(stack: Stack, flavour: Flavour) -> str | None:
    if flavour.channel == "nightly":
        has_torch = any(c.key == "torch" for c in components_for(stack, flavour))
        return rules.index_for(stack.rules_in_effect, "", flavour.cuda_tag, "nightly") if has_torch else None
    version = torch_version(stack, flavour)
    if version is not None and rules.vendor_local(version) is not None:
        return None  # a vendor's build ('+vendor1'): the stack's own indexes serve it, not PyTorch's
    return None if version is None else rules.index_for(stack.rules_in_effect, version, flavour.cuda_tag, flavour.channel, flavour.arch)


def _line(component: Component, flavour: Flavour) -> str:
    """The requirement line. Exact release pins of the torch family do not exist on the
    nightly index, so nightly flavours take whatever build the nightly index serves."""
    if flavour.channel == "nightly" and component.group == "torch" and component.pinned_version:
        extras = f"[{','.join(sorted(component.extras))}]" if component.extras else ""
        return f"{component.name}{extras}"
    return component.requirement()


def _metadata(component: Component) -> StaticMetadata:
    return StaticMetadata(component.key, component.pinned_version or "", tuple(component.requires or ()))
