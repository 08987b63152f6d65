"""The report for people: one rich table, worst checks first."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from trainstack.health.schema import HealthReport, Status

STYLE = {Status.skip: "dim", Status.ok: "green", Status.warn: "yellow", Status.critical: "bold red", Status.unknown: "magenta"}


def table(report: HealthReport) -> Table:
    title = Text.assemble(
        f"health level {report.level}: ",
        (report.status.value, STYLE[report.status]),
        f" (exit {report.exit_code}) · {report.gpu_model or 'no GPU seen'} · thresholds {report.thresholds_profile} "
        f"· {report.seconds:.1f} s",
    )
    t = Table(title=title, title_justify="left")
    for column in ("check", "gpu", "status", "value", "unit", "threshold", "note"):
        t.add_column(column, overflow="fold")
    for c in sorted(report.checks, key=lambda c: -c.status.rank):
        t.add_row(
            c.name,
            "" if c.gpu is None else str(c.gpu),
            Text(c.status.value, style=STYLE[c.status]),
            "" if c.value is None else f"{c.value:,.6g}" if isinstance(c.value, float) else str(c.value),
            c.unit,
            c.threshold or "",
            c.message,
        )
    return t
