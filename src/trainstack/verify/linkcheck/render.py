"""Rich summary of a LinkReport."""

from __future__ import annotations

import os

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trainstack.verify.linkcheck.check import LinkReport

STYLE = {"error": "bold red", "warning": "yellow", "note": "dim"}


def short(path: str, report: LinkReport) -> str:
    """A path relative to the checked root it lies under, for narrow tables."""
    for root in report.paths:
        prefix = os.path.abspath(root).rstrip(os.sep) + os.sep
        if path.startswith(prefix):
            return path[len(prefix) :]
    return path


def render_links(report: LinkReport, console: Console, *, show_notes: bool = False) -> None:
    shown = [i for i in report.issues if show_notes or i.severity != "note"]
    if shown:
        table = Table(title="link check", show_lines=False)
        for column in ("severity", "kind", "object", "library", "detail"):
            table.add_column(column, overflow="fold")
        for issue in shown:
            table.add_row(f"[{STYLE[issue.severity]}]{issue.severity}[/]", issue.kind, escape(short(issue.file, report)), escape(issue.library), escape(issue.detail))
        console.print(table)
    unresolved = [c for c in report.candidates if c.resolved is None]
    notes = sum(1 for i in report.issues if i.severity == "note")
    verdict = "[bold green]OK[/]" if report.ok else f"[bold red]FAILED: {len(report.errors)} error(s)[/]"
    console.print(
        f"linkcheck {verdict}: {report.files_checked} ELF files, {report.needed_resolved} links resolved, "
        f"{len(report.issues) - notes - len(report.errors)} warning(s), {notes} note(s), "
        f"{len(report.candidates)} dlopen candidate(s) ({len(unresolved)} not found here), "
        f"{report.seconds:.2f} s on {report.workers} process(es)",
        highlight=False,
    )


def render_candidates(report: LinkReport, console: Console) -> None:
    table = Table(title="dlopen candidates (library names in read-only data)")
    for column in ("library", "found in", "resolves to"):
        table.add_column(column, overflow="fold")
    for cand in report.candidates:
        table.add_row(escape(cand.library), escape(short(cand.found_in, report)), cand.resolved or "[yellow]not found[/]")
    console.print(table)
