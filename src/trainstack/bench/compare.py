"""A/B of two result files: rows matched by model, mode, batch, sequence and GPU count."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from trainstack.bench.report import fmt, read_rows


def _key(row: dict) -> tuple:
    return (row["model"], row["mode"], row.get("batch"), row.get("seq"), row.get("world_size", 1))


def _ratio(b: float | None, a: float | None) -> str:
    return f"{b / a:.2f}x" if a and b is not None else "-"


def _cell(row: dict | None, field: str, spec: str) -> str:
    if row is None:
        return "absent"
    if row.get("status") != "ok":
        return row["status"].upper()
    if field == "mfu":
        return "unknown" if row["mfu"] is None else f"{row['mfu']:.1%}"
    return fmt(row.get(field), spec)


def _value(row: dict | None, field: str) -> float | None:
    return row.get(field) if row is not None and row.get("status") == "ok" else None


def compare_table(path_a: Path, path_b: Path) -> Table:
    a = {_key(r): r for r in read_rows(path_a)}
    b = {_key(r): r for r in read_rows(path_b)}
    table = Table(title=f"A = {path_a.name}   B = {path_b.name}")
    for name in ("model", "mode", "batch x seq", "GPUs", "tok/s/GPU A", "tok/s/GPU B", "B/A", "MFU A", "MFU B", "mem GiB A", "mem GiB B", "mem B/A"):
        table.add_column(name, justify="left" if name in ("model", "mode") else "right")
    for key in list(a) + [k for k in b if k not in a]:
        ra, rb = a.get(key), b.get(key)
        table.add_row(
            str(key[0]), str(key[1]), f"{key[2]} x {key[3]}", str(key[4]),
            _cell(ra, "tokens_per_s_per_gpu", ",.0f"), _cell(rb, "tokens_per_s_per_gpu", ",.0f"),
            _ratio(_value(rb, "tokens_per_s_per_gpu"), _value(ra, "tokens_per_s_per_gpu")),
            _cell(ra, "mfu", ""), _cell(rb, "mfu", ""),
            _cell(ra, "mem_allocated_gib", ".1f"), _cell(rb, "mem_allocated_gib", ".1f"),
            _ratio(_value(rb, "mem_allocated_gib"), _value(ra, "mem_allocated_gib")),
        )  # fmt: skip
    return table
