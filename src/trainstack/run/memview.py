"""A CUDA allocator snapshot read for people: the memory timeline, the largest live
allocations by stack, and one self-contained HTML page with both (pure; no torch).

The snapshot is the dict ``torch.cuda.memory._snapshot()`` returns: ``segments`` with their
``blocks`` (state, size, frames) and ``device_traces`` (the ring of allocator events).
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

GiB = 2**30
TOP = 15  # stacks in the table
FRAMES = 8  # frames shown per stack
POINTS = 1500  # timeline points drawn at most
# torch's own files (as installed: an environment may itself live under a folder named torch)
_INTERNAL = ("site-packages/torch/", "dist-packages/torch/", "<frozen", "??", "/trainstack/run/")
_LIVE = ("active_allocated", "active_pending_free")


@dataclass(frozen=True)
class Stack:
    frames: tuple[str, ...]
    total: int
    count: int
    largest: int


@dataclass(frozen=True)
class Summary:
    device: int
    allocated: int  # live at the snapshot
    reserved: int  # the allocator's segments
    requested: int | None  # what the failed allocation asked for
    free_on_device: int | None  # what the device still had, per the allocator's OOM event
    timeline: list[tuple[float, int]] = field(repr=False)  # (seconds from the first event, allocated bytes)
    stacks: list[Stack] = field(repr=False)
    events: int = 0


def _frame_text(frame: dict[str, Any]) -> str:
    return f"{frame.get('filename', '?')}:{frame.get('line', '?')} {frame.get('name', '?')}"


def _user_frames(frames: Iterable[dict[str, Any]]) -> tuple[str, ...]:
    """The frames that say where in the job an allocation came from: Python files outside torch
    first (innermost first); torch's own when there is nothing else."""
    frames = list(frames)
    mine = [f for f in frames if str(f.get("filename", "")).endswith(".py") and not any(s in str(f.get("filename", "")) for s in _INTERNAL)]
    chosen = mine or [f for f in frames if str(f.get("filename", "")).endswith(".py")] or frames
    return tuple(_frame_text(f) for f in chosen[:FRAMES])


def _devices(snapshot: dict[str, Any]) -> list[int]:
    found = {int(s.get("device", 0)) for s in snapshot.get("segments", [])}
    traces = snapshot.get("device_traces", [])
    found |= {i for i, t in enumerate(traces) if t}
    return sorted(found) or [0]


def oom_device(snapshot: dict[str, Any]) -> int:
    """The device whose trace holds an OOM event; else the one with the most allocated."""
    for i, trace in enumerate(snapshot.get("device_traces", [])):
        if any(e.get("action") == "oom" for e in trace):
            return i
    return max(_devices(snapshot), key=lambda d: _live_bytes(snapshot, d))


def _live_blocks(snapshot: dict[str, Any], device: int) -> list[dict[str, Any]]:
    return [
        b for s in snapshot.get("segments", []) if int(s.get("device", 0)) == device for b in s.get("blocks", []) if b.get("state") in _LIVE
    ]


def _live_bytes(snapshot: dict[str, Any], device: int) -> int:
    return sum(int(b.get("size", 0)) for b in _live_blocks(snapshot, device))


def stacks(snapshot: dict[str, Any], device: int, top: int = TOP) -> list[Stack]:
    """Live allocations grouped by where they were made, largest total first."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for block in _live_blocks(snapshot, device):
        frames = _user_frames(block.get("frames") or []) or ("(allocated before recording began)",)
        groups.setdefault(frames, []).append(int(block.get("size", 0)))
    ranked = sorted(groups.items(), key=lambda kv: -sum(kv[1]))[:top]
    return [Stack(frames=k, total=sum(v), count=len(v), largest=max(v)) for k, v in ranked]


def timeline(snapshot: dict[str, Any], device: int, points: int = POINTS) -> list[tuple[float, int]]:
    """Allocated bytes after each event of the ring, ending at the snapshot's live total."""
    traces = snapshot.get("device_traces", [])
    events = traces[device] if device < len(traces) else []
    deltas = []
    for e in events:
        size = int(e.get("size", 0))
        delta = size if e.get("action") == "alloc" else -size if e.get("action") == "free_completed" else 0
        deltas.append((float(e.get("time_us", 0)) / 1e6, delta))
    level = _live_bytes(snapshot, device) - sum(d for _, d in deltas)
    t0 = deltas[0][0] if deltas else 0.0
    series = [(0.0, level)]
    for t, d in deltas:
        level += d
        series.append((max(t - t0, 0.0), level))
    if len(series) > points:  # keep each window's highest point, so the peak stays drawn
        width = len(series) / points
        series = [max(series[int(i * width) : int((i + 1) * width)] or [series[-1]], key=lambda p: p[1]) for i in range(points)]
    return series


def summarize(snapshot: dict[str, Any]) -> Summary:
    device = oom_device(snapshot)
    traces = snapshot.get("device_traces", [])
    ooms = [e for e in (traces[device] if device < len(traces) else []) if e.get("action") == "oom"]
    reserved = sum(int(s.get("total_size", 0)) for s in snapshot.get("segments", []) if int(s.get("device", 0)) == device)
    return Summary(
        device=device,
        allocated=_live_bytes(snapshot, device),
        reserved=reserved,
        requested=int(ooms[-1]["size"]) if ooms and "size" in ooms[-1] else None,
        free_on_device=int(ooms[-1]["device_free"]) if ooms and "device_free" in ooms[-1] else None,
        timeline=timeline(snapshot, device),
        stacks=stacks(snapshot, device),
        events=len(traces[device]) if device < len(traces) else 0,
    )


def gib(n: int | None) -> str:
    return "?" if n is None else f"{n / GiB:.2f} GiB"


def _svg(series: list[tuple[float, int]], width: int = 960, height: int = 280) -> str:
    pad = 48
    top = max((b for _, b in series), default=0) or 1
    span = max(len(series) - 1, 1)
    pts = " ".join(
        f"{pad + i * (width - 2 * pad) / span:.1f},{height - pad - b / top * (height - 2 * pad):.1f}" for i, (_, b) in enumerate(series)
    )
    seconds = series[-1][0] if series else 0.0
    return (
        f'<svg id="timeline" viewBox="0 0 {width} {height}" width="100%" role="img" aria-label="allocated memory over the recorded events">'
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>'
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#888"/>'
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="#888"/>'
        f'<polyline fill="none" stroke="#c0392b" stroke-width="1.5" points="{pts}"/>'
        f'<text x="{pad}" y="{pad - 10}" font-size="13">{html.escape(gib(top))}</text>'
        f'<text x="{pad}" y="{height - pad + 20}" font-size="13">first recorded event</text>'
        f'<text x="{width - pad}" y="{height - pad + 20}" font-size="13" text-anchor="end">out of memory ({seconds:.2f} s later, {len(series) - 1} events)</text>'
        "</svg>"
    )


def _rows(found: list[Stack]) -> str:
    rows = []
    for i, s in enumerate(found, 1):
        frames = "<br>".join(html.escape(f) for f in s.frames)
        rows.append(
            f'<tr><td>{i}</td><td>{html.escape(gib(s.total))}</td><td>{s.count}</td><td>{html.escape(gib(s.largest))}</td><td class="stack">{frames}</td></tr>'
        )
    return "\n".join(rows)


def render_html(summary: Summary, diagnosis: str, title: str = "Out of memory") -> str:
    """One page, no external resource: headline, diagnosis, timeline, the largest stacks."""
    facts = (
        f"device cuda:{summary.device}: {gib(summary.allocated)} allocated, {gib(summary.reserved)} reserved by the allocator"
        + (f", {gib(summary.requested)} asked for" if summary.requested is not None else "")
        + (f", {gib(summary.free_on_device)} free on the device" if summary.free_on_device is not None else "")
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<style>
body{{font-family:system-ui,sans-serif;margin:1.5rem;max-width:75rem;color:#222}}
table{{border-collapse:collapse;width:100%}} td,th{{border-bottom:1px solid #ddd;padding:.3rem .5rem;text-align:left;vertical-align:top}}
td.stack{{font-family:ui-monospace,monospace;font-size:.8rem;word-break:break-all}} .wrap{{overflow-x:auto}}
p.diagnosis{{background:#fdf2e9;padding:.8rem;border-left:4px solid #c0392b}}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p id="facts">{html.escape(facts)}</p>
<p class="diagnosis" id="diagnosis">{html.escape(diagnosis)}</p>
<h2>Allocated memory over the last {summary.events} allocator events</h2>
{_svg(summary.timeline)}
<h2>Largest live allocations by stack</h2>
<div class="wrap"><table id="stacks"><thead><tr><th>#</th><th>live</th><th>blocks</th><th>largest</th><th>where (innermost first)</th></tr></thead>
<tbody>
{_rows(summary.stacks)}
</tbody></table></div>
</body></html>
"""
