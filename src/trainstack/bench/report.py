"""Result rows as a rich table, JSON lines, and the lines that explain the figures."""

from __future__ import annotations

import json
from pathlib import Path

from rich.table import Table
from rich.text import Text

from trainstack.bench.kernels import CLASSES, IDLE, class_cell
from trainstack.bench.mfu import FORMULA, FORMULA_CAUSAL
from trainstack.errors import OutputError
from trainstack.fsutil import atomic_write_text


def fmt(value: float | None, spec: str = ",.0f", missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def _speedup(row: dict, baseline: dict | None) -> str:
    if not baseline or row.get("status") != "ok" or baseline is row:
        return "1.00x" if baseline is row else "-"
    return f"{row['tokens_per_s_per_gpu'] / baseline['tokens_per_s_per_gpu']:.2f}x"


def results_table(rows: list[dict], title: str = "trainstack bench") -> Table:
    table = Table(title=Text(title))  # names as plain text: a '[' in a model's name is no markup
    for name, justify in (
        ("mode", "left"),
        ("status", "left"),
        ("tok/s/GPU", "right"),
        ("tok/s total", "right"),
        ("vs eager", "right"),
        ("MFU", "right"),
        ("MFU fp8 peak", "right"),
        ("TFLOP/s/GPU", "right"),
        ("step ms median [p10-p90]", "right"),
        ("mem GiB alloc/resv", "right"),
        ("warm-up s", "right"),
        ("loss first->final", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]  # each justify is one of rich's JustifyMethod words, written out above
    baseline = next((r for r in rows if r.get("mode") == "eager" and r.get("status") == "ok"), None)
    for row in rows:
        if row.get("status") != "ok":
            error = row.get("error") or ""
            table.add_row(
                Text(row["mode"]),
                Text(row["status"].upper(), style="red"),
                Text(error if len(error) <= 40 else error[:39] + "…"),
                *[""] * 9,
            )
            continue
        mfu = "unknown" if row["mfu"] is None else f"{row['mfu']:.1%}"
        table.add_row(
            Text(row["mode"]),
            "ok",
            fmt(row["tokens_per_s_per_gpu"]),
            fmt(row["tokens_per_s_total"]),
            _speedup(row, baseline),
            mfu,
            _mfu_fp8(row),
            fmt(row["achieved_tflops_per_gpu"], ".1f"),
            f"{row['step_ms_median']:.1f} [{row['step_ms_p10']:.1f}-{row['step_ms_p90']:.1f}]",
            f"{fmt(row['mem_allocated_gib'], '.1f', 'n/a')}/{fmt(row['mem_reserved_gib'], '.1f', 'n/a')}",
            f"{row['warmup_s']:.1f}",
            f"{row['loss_first']:.3f}->{row['loss_final']:.3f}",
        )
    return table


def _mfu_fp8(row: dict) -> str:
    """MFU against the dense float8 peak, for float8 rows only."""
    if "mfu_fp8" not in row:
        return "-"
    return "unknown" if row["mfu_fp8"] is None else f"{row['mfu_fp8']:.1%}"


def explain(rows: list[dict]) -> list[str]:
    """The lines printed under the table: workload, hardware and peak, the formula."""
    row = next((r for r in rows if "params" in r), None)
    if row is None:
        return []
    peak = next((r["peak_tflops"] for r in rows if r.get("peak_tflops")), None)
    basis = f"dense bf16 peak {peak:g} TFLOP/s per GPU" if peak else "MFU unknown: this device is not in the GPU peak table"
    fp8_peak = next((r["peak_fp8_tflops"] for r in rows if r.get("peak_fp8_tflops")), None)
    if fp8_peak:
        basis += f" (every row, float8 ones too, so they compare); 'MFU fp8 peak': float8 rows against the dense float8 peak {fp8_peak:g} TFLOP/s"
    return (
        [
            f"model {row['model']}: {_count(row['params'])} parameters, {_count(row['non_embedding_params'])} without the input embedding; "
            f"batch {row['batch']} x seq {row['seq']} per GPU; {row['world_size']} x {row['device_name']}; torch {row['torch']}",
            _precisions(rows),
            f"MFU basis: {basis}",
            f"{FORMULA} = {row['flops_per_token'] / 1e9:.3f} GFLOP/token",
            *_causal(rows),
            f"timed steps {row['steps']} after {row['warmup_steps']} warm-up steps (warm-up s includes compilation); "
            + (
                "step times from CUDA events, one sync at the end of the timed window"
                if row["device_type"] == "cuda"
                else "step times from the wall clock"
            ),
        ]
        + _attention(rows)
        + [f"{r['mode']} plan: {r['plan']}" for r in rows if r.get("plan")]
        + [f"{r['mode']}: {r['fp8']}" for r in rows if r.get("fp8")]
        + [
            f"{r['mode']} profile: {r['profile']['kernels']} (kernels by time), {r['profile']['trace']} (Chrome trace)"
            for r in rows
            if r.get("profile")
        ]
        + _breakdown_basis(rows)
        + [f"{r['mode']}: {r['status']}: {r['error']}" for r in rows if r.get("status") != "ok" and r.get("error")]
    )


def _causal(rows: list[dict]) -> list[str]:
    """The same figures with attention's causal half, where the rows carry them."""
    row = next((r for r in rows if r.get("flops_per_token_causal")), None)
    if row is None:
        return []
    mfus = ", ".join(f"{r['mode']} {r['mfu_causal']:.1%}" for r in rows if r.get("status") == "ok" and r.get("mfu_causal") is not None)
    return [f"{FORMULA_CAUSAL} = {row['flops_per_token_causal'] / 1e9:.3f} GFLOP/token" + (f"; MFU so counted: {mfus}" if mfus else "")]


def _breakdown_basis(rows: list[dict]) -> list[str]:
    """Where the breakdown's figures come from: the profiled steps, the work counted, the ceilings."""
    row = next((r for r in rows if r.get("status") == "ok" and isinstance(r.get("breakdown"), dict)), None)
    if row is None:
        return []
    b = row["breakdown"]
    lines = [
        f"time per class: {b.get('steps')} more steps profiled after the timed ones ({b.get('source')}; overlapping kernels "
        "counted once, idle = no kernel running); rates over each class's kernel time, its work counted as:"
    ]
    lines += [f"  {name}: {w.get('counted', '?')}" for name, w in b.get("work", {}).items()]
    limits = b.get("ceilings") or {}
    if limits.get("gemm_tflops") or limits.get("copy_gbps"):
        lines.append(
            f"ceilings: products {fmt(limits.get('gemm_tflops'), ',.0f')} TFLOP/s ({limits.get('gemm_source')}), "
            f"memory {fmt(limits.get('copy_gbps'), ',.0f')} GB/s ({limits.get('copy_source')})"
        )
    return lines


def breakdown_table(rows: list[dict]) -> Table | None:
    """Per mode: each class's share of the step, and its achieved rate with the fraction of
    its ceiling; None when no row has a breakdown."""
    found = [r for r in rows if r.get("status") == "ok" and isinstance(r.get("breakdown"), dict)]
    if not found:
        return None
    present = [c for c in CLASSES if any(c in r["breakdown"].get("classes", {}) for r in found)]
    table = Table(
        title=Text(
            "time per step by class, of a profiled step (the profiler slows it; the timed median "
            "is the table above's): share of the step; achieved rate (of its ceiling)"
        )
    )
    table.add_column("mode")
    # a profiled step (after the timed ones, under the profiler): not the timed steps' median
    table.add_column("profiled step ms", justify="right")
    for name in (*present, IDLE):
        table.add_column(name, justify="right")
    for r in found:
        b = r["breakdown"]
        cells = [class_cell(b.get("classes", {}).get(name)) for name in present]
        idle = f"{b['idle_share']:.1%}" if isinstance(b.get("idle_share"), (int, float)) else "-"
        table.add_row(Text(r["mode"]), fmt(b.get("wall_ms_per_step"), ".1f"), *cells, idle)
    return table


def _attention(rows: list[dict]) -> list[str]:
    """The attention kernel used, and each backend's measured forward+backward time."""
    row = next((r for r in rows if r.get("sdpa_ms")), None)
    if row is None:
        return []
    times = ", ".join(f"{name} {ms:.2f} ms" for name, ms in sorted(row["sdpa_ms"].items(), key=lambda kv: kv[1]))
    return [
        f"attention: {row.get('sdpa_backend', '?')}, the fastest of the fused backends timed at these shapes (forward+backward: {times})"
    ]


def _precisions(rows: list[dict]) -> str:
    """'precision: X' when every mode shares it, else each precision with its modes."""
    modes: dict[str, list[str]] = {}
    for r in rows:
        if r.get("precision"):
            modes.setdefault(r["precision"], []).append(r["mode"])
    if len(modes) == 1:
        return f"precision: {next(iter(modes))}"
    return "precision: " + "; ".join(f"{p} ({', '.join(m)})" for p, m in modes.items())


def _count(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.1f} M"


def write_jsonl(path: Path, rows: list[dict]) -> None:
    atomic_write_text(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def rescue(text: str, name: str) -> Path:
    """Write results that could not go where they were asked to a new file, in the current
    folder or else the temporary one; its path. Raises OutputError when neither can hold them."""
    import os
    import tempfile

    for folder in (Path.cwd(), Path(tempfile.gettempdir())):
        try:
            fd, path = tempfile.mkstemp(prefix=f"{Path(name).stem}.", suffix=Path(name).suffix or ".json", dir=folder)
        except OSError:
            continue
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            return Path(path)
        except OSError:
            Path(path).unlink(missing_ok=True)  # a half-written copy is no copy
    raise OutputError(f"{name}: the results could not be written anywhere (the current folder and the temporary one refused)")
