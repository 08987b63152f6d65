"""Rich summary of a LinkReport: one row per missing library and what it means."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from trainstack.console import styled
from trainstack.verify.linkcheck.check import LinkIssue, LinkReport

STYLE = {"error": "bold red", "warning": "yellow", "note": "dim"}
STATUS = {
    "broken": "[bold red]broken[/]",
    "blocked": "[yellow]blocked[/]",
    "optional": "[cyan]optional[/]",
    "resolved-at-run-time": "[green]resolved at run time[/]",
    "unconfirmed": "[yellow]unconfirmed[/]",
}
FIRST = 3  # objects named per row; the rest are counted


def short(path: str, report: LinkReport) -> str:
    """A path relative to the checked root it lies under, for narrow tables."""
    for root in report.paths:
        prefix = os.path.abspath(root).rstrip(os.sep) + os.sep
        if path.startswith(prefix):
            rest = path[len(prefix) :]
            site = rest.find("site-packages/")
            return _no_abi_tag(rest[site + len("site-packages/") :] if site >= 0 else rest)
    return _no_abi_tag(path)


def _no_abi_tag(path: str) -> str:
    """'numpy/_core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so' -> '..._multiarray_umath.so'."""
    head, _, tail = path.partition(".cpython-")
    return head + ".so" if tail.endswith(".so") else path


@dataclass
class Cause:
    """Every finding of one library with one outcome."""

    library: str
    status: str
    kind: str
    severity: str
    issues: list[LinkIssue] = field(default_factory=list)


def group_by_cause(issues: list[LinkIssue]) -> list[Cause]:
    causes: dict[tuple[str, str, str], Cause] = {}
    for issue in issues:
        status = issue.status or issue.severity
        key = (issue.library, status, issue.kind)
        causes.setdefault(key, Cause(issue.library, status, issue.kind, issue.severity)).issues.append(issue)
    order = {"error": 0, "warning": 1, "note": 2}
    return sorted(causes.values(), key=lambda c: (order[c.severity], c.library))


def needed_by(cause: Cause, report: LinkReport) -> str:
    names = sorted({short(i.file, report) for i in cause.issues})
    shown = ", ".join(names[:FIRST])
    return f"{len(names)}: {shown}" + (f", +{len(names) - FIRST} more" if len(names) > FIRST else "")


def chain_text(issue: LinkIssue) -> str:
    """'_C.so → libtorch_python.so → libtorch_cuda.so → libnccl.so.2' (empty when the object
    needing the library is itself the outermost)."""
    if len(issue.chain) < 2:
        return ""
    return " → ".join([*(_no_abi_tag(os.path.basename(p)) for p in issue.chain), issue.library])


def provided_by(cause: Cause) -> str:
    """The package that provides the library; for a broken one, the command that restores it."""
    provider = cause.issues[0].provider
    if cause.status == "broken" and "==" in provider:
        return "pip install --force-reinstall " + provider.split(" (", 1)[0]
    return provider or "-"


def render_links(report: LinkReport, console: Console, *, show_notes: bool = False) -> None:
    shown = [i for i in report.issues if not i.accepted and (show_notes or (i.severity != "note" or i.status) and i.status != "blocked")]
    blocked = [i for i in report.issues if i.status == "blocked" and i not in shown]
    if shown:
        causes = group_by_cause(shown)
        chains = any(chain_text(c.issues[0]) for c in causes)
        table = Table(title="link check, by missing library", show_lines=True)
        for column in ("status", "library", "needed by", *(["chain"] if chains else []), "provided by", "why"):
            table.add_column(column, overflow="fold")
        for cause in causes:
            first = cause.issues[0]
            status = styled(STATUS.get(cause.status, f"[{STYLE[cause.severity]}]{escape(cause.status)}[/] {escape(cause.kind)}"))
            chain = [chain_text(first)] if chains else []
            table.add_row(status, cause.library, needed_by(cause, report), *chain, provided_by(cause), first.reason or first.detail)
        console.print(table)
    for issue in report.accepted:
        link = f" ({issue.accepted_link})" if issue.accepted_link else ""
        console.print(
            Text.assemble(("  accepted", "dim"), f" {short(issue.file, report)} needs {issue.library}: {issue.accepted}{link}"),
            highlight=False,
        )
    if blocked:
        console.print(
            f"linkcheck: {len(blocked)} more finding(s) of installed libraries follow from the broken ones "
            "(their package does not import); --notes lists them",
            highlight=False,
        )
    if report.confirmation:
        console.print(f"linkcheck: {report.confirmation}", highlight=False)
    unresolved = [c for c in report.candidates if c.resolved is None]
    notes = sum(1 for i in report.issues if i.severity == "note")
    verdict = "[bold green]OK[/]" if report.ok else f"[bold red]FAILED: {len(report.errors)} error(s)[/]"
    console.print(
        styled(f"linkcheck {verdict}: ") + f"{report.files_checked} ELF files, {report.needed_resolved} links resolved, "
        f"{len(report.issues) - notes - len(report.errors) - len(report.accepted)} warning(s), {notes} note(s)"
        f"{' (linkcheck --notes lists them)' if notes and not show_notes else ''}, "
        + (f"{len(report.accepted)} accepted ([verify.links] accept), " if report.accepted else "")
        + f"{len(report.candidates)} dlopen candidate(s) ({len(unresolved)} not found here), "
        f"{report.seconds:.2f} s on {report.workers} process(es)"
        + (f", confirmed in {report.confirm_seconds:.2f} s" if report.confirmed_in else ""),
        highlight=False,
    )


def render_candidates(report: LinkReport, console: Console) -> None:
    table = Table(title="dlopen candidates (library names in read-only data)")
    for column in ("library", "found in", "resolves to"):
        table.add_column(column, overflow="fold")
    for cand in report.candidates:
        table.add_row(cand.library, short(cand.found_in, report), cand.resolved or styled("[yellow]not found[/]"))
    console.print(table)
