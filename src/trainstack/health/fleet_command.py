"""`trainstack health --fleet DIR`: one report over the JSON each node wrote."""

from __future__ import annotations

from pathlib import Path

import typer

from trainstack.console import emit_json, out
from trainstack.errors import OutputError
from trainstack.fsutil import atomic_write_text, check_output, describe_os_error
from trainstack.health.fleet import findings
from trainstack.health.fleet import fleet_report as build_report
from trainstack.health.fleet_load import load_fleet
from trainstack.health.fleet_render import findings_lines, render_html, sweep_table, table


def fleet_report(folder: Path, *, json_out: bool, output: Path | None, html: Path | None) -> None:
    """Print the fleet table (or JSON); exit 0 when every node passes, none stands out
    and no node pair is slow; 1 otherwise."""
    for path, option in ((output, "--output"), (html, "--html")):
        if path is not None:
            check_output(path, option)
    reports, sweep = load_fleet(folder)
    report = build_report(reports, sweep)
    if json_out or output is not None:
        emit_json(report.model_dump_json(indent=2), to_stdout=json_out, output=output)
    if html is not None:
        try:
            atomic_write_text(html, render_html(report))
        except OSError as exc:
            raise OutputError(f"{html}: cannot write: {describe_os_error(exc)}", hint="a previous page there is unchanged") from None
    if not json_out:
        out.print(table(report))
        sweep_view = sweep_table(report)
        if sweep_view is not None:
            out.print(sweep_view)
        for line in findings_lines(report):
            out.print(f"finding: {line}", highlight=False, markup=False)
    raise typer.Exit(1 if findings(report) else 0)
