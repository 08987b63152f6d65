"""A PNG chart of an ablation: tokens/s per GPU and MFU per mode; failed modes labelled."""

from __future__ import annotations

import io
from pathlib import Path

from trainstack.fsutil import atomic_write_bytes


def write_chart(path: Path, rows: list[dict], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    modes = [r["mode"] for r in rows]
    ok = [r.get("status") == "ok" for r in rows]
    tps = [r["tokens_per_s_per_gpu"] if good else 0.0 for r, good in zip(rows, ok)]
    mfu = [100 * r["mfu"] if good and r.get("mfu") is not None else 0.0 for r, good in zip(rows, ok)]
    fig = Figure(figsize=(11, 0.5 * len(rows) + 2), layout="constrained")
    left, right = fig.subplots(1, 2, sharey=True)
    y = range(len(rows))
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
    fig.suptitle(title)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    atomic_write_bytes(path, buf.getvalue())
