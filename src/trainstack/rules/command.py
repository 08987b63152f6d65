"""`trainstack check`: evaluate the compatibility rules for every flavour, before resolution."""

from __future__ import annotations

from pathlib import Path

import typer


def command(
    stack: Path = typer.Argument(..., metavar="STACK", help="The stack.toml to check.", show_default=False),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also show the informational findings."),
) -> None:
    """Check each flavour against the rules data (torch CUDA variants and Pythons, driver,
    GPU architectures, flash-attn, DeepSpeed ops); exit 3 when a rule is broken.

    Example: trainstack check examples/stacks/torch-cuda.toml --verbose
    """
    from trainstack.console import out
    from trainstack.errors import RuleViolation
    from trainstack.rules.check import check_stack, errors
    from trainstack.spec import expand_flavours, load_stack

    spec = load_stack(stack)
    findings = check_stack(spec)
    shown = findings if verbose else errors(findings)
    for f in shown:
        style = "red" if f.level == "error" else "dim"
        line = f"[{style}]{f.level}[/] {f.flavour} {f.rule}: {f.message} <{f.source}>"
        out.print(line, highlight=False, soft_wrap=True)
    broken = errors(findings)
    flavours = len(expand_flavours(spec))
    if broken:
        raise RuleViolation(f"{stack}: {len(broken)} rule(s) broken across {flavours} flavour(s)")
    out.print(f"all rules hold for {flavours} flavour(s)", highlight=False)
