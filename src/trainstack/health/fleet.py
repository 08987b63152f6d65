"""The fleet report: one row per node from the reports the nodes wrote, and the nodes that
stand out against the fleet's own median (a node 10% slower than its peers is a finding even
when it passes its thresholds). Pure: the files are read in fleet_load."""

from __future__ import annotations

import statistics

from trainstack.health.allreduce_pairs import best_pairs
from trainstack.health.fleet_schema import AllreduceSweep, FleetNode, FleetReport, Outlier
from trainstack.health.reason import FAILING
from trainstack.health.schema import HealthReport

OUTLIER_FRACTION = 0.10
METRICS = ("gemm_tflops", "hbm_gbps", "h2d_gbps", "allreduce_busbw_gbps")
# the check whose value each metric takes: a GPU's first, the host's where the node has no GPU
SOURCES = {
    "gemm_tflops": ("gemm.bf16", "host.gemm_bf16"),
    "hbm_gbps": ("copy.device", "host.copy"),
    "h2d_gbps": ("copy.h2d",),
}


def _slowest(report: HealthReport, names: tuple[str, ...]) -> float | None:
    for name in names:
        values = [
            float(c.value) for c in report.checks if c.name == name and isinstance(c.value, (int, float)) and not isinstance(c.value, bool)
        ]
        if values:
            return min(values)
    return None


def _allreduce_of(node: str, sweep: AllreduceSweep | None) -> float | None:
    """The node's best pair (a slow node has no fast pair: allreduce_pairs), else the sweep's largest size."""
    if sweep is None or node not in sweep.nodes:
        return None
    best = best_pairs((p.nodes, p.busbw_gbps) for p in sweep.pairs)
    if len(sweep.pairs) > 1 and node in best:
        return best[node]
    largest = max(sweep.sizes, key=lambda s: s.bytes, default=None)
    return largest.busbw_gbps if largest else None


def node_row(report: HealthReport, file: str, sweep: AllreduceSweep | None) -> FleetNode:
    name = report.node or file
    return FleetNode(
        node=name,
        file=file,
        status=report.status,
        exit_code=report.exit_code,
        reason=report.reason,
        level=report.level,
        gpu_model=report.gpu_model,
        allreduce_busbw_gbps=_allreduce_of(name, sweep),
        **{metric: _slowest(report, names) for metric, names in SOURCES.items()},
    )


def fleet_report(reports: list[tuple[str, HealthReport]], sweep: AllreduceSweep | None, fraction: float = OUTLIER_FRACTION) -> FleetReport:
    rows = sorted((node_row(r, f, sweep) for f, r in reports), key=lambda n: n.node)
    medians: dict[str, float] = {}
    outliers: list[Outlier] = []
    for metric in METRICS:
        values = [(n.node, getattr(n, metric)) for n in rows if getattr(n, metric) is not None]
        if len(values) < 2:
            continue
        median = statistics.median(v for _, v in values)
        medians[metric] = median
        for node, value in values:
            if median > 0 and value < (1 - fraction) * median:
                outliers.append(Outlier(node=node, metric=metric, value=value, median=median, ratio=value / median))
    failing = [n.node for n in rows if n.status in FAILING]
    return FleetReport(
        outlier_fraction=fraction,
        nodes=rows,
        medians=medians,
        outliers=sorted(outliers, key=lambda o: o.ratio),
        failing=failing,
        allreduce=sweep,
    )


def findings(report: FleetReport) -> list[str]:
    """One line per finding, worst first: failing nodes, then outliers."""
    lines = [f"{n.node}: {n.reason or n.status.value}" for n in report.nodes if n.node in report.failing]
    lines += [f"{o.node}: {o.metric} {o.value:.4g} is {1 - o.ratio:.0%} below the fleet median {o.median:.4g}" for o in report.outliers]
    if report.allreduce:
        lines += [f"{' - '.join(p.nodes)}: all-reduce pair slow, busbw {p.busbw_gbps:.3g} GB/s" for p in report.allreduce.pairs if p.slow]
    return lines
