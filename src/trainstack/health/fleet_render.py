"""The fleet report for people: one rich table (findings under it) and one HTML page in the
release page's manner (jinja2, every value escaped, inline CSS, no script)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from trainstack.health.fleet import findings
from trainstack.health.fleet_schema import FleetNode, FleetReport
from trainstack.health.render import STYLE

COLUMNS = (
    ("gemm_tflops", "GEMM TFLOP/s"),
    ("hbm_gbps", "HBM GB/s"),
    ("h2d_gbps", "H2D GB/s"),
    ("allreduce_busbw_gbps", "all-reduce busbw GB/s"),
)


def number(value: float | None) -> str:
    return "-" if value is None else f"{value:,.4g}"


def _flagged(report: FleetReport, node: FleetNode, metric: str) -> bool:
    return any(o.node == node.node and o.metric == metric for o in report.outliers)


def table(report: FleetReport) -> Table:
    t = Table(
        title=f"fleet: {len(report.nodes)} nodes, {len(report.failing)} failing, "
        f"{len({o.node for o in report.outliers})} outliers (>{report.outlier_fraction:.0%} below median)",
        title_justify="left",
    )
    for column in ("node", "verdict", "reason", *(label for _, label in COLUMNS)):
        t.add_column(column, overflow="fold")
    for n in report.nodes:
        cells = [Text(number(getattr(n, m)), style="bold red" if _flagged(report, n, m) else "") for m, _ in COLUMNS]
        t.add_row(n.node, Text(n.status.value, style=STYLE[n.status]), n.reason, *cells)
    t.add_row("median", "", "", *(number(report.medians.get(m)) for m, _ in COLUMNS))
    return t


def sweep_table(report: FleetReport) -> Table | None:
    """The all-reduce sweep as nccl-tests prints it: per size the algorithm and bus bandwidth."""
    sweep = report.allreduce
    if sweep is None:
        return None
    t = Table(
        title=f"all-reduce across {len(sweep.nodes)} nodes ({', '.join(sweep.nodes)}), {sweep.world_size} ranks, {sweep.backend}",
        title_justify="left",
    )
    for column in ("size B", "time us", "algbw GB/s", "busbw GB/s", "correct"):
        t.add_column(column, justify="right")
    for s in sweep.sizes:
        t.add_row(
            f"{s.bytes:,}",
            f"{s.median_s * 1e6:,.1f}",
            f"{s.algbw_gbps:.3f}",
            f"{s.busbw_gbps:.3f}",
            "yes" if s.correct else Text("no", style="bold red"),
        )
    return t


def findings_lines(report: FleetReport) -> list[str]:
    return findings(report)


def render_html(report: FleetReport) -> str:
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    env = Environment(
        loader=PackageLoader("trainstack.health", "templates"),
        autoescape=select_autoescape(default=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env.get_template("fleet.html.j2").render(
        report=report, columns=COLUMNS, number=number, flagged=_flagged, findings=findings(report)
    )
