"""`trainstack report`: what an environment really contains, in a fixed schema."""

from __future__ import annotations

import sys
from pathlib import Path

import typer


def command(
    python: Path = typer.Option(Path(sys.executable), "--python", help="Interpreter of the environment to report on."),
    stack: Path | None = typer.Option(None, "--stack", help="Report on this stack's built flavour (venv, lock, build.json)."),
    flavour: str | None = typer.Option(None, "--flavour", "--flavor", help="Flavour slug, with --stack."),
    build_dir: Path = typer.Option(Path("build"), "--build-dir", help="Where 'trainstack build' put the flavours."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON (every field always present)."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Also write the report as JSON to this file."),
) -> None:
    """Report OS, libc, compilers, Python, torch/CUDA/cuDNN/NCCL (compiled and loaded), GPUs, drift.

    Example: trainstack report --python build/cpu-debian12-py311-release/venv/bin/python --json
    """
    from trainstack.console import out
    from trainstack.verify.report import collect_report
    from trainstack.verify.report_render import render_report
    from trainstack.verify.target import open_target

    if output is not None:
        from trainstack.fsutil import check_output

        check_output(output, "--output")
    locked, record, also = None, None, None
    if stack is not None:
        from trainstack.verify.locate import built_flavour

        built = built_flavour(stack, flavour, build_dir)
        python, locked, record, also = built.python, built.locked(), built.record, built.also_installed()
    report = collect_report(open_target(python), locked=locked, build_record=record, also=also)
    if json_out or output is not None:
        from trainstack.console import emit_json

        emit_json(report.model_dump_json(indent=2), to_stdout=json_out, output=output)
    if not json_out:
        render_report(report, out)
