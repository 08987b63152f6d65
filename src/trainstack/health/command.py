"""The `health` verb: parse options, run the checks, print a table or JSON, exit with the verdict."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import typer

from trainstack.errors import UsageError

DRIVER_VERSION = re.compile(r"^\d{1,4}(\.\d{1,4}){0,2}$")  # 550, 550.54, 550.54.15


def command(
    level: int = typer.Option(1, "--level", help="1: NVML and host (seconds); 2: + GEMM and copies (< 60 s a GPU); "
                              "3: + all-reduce and sustained GEMM."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON (schema: HealthReport)."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Also write the report as JSON to this file."),
    expect_gpus: int | None = typer.Option(None, "--expect-gpus", help="GPUs this node must show."),
    thresholds: Path | None = typer.Option(None, "--thresholds", help="TOML file laid over the built-in thresholds."),
    min_driver: str | None = typer.Option(None, "--min-driver", help="Minimum driver version, e.g. 550.54.15."),
    disk: Path = typer.Option(Path("."), "--disk", help="Where free disk is measured."),
    duration: float = typer.Option(30.0, "--duration", help="Seconds of sustained GEMM at level 3."),
    allreduce_gib: float = typer.Option(2.0, "--allreduce-gib", help="All-reduce message size at level 3."),
) -> None:
    """Check whether this node can run a training job. Exit 0 ok, 1 warn, 2 critical, 3 unknown.

    The worst check sets the exit code, in the order ok < warn < unknown < critical. Bad input
    exits 64, not 2, so that monitoring tools never read a typo as a critical node.

    Example: trainstack health --level 2 --expect-gpus 8 --json
    """
    from trainstack.console import out
    from trainstack.health.render import table
    from trainstack.health.run import HealthOptions, run_health

    if level not in (1, 2, 3):
        raise UsageError(f"--level {level}: accepted values are 1, 2, 3")
    if expect_gpus is not None and expect_gpus < 0:
        raise UsageError(f"--expect-gpus {expect_gpus}: accepted is a count >= 0")
    if not (0 < duration < float("inf") and 0 < allreduce_gib < float("inf")):
        raise UsageError("--duration and --allreduce-gib: accepted are positive numbers")
    check_paths(min_driver, disk, thresholds)
    if output is not None:
        from trainstack.fsutil import check_output

        check_output(output, "--output")
    if level >= 2:
        from trainstack.extras import require_importable

        require_importable("torch", f"trainstack health --level {level}")
    opts = HealthOptions(level=level, expect_gpus=expect_gpus, thresholds_file=thresholds, min_driver=min_driver,
                         disk_path=disk, sustained_s=duration, allreduce_bytes=int(allreduce_gib * 1024**3))
    report = run_health(opts)
    if json_out or output is not None:
        from trainstack.console import emit_json

        emit_json(report.model_dump_json(indent=2), to_stdout=json_out, output=output)
    if not json_out:
        out.print(table(report))
    raise typer.Exit(report.exit_code)


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
