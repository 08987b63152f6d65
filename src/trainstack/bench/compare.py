"""A/B of two result files: rows matched by model, mode, batch, sequence and GPU count.

Reads JSON lines only: nothing here imports torch, so a comparison takes well under a second.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import NoReturn

import jiter
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from trainstack import grammar
from trainstack.bench.kernels import CLASSES, IDLE, class_cell
from trainstack.console import out
from trainstack.errors import SpecError
from trainstack.fsutil import describe_os_error, loads_strict, read_regular

ACCEPTED = "a JSON-lines file written by 'trainstack bench'"


def read_rows(path: Path) -> list[dict]:
    """Rows from a JSON-lines file (or a JSON list); errors name the file and line."""
    return list(_read_keyed(path).values())


def _read_keyed(path: Path) -> dict[tuple, dict]:
    """The rows of ``path`` by their key (``_key``; a later row of the same key wins), each line
    parsed and checked in one pass."""
    try:
        data = read_regular(path, "bench results file")  # a FIFO is refused unopened
        data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = describe_os_error(exc) if isinstance(exc, OSError) else "not UTF-8 text"
        raise SpecError(f"{path}: cannot read ({why}); accepted: {ACCEPTED}") from None
    if data.lstrip().startswith(b"["):
        rows: Iterable[tuple[int, object]] = enumerate(_parse_list(path, data.decode("utf-8")), start=1)
    else:
        rows = _parse_lines(path, data)
    keyed: dict[tuple, dict] = {}
    for number, (_, row) in enumerate(rows, start=1):
        if not isinstance(row, dict) or not {"model", "mode", "status"} <= row.keys():
            raise SpecError(f"{path}: row {number} lacks 'model', 'mode' or 'status'; accepted: rows written by 'trainstack bench'")
        _check_row(path, number, row)
        keyed[_key(row)] = row
    if not keyed:
        raise SpecError(f"{path}: no result rows; accepted: {ACCEPTED}")
    return keyed


TEXTS = ("model", "mode", "status")
COUNTS = ("batch", "seq", "world_size")
FIGURES = ("tokens_per_s_per_gpu", "mfu", "mem_allocated_gib")


def _check_row(path: Path, number: int, row: dict) -> None:
    """The fields the table shows, each of its own kind: one-line text, whole counts, numbers."""
    for field in TEXTS:
        value = row.get(field)
        if not isinstance(value, str) or grammar.CONTROL.search(value):
            _refuse(path, number, field, value, "one line of text")
    for field in COUNTS:
        value = row.get(field)
        if value is not None and (type(value) is not int or not 0 <= value < 2**53):  # a bool is no count
            _refuse(path, number, field, value, "a whole number")
    for field in FIGURES:
        value = row.get(field)
        if value is not None and not (_number(value) and value >= 0):
            _refuse(path, number, field, value, "a finite number, 0 or more")
    if row.get("breakdown") is not None:
        _check_breakdown(path, number, row["breakdown"])


def _refuse(path: Path, number: int, field: str, value: object, accepted: str) -> NoReturn:
    raise SpecError(f"{path}: row {number}: {field}: '{grammar.shown(value)}' is not {accepted}; accepted: {ACCEPTED}")


BREAKDOWN_FIGURES = ("share", "ms_per_step", "kernel_ms_per_step", "kernels_per_step", "tflops", "gbps", "of_ceiling")


def _check_breakdown(path: Path, number: int, b: object) -> None:
    """A row's breakdown: its classes by name (bench.kernels.CLASSES), each figure a finite number."""
    where = f"{path}: row {number}: breakdown"
    if not isinstance(b, dict) or not isinstance(b.get("classes"), dict):
        raise SpecError(f"{where}: not an object with 'classes'; accepted: a breakdown written by 'trainstack bench'")
    for key in ("idle_share", "wall_ms_per_step"):
        if not _number(b.get(key)):
            raise SpecError(f"{where}: {key}: '{grammar.shown(b.get(key))}' is not a number; accepted: {ACCEPTED}")
    for name, figures in b["classes"].items():
        if name not in CLASSES:
            raise SpecError(f"{where}: class '{grammar.shown(name)}'; accepted: {', '.join(CLASSES)}")
        if not isinstance(figures, dict) or not _number(figures.get("share")):
            raise SpecError(f"{where}: {name}: no share; accepted: {ACCEPTED}")
        for key in BREAKDOWN_FIGURES:
            if figures.get(key) is not None and not _number(figures[key]):
                raise SpecError(f"{where}: {name}: {key}: '{grammar.shown(figures[key])}' is not a number; accepted: {ACCEPTED}")


_LARGEST = sys.float_info.max


def _number(value: object) -> bool:
    """A finite int or float (not a bool; NaN, infinity and an int past the float's range refused)."""
    return (type(value) is float or type(value) is int) and -_LARGEST <= value <= _LARGEST


def _parse_list(path: Path, text: str) -> list:
    try:
        rows = loads_strict(text, allow_nan=True)
    except json.JSONDecodeError as exc:
        raise SpecError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    except (ValueError, RecursionError) as exc:
        raise SpecError(f"{path}: not valid JSON ({exc if isinstance(exc, ValueError) else 'nested too deeply'})") from None
    return rows if isinstance(rows, list) else [rows]


def _parse_lines(path: Path, data: bytes) -> Iterator[tuple[int, object]]:
    """(line number, value) of each line that is not blank, parsed by jiter (in Rust; a key given
    twice in one object refused as loads_strict refuses it); a line jiter refuses is parsed again
    by loads_strict for the error the other readers give."""
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            yield number, jiter.from_json(line, catch_duplicate_keys=True)
        except ValueError as exc:
            yield number, _parse_line_strict(path, number, line, exc)


def _parse_line_strict(path: Path, number: int, line: bytes, first: ValueError) -> object:
    try:
        return loads_strict(line.decode("utf-8"), allow_nan=True)
    except json.JSONDecodeError as exc:
        raise SpecError(f"{path}:{number}: not a JSON object ({exc.msg}); accepted: one result object per line") from None
    except (ValueError, RecursionError) as exc:
        why = exc if isinstance(exc, ValueError) else "nested too deeply"
        raise SpecError(f"{path}:{number}: not a JSON object ({why}); accepted: one result object per line") from None


def fmt(value: float | None, spec: str = ",.0f", missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


MAX_SHOWN = 200  # pairs a table shows; --json lists them all (a table of 200,000 rows is no reading)


@dataclass(frozen=True)
class Matched:
    """The rows of A and B, each file read once, keyed as the tables match them."""

    path_a: Path
    path_b: Path
    a: dict[tuple, dict]
    b: dict[tuple, dict]

    @classmethod
    def read(cls, path_a: Path, path_b: Path) -> Matched:
        return cls(path_a, path_b, _read_keyed(path_a), _read_keyed(path_b))

    @cached_property
    def ordered_keys(self) -> tuple[tuple, ...]:
        return (*self.a, *(k for k in self.b if k not in self.a))

    def keys(self) -> list[tuple]:
        """A's keys in its order, then those only B has."""
        return list(self.ordered_keys)

    @cached_property
    def breakdown_keys(self) -> tuple[tuple, ...]:
        """The keys of the pairs of which either row has a breakdown, in the order of ``keys``."""
        return tuple(k for k in self.ordered_keys if _has_breakdown(self.a.get(k)) or _has_breakdown(self.b.get(k)))


def _has_breakdown(row: dict | None) -> bool:
    return row is not None and row.get("status") == "ok" and isinstance(row.get("breakdown"), dict)


def print_compare(path_a: Path, path_b: Path, console: Console | None = None, matched: Matched | None = None) -> None:
    """The A/B table on stdout: fitted to a terminal's width, unwrapped in a log; at most
    MAX_SHOWN pairs in each table, the number left out said after it."""
    console = console or out
    matched = matched or Matched.read(path_a, path_b)
    console.print(compare_table(matched))
    _more(console, len(matched.ordered_keys))
    split = breakdown_compare_table(matched)
    if split is not None:
        console.print(split)
        _more(console, len(matched.breakdown_keys))


def _more(console: Console, count: int) -> None:
    if count > MAX_SHOWN:
        console.print(
            Text(f"... and {count - MAX_SHOWN:,} more pair(s), not shown: --json lists every pair"), highlight=False, soft_wrap=True
        )


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
        return "unknown" if row.get("mfu") is None else f"{row['mfu']:.1%}"
    return fmt(row.get(field), spec)


def _value(row: dict | None, field: str) -> float | None:
    return row.get(field) if row is not None and row.get("status") == "ok" else None


def _pair(ra: dict | None, rb: dict | None, field: str, spec: str, *, ratio: bool = True) -> str:
    """'A → B (B/A)': one cell per figure, so the table stays narrow and wraps between words."""
    text = f"{_cell(ra, field, spec)} → {_cell(rb, field, spec)}"
    quotient = _ratio(_value(rb, field), _value(ra, field)) if ratio else "-"
    return text if quotient == "-" else f"{text} ({quotient})"


COLUMNS = ("model", "mode", "batch x seq", "GPUs", "tok/s/GPU A → B (B/A)", "MFU A → B", "mem GiB A → B (B/A)")


def compare_table(matched: Matched) -> Table:
    a, b, path_a, path_b = matched.a, matched.b, matched.path_a, matched.path_b
    # light rules, cells that wrap between words: in a narrow terminal every figure stays whole
    # names as plain text: a '[' in a file's, a model's or a mode's name is no rich markup
    table = Table(title=Text(f"A = {path_a.name}   B = {path_b.name}"), box=box.SIMPLE_HEAD)
    for name in COLUMNS:
        table.add_column(name, justify="left" if name in ("model", "mode") else "right", overflow="fold")
    for key in matched.ordered_keys[:MAX_SHOWN]:
        ra, rb = a.get(key), b.get(key)
        table.add_row(
            *(
                Text(cell)
                for cell in (
                    str(key[0]),
                    str(key[1]),
                    f"{key[2]} x {key[3]}",
                    str(key[4]),
                    _pair(ra, rb, "tokens_per_s_per_gpu", ",.0f"),
                    _pair(ra, rb, "mfu", "", ratio=False),
                    _pair(ra, rb, "mem_allocated_gib", ".1f"),
                )
            )
        )
    return table


def breakdown_shares(ra: dict | None, rb: dict | None) -> dict[str, dict[str, float | None]]:
    """Class -> {"a": share, "b": share} of a matched pair (idle last); {} when neither has a breakdown."""

    def shares(row: dict | None) -> dict[str, float]:
        b = (row or {}).get("breakdown") if (row or {}).get("status") == "ok" else None
        if not isinstance(b, dict):
            return {}
        return {name: c["share"] for name, c in b.get("classes", {}).items()} | {IDLE: b.get("idle_share", 0.0)}

    a, b = shares(ra), shares(rb)
    if not a and not b:
        return {}
    return {name: {"a": a.get(name), "b": b.get(name)} for name in (*CLASSES, IDLE) if name in a or name in b}


def breakdown_compare_table(matched: Matched) -> Table | None:
    """Each matched row's time per class, A beside B (the first MAX_SHOWN pairs with a
    breakdown); None when no row has a breakdown."""
    a, b = matched.a, matched.b
    keys = matched.breakdown_keys[:MAX_SHOWN]
    if not keys:
        return None
    table = Table(title=Text("time per step by class, A → B: share of the step; achieved rate (of its ceiling)"), box=box.SIMPLE_HEAD)
    for name in ("model", "mode", "class", "A", "B"):
        table.add_column(name, justify="left" if name in ("model", "mode", "class") else "right", overflow="fold")
    for key in keys:
        ra, rb = a.get(key), b.get(key)
        for name, pair in breakdown_shares(ra, rb).items():
            cells = []
            for row, share in ((ra, pair["a"]), (rb, pair["b"])):
                if name == IDLE:
                    cells.append("-" if share is None else f"{share:.1%}")
                else:
                    cells.append(class_cell(((row or {}).get("breakdown") or {}).get("classes", {}).get(name)))
            table.add_row(*(Text(cell) for cell in (str(key[0]), str(key[1]), name, *cells)))
    return table


ATTRIBUTION_SUFFIX = ".attribution.json"  # bench --attribute writes it beside its rows' JSON lines


def attributions_beside(paths: tuple[Path, ...]) -> list:
    """The attribution written beside each results file (``<stem>.attribution.json`` for
    ``<stem>.jsonl``), read and checked as the release notes read it; none where there is none."""
    from trainstack.release.results import read_attribution

    found = []
    for path in paths:
        sibling = path.with_name(path.name.removesuffix(".jsonl") + ATTRIBUTION_SUFFIX)
        if sibling.is_file() and not sibling.is_symlink():
            found.append(read_attribution(sibling, sibling.parent))
    return found


def print_attributions(attributions: list, console: Console | None = None) -> None:
    """Each attribution's table and headline, as the release notes show them."""
    from trainstack.release.markdown import ATTRIBUTION_HEADER, attribution_cells, attribution_title

    console = console or out
    for attribution in attributions:
        table = Table(title=Text(f"What changed the speed: {attribution_title(attribution)}"))
        for name in ATTRIBUTION_HEADER:
            table.add_column(name, justify="left" if name in ("step", "what changed", "confidence") else "right")
        for step in attribution.steps:
            table.add_row(*(Text(cell) for cell in attribution_cells(step)))
        console.print(table)
        console.print(Text(f"{attribution.headline} (noise floor {attribution.noise_floor * 100:.1f}%)"), highlight=False, soft_wrap=True)
