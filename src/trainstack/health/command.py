"""The `health` verb: parse options, run the checks, print a table or JSON, exit with the verdict."""

from __future__ import annotations

import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from trainstack.errors import UsageError

if TYPE_CHECKING:
    from trainstack.health.schema import HealthReport

DRIVER_VERSION = re.compile(r"^\d{1,4}(\.\d{1,4}){0,2}$")  # 550, 550.54, 550.54.15


def command(
    level: int = typer.Option(
        1, "--level", help="1: NVML and host (seconds); 2: + GEMM and copies (< 60 s a GPU); 3: + all-reduce and sustained GEMM."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON (schema: HealthReport)."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Also write the report as JSON to this file."),
    expect_gpus: int | None = typer.Option(None, "--expect-gpus", help="GPUs this node must show."),
    thresholds: Path | None = typer.Option(None, "--thresholds", help="TOML file laid over the built-in thresholds."),
    min_driver: str | None = typer.Option(None, "--min-driver", help="Minimum driver version, e.g. 550.54.15."),
    disk: Path = typer.Option(Path("."), "--disk", help="Where free disk is measured."),
    duration: float = typer.Option(30.0, "--duration", help="Seconds of sustained GEMM at level 3."),
    allreduce_gib: float = typer.Option(2.0, "--allreduce-gib", help="All-reduce message size at level 3."),
    prolog: bool = typer.Option(
        False,
        "--prolog",
        help="Slurm prolog/epilog convention: exit 0 passes, 1 drains; one reason line on stdout; GPU checks skip on a node without a GPU.",
    ),
    drain: bool = typer.Option(
        False, "--drain", help="With --prolog: a failing node drains itself with trainstack's reason through scontrol (as NHC does)."
    ),
    node_out: Path | None = typer.Option(
        None, "--node-out", metavar="DIR", help="Also write the report to DIR/<node>.json (the input of --fleet)."
    ),
    fleet: Path | None = typer.Option(
        None,
        "--fleet",
        metavar="DIR",
        help="Check nothing: read the JSON each node wrote in DIR and print one fleet table (--json, -o, --html).",
    ),
    html: Path | None = typer.Option(None, "--html", help="With --fleet: also write the fleet report as an HTML page."),
) -> None:
    """Check whether this node can run a training job. Exit 0 ok, 1 warn, 2 critical, 3 unknown.

    The worst check sets the exit code, in the order ok < warn < unknown < critical. Bad input
    exits 64, not 2, so that monitoring tools never read a typo as a critical node.

    Example: trainstack health --level 2 --expect-gpus 8 --json
    """
    from trainstack.console import out
    from trainstack.health.render import table
    from trainstack.health.run import HealthOptions, run_health

    if fleet is not None:
        from trainstack.health.fleet_command import fleet_report

        fleet_report(fleet, json_out=json_out, output=output, html=html)
        return
    if html is not None:
        raise UsageError("--html: accepted only with --fleet DIR")
    if drain and not prolog:
        raise UsageError("--drain: accepted only with --prolog")

    if level not in (1, 2, 3):
        raise UsageError(f"--level {level}: accepted values are 1, 2, 3")
    if expect_gpus is not None and expect_gpus < 0:
        raise UsageError(f"--expect-gpus {expect_gpus}: accepted is a count >= 0")
    if not (0 < duration < float("inf") and 0 < allreduce_gib < float("inf")):
        raise UsageError("--duration and --allreduce-gib: accepted are positive numbers")
    check_paths(min_driver, disk, thresholds)
    from trainstack.fsutil import check_output
    from trainstack.health.slurm import node_name

    node = node_name(strict=prolog or node_out is not None)
    if output is not None:
        check_output(output, "--output")
    if node_out is not None:
        check_output(node_out, "--node-out", folder=True)
    if level >= 2:
        from trainstack.extras import require_importable

        require_importable("torch", f"trainstack health --level {level}")
    opts = HealthOptions(
        level=level,
        expect_gpus=expect_gpus,
        thresholds_file=thresholds,
        min_driver=min_driver,
        disk_path=disk,
        sustained_s=duration,
        allreduce_bytes=int(allreduce_gib * 1024**3),
        prolog=prolog,
        node=node,
    )
    report = run_health(opts)
    from trainstack.console import emit_json

    if json_out or output is not None:
        emit_json(report.model_dump_json(indent=2), to_stdout=json_out, output=output)
    if node_out is not None:
        node_out.mkdir(parents=True, exist_ok=True)
        emit_json(report.model_dump_json(indent=2), to_stdout=False, output=node_out / f"{node}.json")
    if prolog:
        _prolog_end(report, node, drain=drain, quiet=json_out)
    elif not json_out:
        out.print(table(report))
    raise typer.Exit(report.exit_code)


def _prolog_end(report: HealthReport, node: str | None, *, drain: bool, quiet: bool) -> None:
    """One line for slurmd's log (stdout; stderr with --json); the drain when asked and failing."""
    import sys

    line = report.reason or f"trainstack: {node} passes ({report.status.value})"
    print(line, file=sys.stderr if quiet else sys.stdout, flush=True)
    if drain and report.exit_code and node:
        from trainstack.health.slurm import drain as drain_node

        why = drain_node(node, report.reason)
        if why:
            print(f"error: drain {node}: {why}", file=sys.stderr, flush=True)


def check_paths(min_driver: str | None, disk: Path, thresholds: Path | None) -> None:
    """Refuse what the checks could not use before any of them runs (a FIFO given as the
    thresholds file would block; a missing --disk would be measured as zero free bytes)."""
    if min_driver is not None and not DRIVER_VERSION.match(min_driver):
        raise UsageError(f"--min-driver {min_driver!r}: accepted is a driver version such as 550.54.15")
    if not disk.exists():
        raise UsageError(f"--disk {disk}: no such file or directory", hint="give a directory on the disk to measure")
    if thresholds is not None:
        try:
            mode = thresholds.stat().st_mode
        except OSError as exc:
            raise UsageError(f"--thresholds {thresholds}: {exc.strerror}") from None
        if not stat.S_ISREG(mode):
            raise UsageError(f"--thresholds {thresholds}: not a regular file", hint="give a TOML file")
