"""Bar charts of bench throughput for the HTML page: one per flavour, model and setup, bars per mode."""

from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass
from itertools import groupby

from trainstack.release.schema import FIGURE_MAX, Attribution, BenchRow


@dataclass(frozen=True)
class Chart:
    title: str  # "1b b4 s4096 · cu128-ubuntu2404-py312-release"
    alt: str
    data_uri: str  # data:image/png;base64,...


def charts(rows: list[BenchRow], release: str, previous: str) -> list[Chart]:
    """Charts of the measured rows only: a mode that ran out of memory has no bar."""
    measured = sorted((r for r in rows if r.tokens_per_s is not None), key=lambda r: (r.slug, r.model, r.setup))
    return [_chart(list(group), release, previous) for _, group in groupby(measured, key=lambda r: (r.slug, r.model, r.setup))]


def _bounded(value: float | None) -> float:
    """A bar's height: a finite figure no larger than FIGURE_MAX (the axis' ticks overflow beyond)."""
    return min(value, FIGURE_MAX) if value is not None and math.isfinite(value) and value >= 0 else 0.0


def _chart(rows: list[BenchRow], release: str, previous: str) -> Chart:
    import matplotlib

    # names are plain text: a '$' in a model's or a release's name never starts mathtext
    with matplotlib.rc_context({"text.parse_math": False}):
        first = rows[0]
        title = " ".join(p for p in (first.model, first.setup) if p) + f" · {first.slug or 'all flavours'}"
        current = [_bounded(r.tokens_per_s) for r in rows]
        png = _draw(rows, title, current, release, previous)
    alt = f"tokens/s per GPU of {title} by mode: " + ", ".join(f"{r.mode} {v:,.0f}" for r, v in zip(rows, current))
    return Chart(title=title, alt=alt, data_uri="data:image/png;base64," + base64.b64encode(png).decode())


def _draw(rows: list[BenchRow], title: str, current: list[float], release: str, previous: str) -> bytes:
    from matplotlib.figure import Figure  # heavy: only when a page with bench results is made

    before = [_bounded(r.previous_tokens_per_s) if r.previous_tokens_per_s is not None else float("nan") for r in rows]
    has_previous = any(r.previous_tokens_per_s is not None for r in rows)
    width = 0.38 if has_previous else 0.6
    xs = list(range(len(rows)))

    fig = Figure(figsize=(6.4, 3.2), dpi=120, layout="constrained")
    ax = fig.add_subplot()
    if has_previous:
        ax.bar([x - width / 2 for x in xs], before, width, label=previous, color="#9aa5b1")
    bars = ax.bar([x + (width / 2 if has_previous else 0) for x in xs], current, width, label=release, color="#2f6fde")
    ax.bar_label(bars, labels=[f"{v:,.0f}" for v in current], fontsize=8, padding=2)
    ax.set_xticks(xs, [r.mode for r in rows])
    ax.set_ylabel("tokens/s per GPU")
    ax.margins(y=0.15)
    ax.spines[["top", "right"]].set_visible(False)
    fig.suptitle(title, fontsize=10, x=0.02, ha="left")
    fig.legend(fontsize=8, frameon=False, loc="outside upper right", ncols=2)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def attribution_charts(attributions: list[Attribution]) -> list[Chart]:
    """Per attribution, each step's contribution to the change (points of the base's figure):
    grey where the step is within noise."""
    import matplotlib

    found = []
    for a in attributions:
        steps = [s for s in a.steps[1:] if s.contribution is not None and math.isfinite(s.contribution)]
        if not steps:
            continue
        with matplotlib.rc_context({"text.parse_math": False}):
            title = " ".join(p for p in (a.model, a.mode, a.setup) if p) + f" · {a.previous_release} → {a.release}"
            png = _draw_contributions(
                [s.step for s in steps],
                [max(-1e6, min(1e6, (s.contribution or 0.0) * 100)) for s in steps],
                [s.confidence == "within noise" for s in steps],
                title,
            )
        alt = f"contribution of each step to the change of {title}: " + ", ".join(
            f"{s.step} {(s.contribution or 0.0) * 100:+.1f}%" for s in steps
        )
        found.append(Chart(title=title, alt=alt, data_uri="data:image/png;base64," + base64.b64encode(png).decode()))
    return found


def _draw_contributions(names: list[str], values: list[float], noise: list[bool], title: str) -> bytes:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 0.6 + 0.4 * len(names)), dpi=120, layout="constrained")
    ax = fig.add_subplot()
    ys = list(range(len(names)))[::-1]
    bars = ax.barh(ys, values, color=["#9aa5b1" if n else ("#2f6fde" if v >= 0 else "#d64545") for v, n in zip(values, noise)])
    ax.bar_label(bars, labels=[f"{v:+.1f}%" + (" (noise)" if n else "") for v, n in zip(values, noise)], fontsize=8, padding=2)
    ax.set_yticks(ys, names)
    ax.axvline(0, color="#333", linewidth=0.8)
    ax.set_xlabel("contribution to the change of tokens/s per GPU (points of the base's, %)")
    ax.margins(x=0.25)
    ax.spines[["top", "right"]].set_visible(False)
    fig.suptitle(title, fontsize=10, x=0.02, ha="left")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()
