"""`trainstack check`: evaluate the compatibility rules for every flavour, before resolution."""

from __future__ import annotations

from pathlib import Path

import typer


def command(
    stack: Path = typer.Argument(..., metavar="STACK", help="The stack.toml to check.", show_default=False),
    json_out: bool = typer.Option(False, "--json", help="Print every finding as JSON on stdout instead of the lines."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Also write every finding as JSON to this file."),
) -> None:
    """Check each flavour against the rules data (torch CUDA variants and Pythons, driver,
    GPU architectures, flash-attn, DeepSpeed ops); exit 3 when a rule is broken.

    With --verbose, the informational findings too.

    Example: trainstack check examples/stacks/torch-cuda.toml --verbose
    """
    from rich.markup import escape

    from trainstack.console import out, verbosity
    from trainstack.errors import RuleViolation
    from trainstack.fsutil import check_output
    from trainstack.stackfile.compat import check_stack, errors
    from trainstack.stackfile import expand_flavours, load_stack

    if output is not None:
        check_output(output, "--output")
    verbose = verbosity() > 0

    spec = load_stack(stack)
    findings = check_stack(spec)
    broken = errors(findings)
    flavours = len(expand_flavours(spec))
    if json_out or output is not None:
        import dataclasses
        import json

        from trainstack.console import emit_json

        document = {"flavours": flavours, "broken": len(broken), "findings": [dataclasses.asdict(f) for f in findings]}
        emit_json(json.dumps(document, indent=2), to_stdout=json_out, output=output)
    shown = [] if json_out else findings if verbose else broken
    for f in shown:
        style = "red" if f.level == "error" else "dim"
        line = f"[{style}]{f.level}[/] {escape(f'{f.flavour} {f.rule}: {f.message} <{f.source}>')}"
        out.print(line, highlight=False, soft_wrap=True)
    if broken:
        raise RuleViolation(f"{stack}: {len(broken)} rule(s) broken across {flavours} flavour(s)")
    if not json_out:
        out.print(f"all rules hold for {flavours} flavour(s)", highlight=False)
