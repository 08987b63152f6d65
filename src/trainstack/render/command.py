"""`trainstack render`: Dockerfiles, docker-bake.hcl, a CI workflow and environment.yml from a locked stack."""

from __future__ import annotations

from pathlib import Path

import typer


def command(
    stack: Path = typer.Argument(..., help="The stack file (its lock must be current)."),
    out: Path = typer.Option(Path("build/render"), "--out", help="Directory for the rendered files."),
    flavour: str | None = typer.Option(None, "--flavour", help="Render one flavour (its slug); default: all."),
) -> None:
    """Render a Dockerfile per flavour plus docker-bake.hcl, a CI workflow and environment.yml.

    Example: trainstack render examples/stacks/torch-cuda.toml --out build/render
    """
    from trainstack.console import out as console
    from trainstack.render import render_stack

    changed = render_stack(stack, out, flavour)
    for path in changed:
        console.print(f"wrote {path}", highlight=False)
    console.print(f"{len(changed)} file(s) changed under {out}", highlight=False)
