"""RELEASE.md from ReleaseNotes. Pure: notes in, text out.

Every value the notes hold is escaped by one function, ``text`` (literal text on one line: a
table cell, a list item, a heading's words); ``link`` writes its title with it and its target
only where that is an http(s) URL or a relative path (percent-encoded, else plain text), and
``code`` falls back to it where a code span could be closed. Validation refuses what does not
belong in a value already; this is the second wall, so that no value becomes a heading, a
link, a table row or HTML of its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from urllib.parse import quote, urlsplit

from trainstack import grammar
from trainstack.release.results import NOT_BUILT, NOT_RUN, PARTIAL_VERIFY_NAME
from trainstack.release.schema import Attribution, AttributionStep, BenchRow, Change, Fragment, ReleaseNotes, Updates

NOT_MEASURED = "not measured"
MISSING = "—"  # a figure that was not measured, in a table whose legend says so
LEGEND = "— : not measured."

# what CommonMark (and GitHub's tables and strikethrough) reads as markup anywhere in a line
_INLINE = re.compile(r"([\\`*_\[\]<>!|~&])")
# what it reads as the start of a block at the start of a line (a list item's too)
_BLOCK_START = re.compile(r"^(#|>|[-+=]|\d+(?=[.)]))")
_WEB = ("http", "https")
# a link target's characters kept as they are; the rest (parentheses, brackets, '<', spaces) percent-encoded
_KEPT_IN_TARGET = "/:?#@!$&'*+,;=%~.-_"


def text(value: object, *, line_start: bool = False) -> str:
    """``value`` as literal Markdown text on one line: line breaks and invisible characters
    become one space, markup characters are backslash-escaped, and with ``line_start`` (the
    value begins a line or a list item) a block marker at its start too."""
    shown = _INLINE.sub(r"\\\1", _one_line(str(value)))
    if not line_start:
        return shown
    return _BLOCK_START.sub(lambda m: m.group(1) + "\\" if m.group(1)[0].isdigit() else "\\" + m.group(1), shown, count=1)


def _one_line(value: str) -> str:
    """Line breaks, other controls and invisible characters (the grammar's one list) as spaces."""
    return re.sub(" {2,}", " ", grammar.CONTROL.sub(" ", value)).strip()


def safe_target(url: str | None) -> str | None:
    """``url`` when a page may link to it: http(s) with a host, or a relative path (no scheme,
    no '//' host); None otherwise (javascript:, data:, file:, a value with a line break)."""
    if not url or grammar.CONTROL.search(url) or any(c in url for c in " \\<>\"'`"):
        return None
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return None
    if parts.scheme:
        return url if parts.scheme in _WEB and host and url.lower().startswith(parts.scheme + "://") else None
    return None if url.startswith("//") or ":" in url.split("/", 1)[0] else url


def link(title: object, url: str | None, *, line_start: bool = False) -> str:
    """A Markdown link to ``url`` with the literal text ``title``; where the target is not
    one a page may link to, the title and the target as plain text, not clickable."""
    target = safe_target(url)
    if target is None:
        return text(title, line_start=line_start) if not url else f"{text(title, line_start=line_start)} ({text(url)})"
    # percent-encode what could end the destination or the link: parentheses, brackets
    return f"[{text(title)}]({quote(target, safe=_KEPT_IN_TARGET)})"


def code(value: object) -> str:
    """A code span of ``value``; literal text where it holds a backtick, a '|' (a table's cell
    ends there even inside a code span) or a line break."""
    shown = str(value)
    return text(shown) if "`" in shown or "|" in shown or grammar.CONTROL.search(shown) else f"`{shown}`"


def fence(lines: Sequence[str]) -> list[str]:
    """A fenced code block of ``lines``: the fence longer than any run of backticks in them."""
    body = [_one_line(line) for line in lines]
    longest = max((len(run) for line in body for run in re.findall("`+", line)), default=0)
    marker = "`" * max(3, longest + 1)
    return [f"{marker}sh", *body, marker]


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


class Md(str):
    """Markdown already made by ``text``, ``link`` or ``code``: a table takes it as it is."""


def _cell(value: str) -> str:
    return value if isinstance(value, Md) else text(value)


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """A table of literal cells (or ``Md`` ones): a '|' or a line break never makes a column or a row."""
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _bullet(text: str) -> str:
    first, *rest = text.splitlines()
    return "\n".join([f"- {first}", *(f"  {line}" if line.strip() else "" for line in rest)])


def _changes(changes: list[Change]) -> list[str]:
    components = [c for c in changes if c.component]
    others = [c for c in changes if not c.component]
    lines = [f"- {text(c.text(), line_start=True)}" for c in components]
    if others:
        lines += (["", "Dependencies:", ""] if components else []) + [f"- {text(c.text(), line_start=True)}" for c in others]
    return lines


def updates_lines(updates: Updates, previous: str | None) -> list[str]:
    """Changes since the previous release; for a first release (``previous`` None) every
    package, as added."""
    if updates.empty:
        return [f"No version changes since {text(previous)}." if previous else "No packages."]
    lines: list[str] = []
    if updates.image is not None:
        lines += [f"The image is renamed: {code(updates.image.old or '')} → {code(updates.image.new or '')}.", ""]
    for slug, before in updates.followed.items():
        moved = "; ".join(updates.moves.get(slug, []))
        lines += [f"{text(slug, line_start=True)} follows {text(before)}: {text(moved)}.", ""]
    if updates.common:
        since = f"Changes since {text(previous)}, in every flavour:" if previous else "The first release, in every flavour:"
        lines += [since, "", *_changes(updates.common), ""]
    for slugs, changes in updates.groups():
        lines += [f"### Only in {text(', '.join(slugs))}", "", *_changes(changes), ""]
    for slug, changes in updates.settings.items():
        lines += [f"### Base image and build settings of {text(slug)}", "", *(f"- {text(c.text(), line_start=True)}" for c in changes), ""]
    if updates.added_flavours:
        lines += [f"New flavours: {text(', '.join(updates.added_flavours))}.", ""]
    if updates.removed_flavours:
        lines += [f"Dropped flavours: {text(', '.join(updates.removed_flavours))}.", ""]
    return lines[:-1] if lines and not lines[-1] else lines


def versions_lines(notes: ReleaseNotes) -> list[str]:
    versions, every = notes.versions, len(notes.flavours)
    header = ["component", *(flavour_label(slugs, every) for slugs in versions.columns)]
    return table(header, ([name, *(v or "—" for v in row)] for name, row in versions.rows.items()))


def _prose(fragments: list[Fragment]) -> list[str]:
    return [_bullet(f.text) for f in fragments]


def render_markdown(notes: ReleaseNotes) -> str:
    prose = notes.sections()
    out = [f"# {text(notes.title)}", ""]
    if notes.description:
        out += [text(notes.description, line_start=True), ""]
    out += [f"Release {text(notes.release)} of {code(notes.image)}, {following(notes)}.", ""]
    if "Highlights" in prose:
        out += ["## Highlights", "", *_prose(prose["Highlights"]), ""]
    out += ["## Updates", "", *updates_lines(notes.updates, notes.previous_release), ""]
    out += ["### Versions", "", *versions_lines(notes), ""]
    for title in ("Stability", "Fixes"):
        if title in prose:
            out += [f"## {title}", "", *_prose(prose[title]), ""]
    out += [
        "## Flavours and images",
        "",
        *table(
            ["flavour", "CUDA", "OS", "Python", "channel", "image", "cache key"],
            ([f.slug, f.cuda, f.os, f.python, f.channel, Md(code(f.image)), Md(code(f.cache_key))] for f in notes.flavours),
        ),
        "",
    ]
    out += [
        "## Driver requirements",
        "",
        *table(
            ["flavour", "CUDA", "minimum driver", "source"],
            ([d.slug, d.cuda, d.min_driver or d.note, Md(link("rules source", d.source)) if d.source else MISSING] for d in notes.drivers),
        ),
        "",
    ]
    out += ["## Verification", "", *verification_lines(notes), ""]
    out += ["## Performance", "", *performance_lines(notes.performance), ""]
    out += attribution_lines(notes.attribution)
    if "Performance notes" in prose:
        out += ["### Performance notes", "", *_prose(prose["Performance notes"]), ""]
    out += known_issue_lines(notes)
    out += advisory_lines(notes)
    out += ["## Quick start", ""]
    for quick in notes.quick_start:
        out += [f"{text(quick.slug, line_start=True)}:", "", *fence(quick.commands), ""]
    return "\n".join(out).rstrip() + "\n"


def advisory_lines(notes: ReleaseNotes) -> list[str]:
    """## Security advisories: per flavour, the OSV advisories fixed, added and still affecting it."""
    if notes.advisories_read is None:
        return []
    lines = [
        "## Security advisories",
        "",
        f"{notes.advisories_read} OSV advisories read; those that affect each flavour's locked packages, {following(notes)}:",
        "",
    ]
    rows = []
    for flavour in notes.advisories:
        for status, items in (("fixed", flavour.fixed), ("added", flavour.added), ("remaining", flavour.remaining)):
            rows += [
                [flavour.slug, status, a.id, a.severity, f"{a.package} {a.version}", ", ".join(a.fixed) or MISSING, a.summary]
                for a in items
            ]
    if not rows:
        return lines[:2] + ["None affects any flavour's locked packages.", ""]
    return lines + table(["flavour", "status", "advisory", "severity", "package", "fixed in", "summary"], rows) + [""]


def following(notes: ReleaseNotes) -> str:
    return f"following {text(notes.previous_release)}" if notes.previous_release else "its first release"


def verification_lines(notes: ReleaseNotes) -> list[str]:
    rows = []
    for v in notes.verification:
        if not v.measured:
            rows.append([v.slug, NOT_MEASURED, MISSING, MISSING, MISSING, MISSING])
        else:
            rows.append(
                [
                    v.slug,
                    v.verdict or NOT_MEASURED,
                    fmt_count(v.tests_run),
                    fmt_count(v.tests_failed),
                    fmt_count(v.tests_allowed),
                    source_label(v.source),
                ]
            )
    lines = [*table(["flavour", "verdict", "tests run", "failed", "allowed", "result file"], rows), "", LEGEND]
    for v in notes.verification:
        if v.reasons:
            lines += [
                "",
                reasons_heading(v.slug, v.verdict) + ":",
                "",
                *(f"- {text(r, line_start=True)}" for r in shown_reasons(v.reasons)),
            ]
    for v in notes.verification:
        if v.failures:
            lines += [
                "",
                failures_heading(v.slug) + ":",
                "",
                *(
                    f"- {code(item.test)} ({text(item.suite)})" + (f": {text(item.reason)}" if item.reason else "")
                    for item in shown_excluded(v.failures)
                ),
            ]
            if len(v.failures) > EXCLUDED_SHOWN:
                lines.append(f"- … and {len(v.failures) - EXCLUDED_SHOWN} more in verify.json")
    for v in notes.verification:
        if v.excluded:
            lines += [
                "",
                excluded_heading(v.slug) + ":",
                "",
                *(f"- {code(item.test)}: {text(item.reason)}" for item in shown_excluded(v.excluded)),
            ]
            if len(v.excluded) > EXCLUDED_SHOWN:
                lines.append(f"- … and {len(v.excluded) - EXCLUDED_SHOWN} more in verify.json")
    return lines


EXCLUDED_SHOWN = 50  # excluded tests listed per flavour; the rest are counted


def failures_heading(slug: str) -> str:
    return f"Tests failing in {text(slug)}'s gate"


def excluded_heading(slug: str) -> str:
    return f"Tests excluded from {text(slug)}'s gate (not run)"


def shown_excluded(items: list) -> list:
    return items[:EXCLUDED_SHOWN]


def source_label(source: str | None) -> str:
    """The result file a verification was read from, and whether it was a partial run."""
    if source is None:
        return MISSING
    name = source.rsplit("/", 1)[-1]
    return f"{name} (partial: parts skipped)" if name == PARTIAL_VERIFY_NAME else name


def reasons_heading(slug: str, verdict: str | None) -> str:
    """'Why X failed' for a failure only: a gate that did not run did not fail."""
    if verdict == "fail":
        return f"Why {text(slug)} failed"
    if verdict == NOT_RUN:
        return f"Why the test gate of {text(slug)} did not run"
    if verdict == NOT_BUILT:
        return f"What {text(slug)} did not build"
    return f"Notes on {text(slug)}"


def shown_reasons(reasons: list[str], limit: int = 10) -> list[str]:
    """The first ``limit`` reasons, and how many more verify.json holds."""
    extra = [f"… and {len(reasons) - limit} more in verify.json"] if len(reasons) > limit else []
    return reasons[:limit] + extra


def performance_lines(rows: list[BenchRow]) -> list[str]:
    if not rows:
        return ["Not measured: no bench results were given for this release."]
    return [
        *table(
            ["flavour", "model", "setup", "mode", "tokens/s per GPU", "previous", "change", "MFU", "peak memory (GiB)"],
            (
                [
                    r.slug or "all",
                    r.model,
                    r.setup or "",
                    r.mode,
                    fmt_throughput(r),
                    fmt_number(r.previous_tokens_per_s),
                    fmt_delta(r),
                    fmt_mfu(r.mfu),
                    fmt_number(r.peak_memory_gib, 1),
                ]
                for r in rows
            ),
        ),
        "",
        LEGEND,
    ]


ATTRIBUTION_HEADER = ["step", "what changed", "tokens/s per GPU", "repeats", "spread", "change", "contribution", "share", "confidence"]
ATTRIBUTION_LEGEND = (
    "Each step changes one component group over the step before it (bench --attribute), each "
    "environment benched in repeats, interleaved; a step's contribution is its change in points of "
    "the base's figure (they add up to the total); a change no larger than the noise floor (the largest "
    "spread of one environment's repeats) is within noise."
)


def attribution_title(a: Attribution) -> str:
    what = " ".join(p for p in (a.model, a.mode, a.setup) if p)
    return f"{a.previous_release} → {a.release}, {what}" + (f" ({a.slug})" if a.slug else "")


def attribution_cells(step: AttributionStep) -> list[str]:
    """One step's cells, as text: the table of the notes and the page's alike."""

    def pct(value: float | None) -> str:
        return f"{value * 100:+.1f}%" if value is not None else ""

    changed = step.changed or ("base" if step.step == "base" else step.step)
    if step.note:
        changed += f" ({step.note})"
    return [
        step.step,
        changed,
        fmt_number(step.median, 1),
        str(step.repeats),
        f"{step.spread * 100:.1f}%",
        pct(step.change),
        pct(step.contribution),
        f"{step.share * 100:.0f}%" if step.share is not None else "",
        step.confidence,
    ]


def attribution_lines(attributions: list[Attribution]) -> list[str]:
    """Per attribution: its headline, its table and the noise floor."""
    lines = []
    for a in attributions:
        lines += [
            f"### What changed the speed: {text(attribution_title(a))}",
            "",
            text(a.headline, line_start=True),
            "",
            *table(ATTRIBUTION_HEADER, (attribution_cells(s) for s in a.steps)),
            "",
            text(f"Noise floor {a.noise_floor * 100:.1f}%. {ATTRIBUTION_LEGEND}", line_start=True),
            "",
        ]
    return lines


def known_issue_lines(notes: ReleaseNotes) -> list[str]:
    from_verify = [(v.slug, issue) for v in notes.verification for issue in v.known_issues]
    fragments = notes.sections().get("Known issues", [])
    if not from_verify and not fragments:
        return []
    lines = ["## Known issues", "", *_prose(fragments)]
    for slug, issue in from_verify:
        lines.append(f"- {link(issue.title, issue.link, line_start=True)} ({text(slug)})")
    return [*lines, ""]
