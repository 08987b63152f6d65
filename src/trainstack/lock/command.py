"""`trainstack lock`: resolve a stack with uv and write its lock files and manifest."""

from __future__ import annotations

from pathlib import Path

import typer


def command(
    stack: Path = typer.Argument(..., metavar="STACK", help="The stack.toml to lock.", show_default=False),
    flavour: str | None = typer.Option(None, "--flavour", "--flavor", metavar="SLUG", help="Lock only this flavour (its slug)."),
    upgrade_package: list[str] = typer.Option(
        [], "--upgrade-package", "-P", metavar="NAME", help="Let this package move to its newest allowed version (repeatable)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the lock manifest (stack.lock.json) on stdout instead of the summary."),
    offline: bool = typer.Option(False, "--offline", help="Resolve from uv's cache only, never the network (as UV_OFFLINE=1 does)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Resolve and show what would change; write nothing."),
) -> None:
    """Resolve every flavour with uv (hashes, per-flavour Python and platform) and write
    <stack>.lock/stack.lock.json and locks/<flavour>.txt; unchanged inputs change no file.

    Example: trainstack lock examples/stacks/cpu-minimal.toml --upgrade-package numpy
    """
    from trainstack.console import out
    from trainstack.lock.lock import lock_stack
    from trainstack.offline import go_offline

    if offline:
        go_offline()
    from trainstack.lock.manifest import load_manifest, manifest_path

    before = manifest_path(stack)
    previous = load_manifest(before) if dry_run and before.is_file() else None
    manifest = lock_stack(stack, flavour=flavour, upgrade=upgrade_package, dry_run=dry_run)
    if json_out:
        from trainstack.console import emit_json

        emit_json(manifest.model_dump_json(indent=2), to_stdout=True, output=None)
        return
    for slug, locked in manifest.flavours.items():
        line = f"{slug}: {len(locked.packages)} packages, {len(locked.sources)} sources, key {locked.cache_key}"
        out.print(line, highlight=False, soft_wrap=True)
    if not dry_run:
        out.print(f"wrote {manifest_path(stack)}", highlight=False, soft_wrap=True)
        return
    for slug, locked in manifest.flavours.items():
        old = previous.flavours[slug].packages if previous is not None and slug in previous.flavours else {}
        for name in sorted(set(old) | set(locked.packages)):
            if old.get(name) != locked.packages.get(name):
                out.print(
                    f"  {slug}: {name} {old.get(name, '(none)')} -> {locked.packages.get(name, '(removed)')}",
                    highlight=False,
                    soft_wrap=True,
                )
    out.print(f"dry run: nothing written ({manifest_path(stack)} unchanged)", highlight=False, soft_wrap=True)
