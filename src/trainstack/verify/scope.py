"""From the command line's choices to a Target and a Scope: a built flavour, or any Python."""

from __future__ import annotations

from pathlib import Path

from trainstack.errors import UsageError
from trainstack.fsutil import loads_strict, read_regular
from trainstack.stackfile import load_stack, select_flavour
from trainstack.stackfile.matrix import Flavour, components_for
from trainstack.verify.locate import built_flavour, lock_inputs_hash, locked_packages, stack_installs
from trainstack.verify.run import PARTS, Scope
from trainstack.verify.target import Target, open_target


def make_scope(
    stack: Path | None, flavour: str | None, python: Path | None, build_dir: Path, skip: list[str]
) -> tuple[Target, Scope, Path | None]:
    """(target, scope, where the result goes by default: verify.json, or verify.partial.json when
    parts are skipped, so that a partial run never replaces the full gate's result)."""
    unknown = [part for part in skip if part not in PARTS]
    if unknown:
        raise UsageError(f"--skip {unknown[0]}: not a part of verify", hint=f"one of: {', '.join(PARTS)}")
    if stack is None and python is None:
        raise UsageError("give a stack file or --python PATH", hint="trainstack verify STACK --flavour F")
    if stack is None:
        if flavour is not None:
            raise UsageError("--flavour needs a stack file")
        return open_target(python), Scope(skip=skip), None  # type: ignore[arg-type]  # python is not None here: stack and python both None was refused above
    if python is not None:
        return _stack_on_python(stack, flavour, python, skip)
    built = built_flavour(stack, flavour, build_dir)
    not_built = skipped_sources(built.record)
    locked = built.locked()
    if locked is not None:  # what was not built on purpose is not missing
        locked = (locked[0], {name: v for name, v in locked[1].items() if name not in not_built})
    scope = Scope(
        stack_path=stack,
        stack=built.stack,
        flavour=built.flavour.slug,
        components=[c for c in built.components() if c not in not_built],
        locked=locked,
        also_installed=built.also_installed(),
        build_record=built.record,
        skip=skip,
        not_built=not_built,
        lock_inputs_hash=lock_inputs_hash(stack),
        accelerator=accelerator(built.flavour),
    )
    return open_target(built.python), scope, built.partial_verify_json if skip else built.verify_json


def flavour_slug(stack: Path | None, flavour: str | None) -> str | None:
    """The slug --flavour selects in the stack (a slug with the matrix's dots, too); None without either."""
    if stack is None or flavour is None:
        return flavour
    return select_flavour(load_stack(stack), flavour)[0].slug


def accelerator(flavour: Flavour) -> str:
    """The accelerator a flavour's environment is made for, whatever the verifying host has."""
    return "cpu" if flavour.cuda == "cpu" else "cuda"


def skipped_sources(record: Path) -> list[str]:
    """Components the build left out on purpose (build --skip-sources), from build.json."""
    try:
        data = loads_strict(read_regular(record, "build record").decode("utf-8"))
    except (OSError, ValueError):
        return []
    skipped = data.get("skipped_sources") if isinstance(data, dict) else None
    return [str(name) for name in skipped] if isinstance(skipped, list) else []


def _stack_on_python(stack: Path, flavour: str | None, python: Path, skip: list[str]) -> tuple[Target, Scope, None]:
    """A stack's checks on an environment trainstack did not build (no build record)."""
    spec = load_stack(stack)
    flavours = select_flavour(spec, flavour)
    chosen = flavours[0] if len(flavours) == 1 else None
    components = [c.key for c in (components_for(spec, chosen) if chosen else spec.components.values())]
    scope = Scope(
        stack_path=stack,
        stack=spec,
        flavour=chosen.slug if chosen else None,
        components=components,
        skip=skip,
        accelerator=accelerator(chosen) if chosen else None,
    )
    if chosen is not None:
        scope.locked = locked_packages(stack, chosen.slug)
        scope.also_installed = stack_installs(stack, spec, chosen.slug)
    return open_target(python), scope, None
