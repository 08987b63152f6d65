"""Where a stack's flavour lives on disk: its built venv, build.json, lock packages, verify.json
(and verify.partial.json, a verify with parts skipped)."""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from trainstack.console import err
from trainstack.errors import NotBuiltError, UsageError
from trainstack.lock.lockfile import parse_lock
from trainstack.lock.manifest import load_manifest, lock_dir, manifest_path, read_lock_text
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

    def also_installed(self) -> dict[str, str]:
        return stack_installs(self.stack_path, self.stack, self.flavour.slug)


def locked_packages(stack_path: Path, slug: str) -> tuple[str, dict[str, str]] | None:
    """(label, packages) of a flavour in the stack's lock manifest, if it was locked."""
    path = manifest_path(stack_path)
    if not path.is_file():
        return None
    entry = load_manifest(path).flavours.get(slug)
    return (f"{path} [{slug}]", entry.packages) if entry else None


def stack_installs(stack_path: Path, stack: Stack, slug: str) -> dict[str, str]:
    """What the stack installs beyond its flavour's locked packages, {name: version or ""}: the
    toolchain layer's pins (in a venv build's environment, only in an image's compile stages) and
    the components built from a path or other source. Never extra; never missing."""
    path = manifest_path(stack_path)
    entry = load_manifest(path).flavours.get(slug) if path.is_file() else None
    if entry is None:
        return {}
    found: dict[str, str] = {canonicalize_name(c.name): "" for c in stack.components.values() if c.path is not None or c.git is not None}
    found.update({name: "" for name in entry.sources})
    relative = entry.layers.get("toolchain")
    if relative:
        with suppress(FileNotFoundError):  # verify's report names the lock it compared; a missing layer file is lock's to refuse
            found.update({e.name: e.version or "" for e in parse_lock(read_lock_text(lock_dir(stack_path), relative)).entries})
    return found


def lock_inputs_hash(stack_path: Path) -> str | None:
    """The inputs hash of the stack's lock manifest, which a verify result records so that the
    release notes take it only for the lock it verified; None when the stack is not locked."""
    path = manifest_path(stack_path)
    return load_manifest(path).inputs_hash if path.is_file() else None


def _the_one_built(stack_path: Path, flavours: list[Flavour], build_dir: Path) -> list[Flavour]:
    """Of a stack's several flavours, given no --flavour: the one built under ``build_dir`` (a
    machine builds what it can: [build] venv_flavours); UsageError when none or several are."""
    built = [f for f in flavours if (build_dir / f.slug / "venv" / "bin" / "python").exists()]
    if len(built) == 1:
        err.print(f"{built[0].slug}: the one flavour built under {build_dir}", highlight=False)
        return built
    slugs = ", ".join(f.slug for f in (built or flavours))
    what = f"{len(built)} of them are built" if built else "none is built"
    raise UsageError(
        f"{stack_path}: stack has {len(flavours)} flavours and {what} under {build_dir}; choose one with --flavour", hint=slugs
    )


def built_flavour(stack_path: Path, flavour: str | None, build_dir: Path) -> BuiltFlavour:
    stack = load_stack(stack_path)
    flavours = select_flavour(stack, flavour)
    if len(flavours) != 1:
        flavours = _the_one_built(stack_path, flavours, build_dir)
    chosen = flavours[0]
    where = build_dir / chosen.slug
    if not (where / "venv" / "bin" / "python").exists():
        raise NotBuiltError(
            f"{where / 'venv'}: flavour {chosen.slug} is not built",
            hint=f"run 'trainstack build {stack_path} --flavour {chosen.slug}' first",
        )
    return BuiltFlavour(stack_path, stack, chosen, where)
