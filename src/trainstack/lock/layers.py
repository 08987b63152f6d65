"""Split a flavour's lock into the files its image layers install, least to most often changed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainstack.errors import LockError
from trainstack.lock.lockfile import LockFile, parse_lock
from trainstack.lock.manifest import DeclaredIndexes, LockedFlavour, read_lock_text
from trainstack.stackfile.matrix import Flavour, components_for
from trainstack.stackfile.schema import Component, Stack

TORCH_FAMILY = frozenset({"torch", "torchvision", "torchaudio", "triton", "pytorch-triton", "numpy"})


@dataclass(frozen=True)
class SourceBuild:
    component: Component
    entry_text: str  # the lock line(s): "name==ver --hash ..." for an sdist, "name @ git+URL@SHA" for git


@dataclass(frozen=True)
class FlavourLayers:
    flavour: Flavour
    locked: LockedFlavour
    full: LockFile
    torch: LockFile  # the torch layer
    extras: LockFile  # everything else that installs from wheels
    toolchain: LockFile  # ninja, cmake, nvcc wheels for the compile stages
    sources: tuple[SourceBuild, ...]  # built from source, in stack order


def needs_build(component: Component) -> bool:
    """Built by trainstack (with its build env and job budget) rather than installed from a wheel."""
    return component.is_source_build or bool(component.build_env)


def read_layer_lock(lock_dir: Path, relative: str, what: str, direct: frozenset[str], indexes: DeclaredIndexes) -> LockFile:
    path = lock_dir / relative
    try:  # a committed lock folder is input like the stack: every line checked before use
        return parse_lock(read_lock_text(lock_dir, relative, direct, indexes))
    except FileNotFoundError:
        raise LockError(f"{path}: {what} lock file is missing", hint="run 'trainstack lock STACK' again") from None


def split_layers(stack: Stack, flavour: Flavour, locked: LockedFlavour, lock_dir: Path, indexes: DeclaredIndexes) -> FlavourLayers:
    """The flavour's lock files read (every line checked, each index option one of ``indexes``)
    and split into the layers an image installs."""
    components = components_for(stack, flavour)
    source_comps = [c for c in components if needs_build(c)]
    source_keys = {c.key for c in source_comps}
    direct = frozenset(c.key for c in source_comps if c.git is not None or c.path is not None)
    full = read_layer_lock(lock_dir, locked.lock_file, f"flavour {flavour.slug}", direct, indexes)
    if "torch" in locked.layers:
        torch = read_layer_lock(lock_dir, locked.layers["torch"], "torch layer", direct, indexes).without(source_keys)
    else:
        group = {c.key for c in components if c.group == "torch"} | TORCH_FAMILY
        torch = full.only(group - source_keys)
    if "toolchain" in locked.layers:
        toolchain = read_layer_lock(lock_dir, locked.layers["toolchain"], "toolchain layer", direct, indexes)
    else:
        toolchain = LockFile(full.options, ())
    extras = full.without(torch.names() | source_keys)
    sources = tuple(_source(c, full, locked) for c in source_comps)
    return FlavourLayers(flavour, locked, full, torch, extras, toolchain, sources)


def _source(component: Component, full: LockFile, locked: LockedFlavour) -> SourceBuild:
    entry = full.get(component.key)
    if entry is not None:
        return SourceBuild(component, entry.text)
    if component.key in locked.sources:
        return SourceBuild(component, f"{component.name} @ {locked.sources[component.key]}\n")
    return SourceBuild(component, component.requirement() + "\n")
