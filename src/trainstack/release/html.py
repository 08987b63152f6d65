"""release.html from ReleaseNotes: one self-contained page (inline CSS, charts as inline PNG)."""

from __future__ import annotations

from dataclasses import dataclass

from trainstack.release.markdown import (
    ATTRIBUTION_HEADER,
    ATTRIBUTION_LEGEND,
    EXCLUDED_SHOWN,
    LEGEND,
    MISSING,
    NOT_MEASURED,
    attribution_cells,
    attribution_title,
    flavour_label,
    fmt_count,
    fmt_delta,
    fmt_mfu,
    fmt_number,
    fmt_throughput,
    reasons_heading,
    safe_target,
    shown_excluded,
    shown_reasons,
    source_label,
)
from trainstack.release.plots import Chart, attribution_charts
from trainstack.release.schema import BenchRow, Fragment, KnownIssue, ReleaseNotes


@dataclass(frozen=True)
class ProseItem:
    html: object  # markupsafe.Markup of the fragment's Markdown


def _markdown_html(fragments: list[Fragment]) -> list[ProseItem]:
    from markdown_it import MarkdownIt
    from markupsafe import Markup

    # raw HTML in a fragment is shown as text, never executed; a link only to http(s) or a relative path
    class SafeLinks(MarkdownIt):
        def validateLink(self, url: str) -> bool:  # markdown-it's name
            return safe_target(url) is not None

    md = SafeLinks("commonmark", {"html": False})
    return [ProseItem(html=Markup(md.render(f.text))) for f in fragments]


def _safe_issue(issue: KnownIssue) -> KnownIssue:
    if issue.link and safe_target(issue.link) is None:
        return KnownIssue(title=f"{issue.title} ({issue.link})")
    return issue


def _verdict_class(verdict: str | None) -> str:
    if verdict is None:
        return "muted"
    return "pass" if verdict.lower() in ("pass", "passed", "ok") else "fail"


def _delta_class(row: BenchRow) -> str:
    delta = row.delta_percent
    return "" if delta is None else ("pass" if delta >= 0 else "fail")


def render_html(notes: ReleaseNotes, charts: list[Chart]) -> str:
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    env = Environment(
        loader=PackageLoader("trainstack.release", "templates"),
        autoescape=select_autoescape(default=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    sections = {title: _markdown_html(items) for title, items in notes.sections().items()}
    known = [(v.slug, _safe_issue(i)) for v in notes.verification for i in v.known_issues]
    return env.get_template("release.html.j2").render(
        notes=notes,
        nav=_nav(sections, bool(known), notes.advisories_read is not None),
        sections=_Sections(sections),
        version_columns=[
            [flavour_label(slugs, len(notes.flavours))] if len(slugs) == len(notes.flavours) else slugs for slugs in notes.versions.columns
        ],
        known_issues=known,
        charts=charts,
        not_measured=NOT_MEASURED,
        missing=MISSING,
        legend=LEGEND,
        count=fmt_count,
        number=fmt_number,
        delta=fmt_delta,
        mfu=fmt_mfu,
        throughput=fmt_throughput,
        shown_reasons=shown_reasons,
        reasons_heading=reasons_heading,
        shown_excluded=shown_excluded,
        excluded_shown=EXCLUDED_SHOWN,
        source_label=source_label,
        verdict_class=_verdict_class,
        safe_href=safe_target,
        delta_class=_delta_class,
        attribution_title=attribution_title,
        attribution_cells=attribution_cells,
        attribution_header=ATTRIBUTION_HEADER,
        attribution_legend=ATTRIBUTION_LEGEND,
        attribution_charts=attribution_charts(notes.attribution),
    )


class _Sections(dict):
    """Section title -> prose items; a section without fragments is an empty list."""

    def __missing__(self, key: str) -> list[ProseItem]:
        return []

    def __getattr__(self, key: str) -> list[ProseItem]:
        if key.startswith("_"):
            raise AttributeError(key)
        return self[key]


def _nav(sections: dict[str, list[ProseItem]], known: bool, advisories: bool = False) -> list[tuple[str, str]]:
    nav = [("highlights", "Highlights")] if "Highlights" in sections else []
    nav.append(("updates", "Updates"))
    nav += [(t.lower(), t) for t in ("Stability", "Fixes") if t in sections]
    nav += [
        ("flavours", "Flavours and images"),
        ("drivers", "Driver requirements"),
        ("verification", "Verification"),
        ("performance", "Performance"),
    ]
    if known or "Known issues" in sections:
        nav.append(("known-issues", "Known issues"))
    if advisories:
        nav.append(("advisories", "Security advisories"))
    nav.append(("quick-start", "Quick start"))
    return nav
