"""RELEASE.md from ReleaseNotes. Pure: notes in, text out."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from trainstack.release.model import BenchRow, Change, Fragment, ReleaseNotes, Updates
from trainstack.release.results import NOT_RUN, PARTIAL_VERIFY_NAME

NOT_MEASURED = "not measured"
MISSING = "—"  # a figure that was not measured, in a table whose legend says so
LEGEND = "— : not measured."


def fmt_number(value: float | None, digits: int = 0) -> str:
    return MISSING if value is None else f"{value:,.{digits}f}"


def fmt_delta(row: BenchRow) -> str:
    delta = row.delta_percent
    return MISSING if delta is None else f"{delta:+.1f} %"


def fmt_throughput(row: BenchRow) -> str:
    """The figure, or the bench's status ("oom", "unavailable") where it measured none."""
    return row.status if row.tokens_per_s is None and row.status != "ok" else fmt_number(row.tokens_per_s)


def fmt_mfu(value: float | None) -> str:
    return MISSING if value is None else f"{value * 100:.1f} %"


def fmt_count(value: int | None) -> str:
    return MISSING if value is None else str(value)


def flavour_label(slugs: Sequence[str], every: int) -> str:
    return "all flavours" if len(slugs) == every else ", ".join(slugs)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _bullet(text: str) -> str:
    first, *rest = text.splitlines()
    return "\n".join([f"- {first}", *(f"  {line}" if line.strip() else "" for line in rest)])


def _changes(changes: list[Change]) -> list[str]:
    components = [c for c in changes if c.component]
    others = [c for c in changes if not c.component]
    lines = [f"- {c.text()}" for c in components]
    if others:
        lines += (["", "Dependencies:", ""] if components else []) + [f"- {c.text()}" for c in others]
    return lines


def updates_lines(updates: Updates, previous: str | None) -> list[str]:
    """Changes since the previous release; for a first release (``previous`` None) every
    package, as added."""
    if updates.empty:
        return [f"No version changes since {previous}." if previous else "No packages."]
    lines: list[str] = []
    if updates.common:
        since = f"Changes since {previous}, in every flavour:" if previous else "The first release, in every flavour:"
        lines += [since, "", *_changes(updates.common), ""]
    for slugs, changes in updates.groups():
        lines += [f"### Only in {', '.join(slugs)}", "", *_changes(changes), ""]
    if updates.added_flavours:
        lines += [f"New flavours: {', '.join(updates.added_flavours)}.", ""]
    if updates.removed_flavours:
        lines += [f"Dropped flavours: {', '.join(updates.removed_flavours)}.", ""]
    return lines[:-1] if lines and not lines[-1] else lines


def versions_lines(notes: ReleaseNotes) -> list[str]:
    versions, every = notes.versions, len(notes.flavours)
    header = ["component", *(flavour_label(slugs, every) for slugs in versions.columns)]
    return table(header, ([name, *(v or "—" for v in row)] for name, row in versions.rows.items()))


def _prose(fragments: list[Fragment]) -> list[str]:
    return [_bullet(f.text) for f in fragments]


def render_markdown(notes: ReleaseNotes) -> str:
    prose = notes.sections()
    out = [f"# {notes.title}", ""]
    if notes.description:
        out += [notes.description, ""]
    out += [f"Release {notes.release} of `{notes.image}`, {following(notes)}.", ""]
    if "Highlights" in prose:
        out += ["## Highlights", "", *_prose(prose["Highlights"]), ""]
    out += ["## Updates", "", *updates_lines(notes.updates, notes.previous_release), ""]
    out += ["### Versions", "", *versions_lines(notes), ""]
    for title in ("Stability", "Fixes"):
        if title in prose:
            out += [f"## {title}", "", *_prose(prose[title]), ""]
    out += ["## Flavours and images", "", *table(
        ["flavour", "CUDA", "OS", "Python", "channel", "image", "cache key"],
        ([f.slug, f.cuda, f.os, f.python, f.channel, f"`{f.image}`", f"`{f.cache_key}`"] for f in notes.flavours),
    ), ""]
    out += ["## Driver requirements", "", *table(
        ["flavour", "CUDA", "minimum driver", "source"],
        ([d.slug, d.cuda, d.min_driver or d.note, d.source or "—"] for d in notes.drivers),
    ), ""]
    out += ["## Verification", "", *verification_lines(notes), ""]
    out += ["## Performance", "", *performance_lines(notes.performance), ""]
    if "Performance notes" in prose:
        out += ["### Performance notes", "", *_prose(prose["Performance notes"]), ""]
    out += known_issue_lines(notes)
    out += ["## Quick start", ""]
    for quick in notes.quick_start:
        out += [f"{quick.slug}:", "", "```sh", *quick.commands, "```", ""]
    return "\n".join(out).rstrip() + "\n"


def following(notes: ReleaseNotes) -> str:
    return f"following {notes.previous_release}" if notes.previous_release else "its first release"


def verification_lines(notes: ReleaseNotes) -> list[str]:
    rows = []
    for v in notes.verification:
        if not v.measured:
            rows.append([v.slug, NOT_MEASURED, MISSING, MISSING, MISSING, MISSING])
        else:
            rows.append([v.slug, v.verdict or NOT_MEASURED, fmt_count(v.tests_run), fmt_count(v.tests_failed),
                         fmt_count(v.tests_allowed), source_label(v.source)])
    lines = [*table(["flavour", "verdict", "tests run", "failed", "allowed", "result file"], rows), "", LEGEND]
    for v in notes.verification:
        if v.reasons:
            lines += ["", reasons_heading(v.slug, v.verdict) + ":", "", *(f"- {r}" for r in shown_reasons(v.reasons))]
    return lines


def source_label(source: str | None) -> str:
    """The result file a verification was read from, and whether it was a partial run."""
    if source is None:
        return MISSING
    name = source.rsplit("/", 1)[-1]
    return f"{name} (partial: parts skipped)" if name == PARTIAL_VERIFY_NAME else name


def reasons_heading(slug: str, verdict: str | None) -> str:
    """'Why X failed' for a failure only: a gate that did not run did not fail."""
    if verdict == "fail":
        return f"Why {slug} failed"
    if verdict == NOT_RUN:
        return f"Why the test gate of {slug} did not run"
    return f"Notes on {slug}"


def shown_reasons(reasons: list[str], limit: int = 10) -> list[str]:
    """The first ``limit`` reasons, and how many more verify.json holds."""
    extra = [f"… and {len(reasons) - limit} more in verify.json"] if len(reasons) > limit else []
    return reasons[:limit] + extra


def performance_lines(rows: list[BenchRow]) -> list[str]:
    if not rows:
        return ["Not measured: no bench results were given for this release."]
    return [*table(
        ["flavour", "model", "setup", "mode", "tokens/s per GPU", "previous", "change", "MFU", "peak memory (GiB)"],
        ([r.slug or "all", r.model, r.setup or "", r.mode, fmt_throughput(r), fmt_number(r.previous_tokens_per_s),
          fmt_delta(r), fmt_mfu(r.mfu), fmt_number(r.peak_memory_gib, 1)] for r in rows),
    ), "", LEGEND]


def known_issue_lines(notes: ReleaseNotes) -> list[str]:
    from_verify = [(v.slug, issue) for v in notes.verification for issue in v.known_issues]
    fragments = notes.sections().get("Known issues", [])
    if not from_verify and not fragments:
        return []
    lines = ["## Known issues", "", *_prose(fragments)]
    for slug, issue in from_verify:
        title = f"[{issue.title}]({issue.link})" if issue.link else issue.title
        lines.append(f"- {title} ({slug})")
    return [*lines, ""]
