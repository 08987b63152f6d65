"""`trainstack linkcheck`: the ELF link check as a verb of its own."""

from __future__ import annotations

from pathlib import Path

import typer

from trainstack.console import out


def command(
    paths: list[Path] = typer.Argument(..., help="Environments, directories or ELF files to check."),
    stack: Path | None = typer.Option(None, "--stack", help="Take banned and required links from this stack's [verify.links]."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Also write the report as JSON to this file."),
    notes: bool = typer.Option(False, "--notes", help="Also list notes (driver libraries, optional plugins)."),
    candidates: bool = typer.Option(False, "--candidates", help="List every dlopen candidate and where it was found."),
    strings: bool = typer.Option(True, "--strings/--no-strings", help="Scan read-only data for dlopen candidates."),
    cache: bool = typer.Option(True, "--cache/--no-cache", help="Reuse what earlier runs read from unchanged files."),
    python: Path | None = typer.Option(
        None,
        "--python",
        help="Confirm findings by loading them with this interpreter (default: the venv's own python when PATHS is one venv).",
    ),
    confirm: bool = typer.Option(
        True, "--confirm/--no-confirm", help="Confirm unresolved and dlopen-missing findings inside the target interpreter."
    ),
) -> None:
    """Resolve the NEEDED and dlopen'ed libraries of every ELF object, the way ld.so would.

    Findings are confirmed inside the target interpreter (its package imported first, then the
    object loaded): broken, optional (which part) or resolved at run time; only broken fails.

    Example: trainstack linkcheck build/cu128-ubuntu2404-py312-release/venv --stack examples/stacks/torch-cuda.toml
    """
    from trainstack.verify.linkcheck.check import check_paths
    from trainstack.verify.linkcheck.render import render_candidates, render_links

    if output is not None:
        from trainstack.fsutil import check_output

        check_output(output, "--output")
    links = None
    if stack is not None:
        from trainstack.stackfile import load_stack

        links = load_stack(stack).verify.links
    report = check_paths(paths, links, scan_strings=strings, cache=cache)
    report = _confirmed(report, paths, python, confirm)
    if json_out or output is not None:
        from trainstack.console import emit_json

        emit_json(report.model_dump_json(indent=2), to_stdout=json_out, output=output)
    if not json_out:
        if candidates:
            render_candidates(report, out)
        render_links(report, out, show_notes=notes)
    if not report.ok:
        raise typer.Exit(1)


def _confirmed(report, paths: list[Path], python: Path | None, confirm: bool):
    from trainstack.verify.linkcheck.confirm import confirm_in_target, unconfirmed, venv_python
    from trainstack.verify.target import open_target

    if not confirm:
        return unconfirmed(report, "confirmation turned off (--no-confirm)")
    python = python or venv_python(paths)
    if python is None:
        return unconfirmed(report)
    return confirm_in_target(report, open_target(python))
