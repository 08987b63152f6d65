"""`trainstack keys`: print the cache key of every locked flavour."""

from __future__ import annotations

from pathlib import Path

import typer


def command(
    stack: Path = typer.Argument(..., metavar="STACK", help="The stack.toml whose lock to read.", show_default=False),
    flavour: str | None = typer.Option(None, "--flavour", "--flavor", metavar="SLUG", help="Print only this flavour's key."),
    json_out: bool = typer.Option(False, "--json", help="Print {flavour: key} as JSON on stdout."),
) -> None:
    """Print <image>-<flavour slug>-<12 hex> per flavour, from a lock that matches the stack.

    Example: trainstack keys examples/stacks/cpu-minimal.toml
    """
    from trainstack.console import out
    from trainstack.lock.lock import check_lock_current

    manifest = check_lock_current(stack, flavour)
    keys = {
        slug: locked.cache_key for slug, locked in manifest.flavours.items() if flavour is None or slug == flavour.replace(".", "")
    }  # a slug written with the matrix's dots too
    if json_out:
        import json

        from trainstack.console import emit_json

        emit_json(json.dumps(keys, indent=2), to_stdout=True, output=None)
        return
    for key in keys.values():
        out.print(key, highlight=False, soft_wrap=True)
