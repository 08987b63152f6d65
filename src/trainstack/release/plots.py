"""Bar charts of bench throughput for the HTML page: one per flavour and model, a bar pair per mode."""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from itertools import groupby

from trainstack.release.model import BenchRow


@dataclass(frozen=True)
class Chart:
    slug: str
    model: str
    alt: str
    data_uri: str  # data:image/png;base64,...


def charts(rows: list[BenchRow], release: str, previous: str) -> list[Chart]:
    ordered = sorted(rows, key=lambda r: (r.slug, r.model))
    return [_chart(list(group), release, previous) for _, group in groupby(ordered, key=lambda r: (r.slug, r.model))]


def _chart(rows: list[BenchRow], release: str, previous: str) -> Chart:
    from matplotlib.figure import Figure  # heavy: only when a page with bench results is made

    slug, model = rows[0].slug, rows[0].model
    modes = [r.mode for r in rows]
    fig = Figure(figsize=(6.4, 3.2), dpi=120, layout="constrained")
    ax = fig.add_subplot()
    xs = range(len(rows))
    has_previous = any(r.previous_tokens_per_s is not None for r in rows)
    width = 0.38 if has_previous else 0.6
    if has_previous:
        ax.bar([x - width / 2 for x in xs], [r.previous_tokens_per_s if r.previous_tokens_per_s is not None else float("nan") for r in rows], width,
               label=previous, color="#9aa5b1")
    bars = ax.bar([x + (width / 2 if has_previous else 0) for x in xs], [r.tokens_per_s for r in rows], width,
                  label=release, color="#2f6fde")
    ax.bar_label(bars, labels=[f"{r.tokens_per_s:,.0f}" for r in rows], fontsize=8, padding=2)
    ax.set_xticks(list(xs), modes)
    ax.set_ylabel("tokens/s")
    fig.suptitle(f"{model} · {slug or 'all flavours'}", fontsize=10, x=0.02, ha="left")
    ax.margins(y=0.15)
    ax.spines[["top", "right"]].set_visible(False)
    fig.legend(fontsize=8, frameon=False, loc="outside upper right", ncols=2)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    alt = f"tokens/s of {model} on {slug or 'all flavours'} by mode: " + ", ".join(
        f"{r.mode} {r.tokens_per_s:,.0f}" for r in rows
    )
    return Chart(slug=slug, model=model, alt=alt, data_uri="data:image/png;base64," + base64.b64encode(buf.getvalue()).decode())
