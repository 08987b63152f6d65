"""What render and build start from: the stack, its current lock manifest, the selected flavours."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainstack.errors import LockError
from trainstack.lock.layers import FlavourLayers, split_layers
from trainstack.lock.lock import check_lock_current, declared_indexes
from trainstack.lock.manifest import Manifest, lock_dir, manifest_path
from trainstack.lock.requests import flavour_requests
from trainstack.lock.tags import stack_image_refs
from trainstack.stackfile import Stack, load_stack, select_flavour


@dataclass(frozen=True)
class Inputs:
    stack_path: Path
    stack: Stack
    manifest: Manifest
    lock_dir: Path
    layers: list[FlavourLayers]

    @property
    def images(self) -> dict[str, str]:
        """slug -> registry/image:tag of each selected flavour, the tag from [stack] tag and the
        locked versions (load_inputs checked those of every flavour)."""
        return stack_image_refs(self.stack, {layers.flavour.slug: layers.locked for layers in self.layers}, self.stack_path)


def load_inputs(stack_path: Path, flavour: str | None = None) -> Inputs:
    """Load and validate; LockError when the lock is missing or no longer matches the stack."""
    stack = load_stack(stack_path)
    flavours = select_flavour(stack, flavour)
    manifest = check_lock_current(stack_path, flavour)
    directory = lock_dir(stack_path)
    layers = []
    for f in flavours:
        locked = manifest.flavours.get(f.slug)
        if locked is None:
            raise LockError(
                f"{manifest_path(stack_path)}: flavour {f.slug} is not in the lock",
                hint=f"run 'trainstack lock {stack_path}'",
            )
        layers.append(split_layers(stack, f, locked, directory, declared_indexes(flavour_requests(stack, f))))
    stack_image_refs(stack, manifest.flavours, stack_path)  # every flavour's tag made, none shared, before any work
    return Inputs(stack_path, stack, manifest, directory, layers)
