"""Readable rich summary of an EnvReport."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from trainstack.verify.report_schema import NOT_FOUND, EnvReport


def _paths(value: list[str] | str) -> str:
    return "\n".join(value) if isinstance(value, list) else value


def render_report(report: EnvReport, console: Console) -> None:
    table = Table(title=f"environment report: {report.target}", show_header=False)
    table.add_column("item", style="bold")
    table.add_column("value", overflow="fold")
    rows = [
        ("OS", f"{report.os.name} ({report.os.machine}, kernel {report.os.kernel})"),
        ("libc", f"{report.libc.name} {report.libc.version}"),
        ("Python", f"{report.python.version} {report.python.implementation} at {report.python.executable}"),
    ]
    rows += [
        (f"compiler {role}", f"{c.version} ({c.path}, {c.owner}'s)" if c.path != NOT_FOUND else NOT_FOUND)
        for role, c in report.compilers.items()
    ]
    arch = " ".join(report.torch.arch_list) if isinstance(report.torch.arch_list, list) else report.torch.arch_list
    rows += [
        ("torch", f"{report.torch.version} (CUDA {report.torch.cuda}, ROCm {report.torch.rocm})"),
        ("torch arch list", arch),
        ("cuDNN", f"compiled {report.cudnn.compiled}, runtime {report.cudnn.runtime}"),
        ("cuDNN loaded", _paths(report.cudnn.loaded)),
        ("NCCL", f"compiled {report.nccl.compiled}, runtime {report.nccl.runtime}"),
        ("NCCL loaded", _paths(report.nccl.loaded)),
        (
            "driver",
            f"{report.gpus.driver} (CUDA {report.gpus.cuda_driver})" if not report.gpus.reason else f"{NOT_FOUND}: {report.gpus.reason}",
        ),
    ]
    rows += [(f"GPU {g.index}", f"{g.name}, sm {g.capability}, {g.memory_mib} MiB") for g in report.gpus.gpus]
    rows += [(name, value) for name, value in report.allocator_env.items() if value != "not set"]
    rows.append(("packages", f"{len(report.packages)} installed"))
    for label, value in rows:
        table.add_row(label, str(value))
    console.print(table)
    _render_drift(report, console)
    _render_build(report, console)
    for section, message in report.errors.items():
        console.print(Text.assemble((f"probe {section}:", "yellow"), f" {message}"), highlight=False)


def _render_drift(report: EnvReport, console: Console) -> None:
    drift = report.drift
    if drift.lock.startswith(NOT_FOUND):
        console.print(f"drift: {drift.lock}", highlight=False)
        return
    if not (drift.missing or drift.different or drift.extra):
        console.print(Text.assemble("drift: ", ("none", "green"), f" against {drift.lock}"), highlight=False)
        return
    console.print(f"drift against {drift.lock}:", highlight=False)
    for name in drift.missing:
        console.print(Text.assemble(("  missing", "red"), f"   {name}"), highlight=False)
    for change in drift.different:
        console.print(
            Text.assemble(("  different", "red"), f" {change.name}: locked {change.locked}, installed {change.installed}"), highlight=False
        )
    if drift.extra:
        console.print(Text.assemble(("  extra", "yellow"), f"     {', '.join(drift.extra)}"), highlight=False)


def _render_build(report: EnvReport, console: Console) -> None:
    if not report.build.facts:
        recorded = "" if report.build.record.startswith(NOT_FOUND) else " (records no torch, CUDA or Python version)"
        console.print(f"build record: {report.build.record}{recorded}", highlight=False)
        return
    for fact in report.build.facts:
        mark = {True: ("same", "green"), False: ("DIFFERENT", "red")}.get(fact.match, "unknown")  # type: ignore[arg-type]  # fact.match is True, False or None: None takes the default
        console.print(Text.assemble(f"built with {fact.name} {fact.built}, runs {fact.runtime}: ", mark), highlight=False)
