"""`trainstack check`: evaluate the compatibility rules for every flavour, before resolution."""

from __future__ import annotations

from pathlib import Path

import typer


def command(
    stack: Path = typer.Argument(..., metavar="STACK", help="The stack.toml to check.", show_default=False),
    json_out: bool = typer.Option(False, "--json", help="Print every finding as JSON on stdout instead of the lines."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Also write every finding as JSON to this file."),
    backend: str | None = typer.Option(
        None,
        "--backend",
        show_default=False,
        help="The backend build will use: venv or oci; default: the stack's [build] "
        "backend (venv unless it says). A flavour it cannot compile breaks a rule.",
    ),
) -> None:
    """Check each flavour against the rules data (torch CUDA variants and Pythons, driver,
    GPU architectures, flash-attn, DeepSpeed ops, the nvcc of its extensions); exit 3 when
    a rule is broken.

    A CUDA flavour with extensions built from source needs an nvcc of its CUDA release.

    Its route: the PyPI wheel where it holds nvcc (CUDA 13); for OCI builds on a Debian
    base, Debian's non-free nvidia-cuda-toolkit (11.8 on debian12, 12.4 on debian13).

    For venv builds, the host's nvcc (CUDA_HOME, else PATH). A flavour with no route is refused.

    So is one that build's backend (--backend, else the stack's [build] backend, else venv)
    cannot compile while the other can.

    Also shows what the stack will run: its test-suite commands (those that are not pytest
    run only with verify --trust) and its build environment variables.

    With --verbose, the informational findings too.

    Example: trainstack check examples/stacks/torch-cuda.toml --verbose
    """
    from rich.text import Text

    from trainstack.console import out, verbosity
    from trainstack.errors import RuleViolation, UsageError
    from trainstack.fsutil import check_output
    from trainstack.grammar import shown as one_line
    from trainstack.hostnvcc import find_host_nvcc
    from trainstack.redact import redact
    from trainstack.stackfile import expand_flavours, load_stack
    from trainstack.stackfile.compat import BACKENDS, check_stack, errors, needs_host_nvcc
    from trainstack.trust import runs_code, what_it_runs

    if backend is not None and backend not in BACKENDS:
        raise UsageError(f"--backend: unknown backend '{backend}'", hint=f"one of: {', '.join(BACKENDS)}")
    if output is not None:
        check_output(output, "--output")
    verbose = verbosity() > 0

    spec = load_stack(stack)
    findings = check_stack(spec, find_host_nvcc() if needs_host_nvcc(spec) else None, backend or spec.build.backend)
    broken = errors(findings)
    flavours = len(expand_flavours(spec))
    runs = what_it_runs(spec.verify.suite, spec.components, spec.env)
    for entry in runs["build_env"] + runs["image_env"]:
        entry["value"] = redact(entry["value"])
    if json_out or output is not None:
        import dataclasses
        import json

        from trainstack.console import emit_json

        document = {"flavours": flavours, "broken": len(broken), "findings": [dataclasses.asdict(f) for f in findings], "runs": runs}
        emit_json(json.dumps(document, indent=2), to_stdout=json_out, output=output)
    shown = [] if json_out else findings if verbose else broken
    for f in shown:
        style = "red" if f.level == "error" else "dim"
        line = Text.assemble((f.level, style), f" {f.flavour} {f.rule}: {f.message} <{f.source}>")
        out.print(line, highlight=False, soft_wrap=True)
    if not json_out:
        for suite in runs["suites"]:
            how = "pytest" if suite["pytest"] else "not pytest: runs only with verify --trust"
            out.print(f"runs: verify.suite {suite['name']}: {one_line(suite['command'], 300)} ({how})", highlight=False, soft_wrap=True)
        for entry in runs["build_env"]:
            reason = runs_code(entry["variable"])
            why = f" (allowed by [build] allow_env: {reason})" if reason is not None else ""
            out.print(
                f"runs: components.{entry['component']}.build_env: {one_line(entry['variable'], 80)}={one_line(entry['value'], 300)}{why}",
                highlight=False,
                soft_wrap=True,
            )
        for entry in runs["image_env"]:
            setting = f"env {one_line(entry['variable'], 80)}={one_line(entry['value'], 300)}"
            if entry["runs"] is not None:
                said = f"runs: {setting} (allowed by [env] allow: {entry['runs']}; the image's ENV and the venv's activation)"
            else:
                said = f"sets: {setting} (the image's ENV and the venv's activation)"
            out.print(said, highlight=False, soft_wrap=True)
    if broken:
        raise RuleViolation(f"{stack}: {len(broken)} rule(s) broken across {flavours} flavour(s)")
    if not json_out:
        out.print(f"all rules hold for {flavours} flavour(s)", highlight=False)
