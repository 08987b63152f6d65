"""The readable verify summary: each part in a few lines, then a loud verdict."""

from __future__ import annotations

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from trainstack.console import styled
from trainstack.verify.advisories import render_advisories
from trainstack.verify.envvars import EnvSetting
from trainstack.verify.filedrift import render_files
from trainstack.verify.linkcheck.render import render_links
from trainstack.verify.ops import OpTable, render_value
from trainstack.verify.report_render import render_report
from trainstack.verify.run import VerifyResult
from trainstack.verify.smoke import SmokeResult
from trainstack.verify.suites.schema import GateResult

STATUS = {"pass": "[green]pass[/]", "fail": "[bold red]FAIL[/]", "skip": "[yellow]skip[/]"}
SUITE = {
    "passed": "[green]passed[/]",
    "failed": "[bold red]FAILED[/]",
    "crashed": "[bold red]CRASHED[/]",
    "timeout": "[bold red]TIMED OUT[/]",
    "error": "[bold red]ERROR[/]",
}


def render_verify(result: VerifyResult, console: Console) -> None:
    if result.report is not None:
        render_report(result.report, console)
    if result.files is not None:
        render_files(result.files, console)
    if result.advisories is not None:
        render_advisories(result.advisories, console)
    if result.environment:
        render_environment(result.environment, console)
    if result.ops is not None:
        render_ops(result.ops, console)
    if result.links is not None:
        render_links(result.links, console)
    if result.smoke:
        render_smoke(result.smoke, console)
    if result.gate is not None:
        render_gate(result.gate, console)
    render_verdict(result, console)


def render_verify_quiet(result: VerifyResult, console: Console) -> None:
    """-q: what failed (each failing test with its reason, a suite that crashed) and the verdict."""
    if result.gate is not None:
        render_gate_failures(result.gate, console)
    render_verdict(result, console)


def render_environment(settings: list[EnvSetting], console: Console) -> None:
    out = Table(title="environment ([env] of the stack)")
    for column in ("variable", "stack", "activation sets", "status"):
        out.add_column(column, overflow="fold")
    for item in settings:
        found = "-" if not item.checked else (item.found if item.found is not None else "(not set)")
        status = "not checked (no bin/activate)" if not item.checked else ("ok" if item.ok else styled("[red]DIFFERS[/]"))
        out.add_row(item.name, item.declared, found, status)
    console.print(out)


def render_ops(table: OpTable, console: Console) -> None:
    if table.error:
        console.print(Text(f"op table: probe failed: {table.error}", style="yellow"), highlight=False)
        return
    if table.rows:
        out = Table(title="ops")
        for column in ("package", "op", "installed", "compatible", "GPU code", "why not"):
            out.add_column(column, overflow="fold")
        for row in table.rows:
            out.add_row(
                row.package,
                row.name,
                render_value(row.installed),
                render_value(row.compatible, "not run"),
                " ".join(row.archs),
                row.why_not,
            )
        console.print(out)
    for line in table.unbuilt:
        console.print(Text.assemble(("prebuilt op missing:", "red"), f" {line}"), highlight=False)
    if table.absent:
        console.print(f"ops: not installed: {', '.join(table.absent)}", highlight=False)


def render_smoke(results: list[SmokeResult], console: Console) -> None:
    out = Table(title="smoke checks")
    for column in ("check", "status", "seconds", "reason"):
        out.add_column(column, overflow="fold")
    for item in results:
        out.add_row(item.name, styled(STATUS[item.status]), f"{item.seconds:.2f}", item.reason)
    console.print(out)


def render_gate(gate: GateResult, console: Console) -> None:
    """Every name, test id, reason and link from the suites as plain Text: never read as markup."""
    if gate.isolation:
        console.print(Text(f"suites isolation: {gate.isolation}"), highlight=False, soft_wrap=True)
    out = Table(title="test suites")
    for column in (
        "suite",
        "status",
        "ran",
        "failing",
        "collection errors",
        "flaky",
        "known",
        "excluded",
        "counts vs pytest's summary",
        "seconds",
    ):
        out.add_column(column, overflow="fold")
    for suite in gate.suites:
        out.add_row(
            Text(suite.name),
            styled(SUITE[suite.status]),
            str(suite.ran),
            f"{suite.remaining} (max {suite.max_failed})",
            str(len(suite.collection_errors)),
            str(len(suite.flaky)),
            str(len(suite.known)),
            str(len(suite.excluded)),
            Text(suite.cross_check or "-"),
            f"{suite.seconds:.1f}",
        )
    console.print(out)
    render_gate_failures(gate, console, flaky_known_excluded=True)


def render_gate_failures(gate: GateResult, console: Console, *, flaky_known_excluded: bool = False) -> None:
    """Each suite's failing tests (with pytest's reason), what a crashed suite said and the gate's
    warnings; the flaky, known and excluded tests too unless only failures are asked (-q)."""
    for suite in gate.suites:
        for test in suite.failed[:20]:
            _line(console, ("  failing", "red"), f" {suite.name}: {test}{_why(suite.failure_reasons, test)}")
        if len(suite.failed) > 20:
            _line(console, f"  ... and {len(suite.failed) - 20} more in {suite.name}")
        if suite.status in ("crashed", "timeout", "error"):
            _line(console, (f"  {suite.name}: {suite.reason}", "bold red"))
        if not flaky_known_excluded:
            continue
        for test in suite.flaky:
            _line(
                console, ("  flaky", "yellow"), f"   {suite.name}: {test} (failed, then passed on rerun){_why(suite.failure_reasons, test)}"
            )
        for hit in suite.known:
            _line(console, ("  known", "dim"), f"   {suite.name}: {hit.test}: {hit.reason} ({hit.link})")
        for item in suite.excluded:
            _line(console, ("  excluded", "dim"), f" {suite.name}: {item.test}: {item.reason} (not run)")
    for warning in gate.warnings:
        _line(console, ("warning:", "yellow"), f" {warning}")


def _line(console: Console, *parts: str | tuple[str, str]) -> None:
    """One line of plain parts and (text, style) parts: what they hold is printed as written."""
    console.print(Text.assemble(*parts), highlight=False, soft_wrap=True)


def _why(reasons: dict[str, str], test: str) -> str:
    """' - AssertionError: assert 1 == 2', as pytest's short summary ends a failure's line."""
    return f" - {reasons[test]}" if reasons.get(test) else ""


def render_verdict(result: VerifyResult, console: Console) -> None:
    where = f"{result.stack} [{result.flavour}]" if result.stack else result.target
    skipped = f" (skipped: {', '.join(result.skipped)})" if result.skipped else ""
    if result.not_built:
        _line(console, f"not built (build --skip-sources): {', '.join(result.not_built)}: not checked, not failures")
    if result.verdict == "pass":
        console.print(Panel(Text.assemble(("VERIFY PASSED", "bold green"), f" {where} in {result.seconds:.1f} s{skipped}"), expand=False))
        return
    lines = "\n".join(f"- {reason}" for reason in result.reasons[:30])
    more = f"\n... and {len(result.reasons) - 30} more" if len(result.reasons) > 30 else ""
    console.print(
        Panel(Text.assemble(("VERIFY FAILED", "bold red"), f" {where}{skipped}\n{lines}{more}"), border_style="red", expand=False),
        highlight=False,
    )
