"""`trainstack verify`: prove a built environment works, with one verdict and verify.json."""

from __future__ import annotations

from pathlib import Path

import typer


def command(
    stack: Path | None = typer.Argument(None, help="The stack file; its flavour's venv under BUILD_DIR is verified."),
    flavour: str | None = typer.Option(None, "--flavour", help="Flavour slug (needed when the stack has several)."),
    python: Path | None = typer.Option(None, "--python", help="Verify this interpreter's environment instead of a built venv."),
    build_dir: Path = typer.Option(Path("build"), "--build-dir", help="Where 'trainstack build' put the flavours."),
    skip: list[str] = typer.Option([], "--skip", help="Leave out a part: report, ops, linkcheck, smoke, suites."),
    output: Path | None = typer.Option(None, "--output", help="Write verify.json here (default with a stack: BUILD_DIR/<flavour>/verify.json)."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON instead of the summary."),
    trust: bool = typer.Option(False, "--trust", help="Run suite commands that are not pytest (they run whatever the stack names; 'trainstack check' shows them)."),
) -> None:
    """Report, op table, link check, smoke checks and test suites, inside the environment.

    Exit 0 when the gate passes, 1 when it fails, 2 on bad input (a suite command that is not
    pytest without --trust included), 10 when verify.json could not be written (disk full, no
    permission; the previous one kept).

    Example: trainstack verify examples/stacks/cpu-minimal.toml --flavour cpu-debian12-py311-release
    """
    from trainstack.console import out
    from trainstack.errors import OutputError
    from trainstack.fsutil import atomic_write_text, describe_os_error
    from trainstack.verify.plan import make_plan
    from trainstack.verify.render import render_verify
    from trainstack.verify.run import run_verify

    target, plan, default_output = make_plan(stack, flavour, python, build_dir, skip)
    result = run_verify(target, plan, trust=trust)
    destination = output or default_output
    if destination is not None:
        try:
            atomic_write_text(destination, result.model_dump_json(indent=2) + "\n")
        except OSError as exc:
            raise OutputError(f"{destination}: not written: {describe_os_error(exc)} (the previous file, if any, is unchanged)") from None
    if json_out:
        print(result.model_dump_json(indent=2))
    else:
        render_verify(result, out)
        if destination is not None:
            out.print(f"wrote {destination}", highlight=False)
    if result.verdict != "pass":
        raise typer.Exit(1)
