"""`trainstack render`: Dockerfiles, docker-bake.hcl, a CI workflow and environment.yml from a locked stack."""

from __future__ import annotations

from pathlib import Path

import typer


def command(
    stack: Path = typer.Argument(..., help="The stack file (its lock must be current)."),
    out: Path = typer.Option(Path("build/render"), "--out", metavar="DIR", help="Directory for the rendered files."),
    flavour: str | None = typer.Option(None, "--flavour", help="Render one flavour (its slug); default: all."),
    json_out: bool = typer.Option(False, "--json", help="Print the files changed as JSON on stdout."),
) -> None:
    """Render a Dockerfile per flavour plus docker-bake.hcl, a CI workflow and environment.yml.

    Example: trainstack render examples/stacks/torch-cuda.toml --out build/render
    """
    from trainstack.console import out as console
    from trainstack.fsutil import check_output
    from trainstack.render import render_stack

    check_output(out, "--out", folder=True)
    changed = render_stack(stack, out, flavour)
    if json_out:
        import json

        from trainstack.console import emit_json

        emit_json(json.dumps({"out": str(out), "changed": [str(p) for p in changed]}, indent=2), to_stdout=True, output=None)
        return
    for path in changed:
        console.print(f"wrote {path}", highlight=False)
    console.print(f"{len(changed)} file(s) changed under {out}", highlight=False)
