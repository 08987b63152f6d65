"""A PNG chart of an ablation: tokens/s per GPU and MFU per mode, failed modes labelled, and
where the rows carry one, each mode's time per step by class (stacked shares); with a parity
run, its loss curves and their relative gap."""

from __future__ import annotations

import io
import math
from pathlib import Path

from trainstack.bench.kernels import CLASSES, IDLE
from trainstack.fsutil import atomic_write_bytes


def write_chart(path: Path, rows: list[dict], title: str, parity: dict | None = None) -> None:
    """Bars of tokens/s and MFU per mode; with ``parity`` (bench.parity's result) a row of
    two more panels below: both loss curves, and their relative gap with the compared tail."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    # a model's or a mode's name is plain text: a '$' in it never starts mathtext
    with matplotlib.rc_context({"text.parse_math": False}):
        bars = 0.5 * len(rows) + 2
        wide = any(isinstance(r.get("breakdown"), dict) for r in rows)
        fig = Figure(figsize=(16 if wide else 11, bars + (4 if parity else 0)), layout="constrained")
        if parity:
            top, bottom = fig.subfigures(2, 1, squeeze=False, height_ratios=[bars, 4])[:, 0]
            _bars(top, rows)
            _parity(bottom, parity)
        else:
            _bars(fig, rows)
        fig.suptitle(title)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110)
    atomic_write_bytes(path, buf.getvalue())


FIGURE_MAX = 1e15  # beyond any measurement; the axis' ticks overflow near the float's limit


def _bounded(value: float | None) -> float:
    return min(value, FIGURE_MAX) if value is not None and math.isfinite(value) and value >= 0 else 0.0


def _bars(fig, rows: list[dict]) -> None:
    modes = [r["mode"] for r in rows]
    ok = [r.get("status") == "ok" for r in rows]
    tps = [_bounded(r["tokens_per_s_per_gpu"]) if good else 0.0 for r, good in zip(rows, ok)]
    mfu = [_bounded(100 * r["mfu"]) if good and r.get("mfu") is not None else 0.0 for r, good in zip(rows, ok)]
    split = any(good and isinstance(r.get("breakdown"), dict) for r, good in zip(rows, ok))
    panels = fig.subplots(1, 3 if split else 2, sharey=True)
    left, right = panels[0], panels[1]
    y = range(len(rows))
    if split:
        _classes(panels[2], rows, ok)
    left.barh(y, tps, color=["tab:blue" if good else "lightgray" for good in ok])
    left.set_yticks(list(y), modes)
    left.invert_yaxis()
    left.set_xlabel("tokens/s per GPU")
    right.barh(y, mfu, color="tab:green")
    right.set_xlabel("MFU % (dense bf16 peak)")
    right.set_xlim(0, max(1.0, 1.25 * max(mfu)))
    for i, (row, good) in enumerate(zip(rows, ok)):
        if not good:
            left.text(0, i, f" {row['status'].upper()}", va="center", color="tab:red")
        elif row.get("mfu") is None:
            right.text(0, i, " unknown", va="center")
        else:
            right.text(mfu[i], i, f" {mfu[i]:.1f}", va="center")


def _classes(ax, rows: list[dict], ok: list[bool]) -> None:
    """Each mode's step as stacked shares of its classes, idle last (bench.kernels)."""
    shares = []
    for row, good in zip(rows, ok):
        given = row.get("breakdown")
        b: dict = given if good and isinstance(given, dict) else {}
        figures = {name: c.get("share", 0.0) for name, c in b.get("classes", {}).items() if isinstance(c, dict)}
        shares.append(figures | ({IDLE: b.get("idle_share", 0.0)} if b else {}))
    names = [n for n in (*CLASSES, IDLE) if any(s.get(n) for s in shares)]
    colours = matplotlib_colours(len(names))
    left = [0.0] * len(rows)
    for name, colour in zip(names, colours):
        widths = [100 * _bounded(s.get(name, 0.0)) for s in shares]
        ax.barh(range(len(rows)), widths, left=left, color=colour, label=name)
        left = [a + b for a, b in zip(left, widths)]
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of the step by class")
    ax.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.35), ncols=4, frameon=False)


def matplotlib_colours(n: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return [cmap(i % 10) for i in range(n)]


def _parity(fig, parity: dict) -> None:
    curves, gaps = fig.subplots(1, 2)
    a, b = parity["modes"]
    fig.suptitle(f"parity on {parity['task']}")
    if parity.get("status") != "ok":
        curves.text(0.5, 0.5, f"not measured: {parity.get('error', '')}"[:120], ha="center", va="center", color="tab:red", wrap=True)
        gaps.set_axis_off()
        return
    colors = ("tab:blue", "tab:orange")
    for i, row in enumerate(parity["rows"]):  # pairs (A, B), one per seed
        curves.plot(row["losses"], color=colors[i % 2], alpha=0.25, linewidth=0.8)
    seeds = len(parity["rows"]) // 2
    over = f", mean of {seeds} seeds" if seeds > 1 else ""
    for name, smooth, color in zip((a, b), parity["smoothed"], colors):
        curves.plot(smooth, color=color, label=f"{name} (moving average of {parity['window']}{over})")
    curves.axhline(parity["entropy_nats"], color="gray", linestyle=":", label="entropy floor")
    curves.set_xlabel("step")
    curves.set_ylabel("loss (nats)")
    curves.legend(fontsize="small")
    sa, sb = parity["smoothed"]
    gap = [100 * abs(y - x) / abs(x) for x, y in zip(sa, sb)]
    gaps.plot(gap, color="tab:purple")
    gaps.axvspan(parity["tail_from"], len(gap) - 1, color="tab:purple", alpha=0.1, label="compared tail")
    gaps.set_ylim(0, max(1.0, 1.5 * max(gap[parity["tail_from"] :])))
    gaps.set_xlabel("step")
    gaps.set_ylabel("|B - A| / A % (moving averages)")
    gaps.set_title(
        f"after the last step: {100 * parity['final_rel_gap']:.2f}% (largest in the tail {100 * parity['max_rel_gap']:.2f}%)",
        fontsize="medium",
    )
    gaps.legend(fontsize="small")
