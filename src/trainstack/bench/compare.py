"""A/B of two result files: rows matched by model, mode, batch, sequence and GPU count.

Reads JSON lines only: nothing here imports torch, so a comparison takes well under a second.
"""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from trainstack.errors import SpecError

ACCEPTED = "a JSON-lines file written by 'trainstack bench'"


def read_rows(path: Path) -> list[dict]:
    """Rows from a JSON-lines file (or a JSON list); errors name the file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or "not UTF-8 text"
        raise SpecError(f"{path}: cannot read ({why}); accepted: {ACCEPTED}") from None
    rows = _parse_list(path, text) if text.lstrip().startswith("[") else _parse_lines(path, text)
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, dict) or not {"model", "mode", "status"} <= row.keys():
            raise SpecError(f"{path}: row {number} lacks 'model', 'mode' or 'status'; accepted: rows written by 'trainstack bench'")
    if not rows:
        raise SpecError(f"{path}: no result rows; accepted: {ACCEPTED}")
    return rows


def _parse_list(path: Path, text: str) -> list:
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    return rows if isinstance(rows, list) else [rows]


def _parse_lines(path: Path, text: str) -> list:
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise SpecError(f"{path}:{number}: not a JSON object ({exc.msg}); accepted: one result object per line") from None
    return rows


def fmt(value: float | None, spec: str = ",.0f", missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def print_compare(path_a: Path, path_b: Path, console: Console | None = None) -> None:
    """The A/B table on stdout: fitted to a terminal's width, unwrapped in a log."""
    from trainstack.console import out

    (console or out).print(compare_table(path_a, path_b))


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
