"""Where a stack's flavour lives on disk: its built venv, build.json, lock packages, verify.json
(and verify.partial.json, a verify with parts skipped)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainstack.errors import NotBuiltError, UsageError
from trainstack.lock.manifest import load_manifest, manifest_path
from trainstack.stackfile import Flavour, Stack, load_stack, select_flavour
from trainstack.stackfile.matrix import components_for


@dataclass(frozen=True)
class BuiltFlavour:
    stack_path: Path
    stack: Stack
    flavour: Flavour
    build_dir: Path  # BUILD_DIR/<slug>

    @property
    def python(self) -> Path:
        return self.build_dir / "venv" / "bin" / "python"

    @property
    def record(self) -> Path:
        return self.build_dir / "build.json"

    @property
    def verify_json(self) -> Path:
        return self.build_dir / "verify.json"

    @property
    def partial_verify_json(self) -> Path:
        """Where a verify with parts skipped goes: beside the full gate's verify.json, never over it."""
        return self.build_dir / "verify.partial.json"

    def components(self) -> list[str]:
        return [c.key for c in components_for(self.stack, self.flavour)]

    def locked(self) -> tuple[str, dict[str, str]] | None:
        return locked_packages(self.stack_path, self.flavour.slug)


def locked_packages(stack_path: Path, slug: str) -> tuple[str, dict[str, str]] | None:
    """(label, packages) of a flavour in the stack's lock manifest, if it was locked."""
    path = manifest_path(stack_path)
    if not path.is_file():
        return None
    entry = load_manifest(path).flavours.get(slug)
    return (f"{path} [{slug}]", entry.packages) if entry else None


def lock_inputs_hash(stack_path: Path) -> str | None:
    """The inputs hash of the stack's lock manifest, which a verify result records so that the
    release notes take it only for the lock it verified; None when the stack is not locked."""
    path = manifest_path(stack_path)
    return load_manifest(path).inputs_hash if path.is_file() else None


def built_flavour(stack_path: Path, flavour: str | None, build_dir: Path) -> BuiltFlavour:
    stack = load_stack(stack_path)
    flavours = select_flavour(stack, flavour)
    if len(flavours) != 1:
        slugs = ", ".join(f.slug for f in flavours)
        raise UsageError(f"{stack_path}: stack has {len(flavours)} flavours; choose one with --flavour", hint=slugs)
    chosen = flavours[0]
    where = build_dir / chosen.slug
    if not (where / "venv" / "bin" / "python").exists():
        raise NotBuiltError(
            f"{where / 'venv'}: flavour {chosen.slug} is not built",
            hint=f"run 'trainstack build {stack_path} --flavour {chosen.slug}' first",
        )
    return BuiltFlavour(stack_path, stack, chosen, where)
