"""The same bench in several environments (``bench --in``, ``bench --attribute``): each repeat of
each environment a fresh worker in that environment's Python (bench.ablation's worker path),
the repeats interleaved (A B C A B C ...) so that a drift of the machine spreads over all of them;
the figures and the attribution are bench.attribute's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from rich.table import Table
from rich.text import Text

from trainstack import proc
from trainstack.bench import attribute as attr
from trainstack.bench.ablation import run_mode
from trainstack.bench.api import free_name
from trainstack.bench.report import rescue, write_jsonl
from trainstack.bench.runner import RunSpec
from trainstack.console import err, out
from trainstack.errors import OutputError, ToolMissingError, UsageError
from trainstack.fsutil import atomic_write_json

PROBE = "import json, platform, torch; print(json.dumps({'python': platform.python_version(), 'torch': torch.__version__}))"
PROBE_TIMEOUT_S = 300.0
MAX_ENVIRONMENTS = 64
MAX_REPEATS = 50


@dataclass(frozen=True)
class Environment:
    label: str  # as the user named it (a step's name for --attribute)
    python: Path


def environment(text: str) -> Environment:
    """``--in TEXT``: a venv folder or a Python interpreter whose torch imports; refused in one line."""
    path = Path(text)
    if path.is_dir():
        python = path / "bin" / "python"
        if not python.is_file():
            raise UsageError(f"--in {text}: a folder without bin/python; accepted: a venv folder or a Python interpreter")
    elif path.is_file():
        python = path
    else:
        raise UsageError(
            f"--in {text}: no such venv or Python interpreter; accepted: a venv folder or a Python "
            "interpreter (an image runs here only as a venv or interpreter it holds)"
        )
    probe(text, python)
    return Environment(text, python)


def probe(label: str, python: Path) -> dict:
    """The environment's Python and torch, from its own interpreter with nothing of ours on its path."""
    try:
        result = proc.run([str(python.absolute()), "-c", PROBE], env={"PYTHONPATH": ""}, echo=False, timeout=PROBE_TIMEOUT_S)
    except OSError as exc:
        raise UsageError(
            f"--in {label}: {python} does not run ({exc.strerror or exc}); accepted: a venv folder or a Python interpreter"
        ) from None
    if not result.ok:
        lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
        last = lines[-1][:200] if lines else f"exit {result.returncode}"
        if "No module named 'torch'" in last:
            raise ToolMissingError(
                f"--in {label}: its Python ({python}) has no torch", hint="install torch there, or name an environment that has it"
            )
        raise UsageError(f"--in {label}: its Python ({python}) cannot import torch: {last}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def run_across(spec: RunSpec, environments: list[Environment], repeats: int, timeout_s: float) -> list[dict]:
    """One row per repeat per environment, interleaved; each row names its environment and repeat."""
    spec = replace(spec, breakdown=False)  # the figure compared is tokens/s; no profiled steps
    rows = []
    for repeat in range(repeats):
        for index, env in enumerate(environments):
            row = run_mode(spec, index, timeout_s, python=str(env.python.absolute()))
            row["environment"] = {"label": env.label, "python": str(env.python), **(row.get("environment") or {})}
            row["repeat"] = repeat + 1
            rows.append(row)
            speed = f"{row['tokens_per_s_per_gpu']:,.1f} tok/s/GPU" if row.get("status") == "ok" else (row.get("error") or "")
            err.print(Text(f"{env.label} (repeat {repeat + 1}/{repeats}): {row.get('status')} {speed}", style="dim"), highlight=False)
    return rows


def label_of(row: dict) -> str:
    return str((row.get("environment") or {}).get("label", ""))


def check_counts(environments: int, repeats: int) -> None:
    if not 1 <= repeats <= MAX_REPEATS:
        raise UsageError(f"--repeats {repeats}: accepted: 1 to {MAX_REPEATS}")
    if environments > MAX_ENVIRONMENTS:
        raise UsageError(f"--in: {environments} environments; accepted: at most {MAX_ENVIRONMENTS}")


def environments_table(rows: list[dict], title: str) -> Table:
    """Per environment: torch, Python, median tokens/s of the repeats, spread, change against the first."""
    figures = attr.figures_of(rows, label_of)
    table = Table(title=Text(title))
    for name in ("environment", "torch", "python", "tok/s/GPU (median)", "repeats", "spread", "vs first", "verdict"):
        table.add_column(name, justify="left" if name in ("environment", "torch", "python", "verdict") else "right")
    versions = {label_of(r): r.get("environment") or {} for r in rows}
    for entry in attr.against_first(figures):
        env = versions.get(entry["environment"], {})
        table.add_row(
            Text(entry["environment"]),
            Text(str(env.get("torch") or "-")),
            Text(str(env.get("python") or "-")),
            f"{entry['median']:,.1f}" if entry["median"] else "not measured",
            str(entry["repeats"]),
            f"{entry['spread'] * 100:.1f}%",
            attr.percent(entry["change"]) if entry["change"] is not None else "-",
            entry["confidence"],
        )
    return table


def attribution_table(attribution: attr.Attribution, title: str) -> Table:
    table = Table(title=Text(title))
    for name in attr.TABLE_HEADER:
        table.add_column(name, justify="left" if name in ("step", "what changed", "confidence") else "right")
    for row in attr.table_rows(attribution):
        table.add_row(*(Text(cell) for cell in row))
    return table


def across_document(rows: list[dict], repeats: int) -> dict:
    figures = attr.figures_of(rows, label_of)
    return {"repeats": repeats, "noise_floor": attr.noise_floor(figures), "environments": attr.against_first(figures)}


def write_results(out_dir: Path | None, stem: str, rows: list[dict], extra: dict | None = None) -> list[Path]:
    """``<stem>.jsonl`` (every repeat's row, with its environment's versions) and, for an
    attribution, ``<stem>.attribution.json``; names taken are never replaced."""
    if out_dir is None:
        return []
    name, _ = free_name(out_dir, stem)
    jsonl = out_dir / f"{name}.jsonl"
    written = [jsonl]
    try:
        write_jsonl(jsonl, rows)
        if extra is not None:
            written.append(out_dir / f"{name}.attribution.json")
            atomic_write_json(written[-1], extra)
    except OSError as exc:
        text = json.dumps({"rows": rows, "attribution": extra}, sort_keys=True)
        raise OutputError(
            f"{written[-1]}: cannot write ({exc.strerror or exc}); the results are in {rescue(text, name + '.json')}"
        ) from None
    for path in written:
        out.print(f"wrote {path}", highlight=False)
    return written
