"""Read the JSON the nodes wrote into a fleet folder: each file untrusted (a regular file inside
the folder, no link followed, bounded in size and count, validated); a bad file is one error
line naming it, the field and what would be accepted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from trainstack.errors import SpecError, UsageError
from trainstack.fsutil import describe_os_error, read_regular
from trainstack.health.fleet_schema import MAX_NODES, AllreduceSweep
from trainstack.health.schema import HealthReport

M = TypeVar("M", bound=BaseModel)
FILE_LIMIT = 4 << 20  # a node's report is a few kB; a sweep grows with the node pairs


def load_fleet(folder: Path) -> tuple[list[tuple[str, HealthReport]], AllreduceSweep | None]:
    """(file name, report) of every node report in ``folder``, and the all-reduce sweep if one is there."""
    if folder.is_symlink() or not folder.is_dir():
        raise UsageError(f"--fleet {folder}: not a folder", hint="give the folder the nodes wrote their JSON into")
    files = sorted(p for p in folder.iterdir() if p.name.endswith(".json"))
    if len(files) > MAX_NODES + 1:
        raise SpecError(f"{folder}: {len(files)} JSON files; accepted: at most {MAX_NODES} node reports and one sweep")
    reports: list[tuple[str, HealthReport]] = []
    sweep: tuple[str, AllreduceSweep] | None = None
    seen: dict[str, str] = {}
    for path in files:
        data = _read_json(path, folder)
        if isinstance(data, dict) and data.get("kind") == "allreduce":
            if sweep is not None:
                raise SpecError(f"{path}: a second all-reduce sweep (the first: {sweep[0]}); accepted: one a folder")
            sweep = (path.name, _validated(AllreduceSweep, data, path))
            continue
        report = _validated(HealthReport, data, path)
        name = report.node or path.stem
        if name in seen:
            raise SpecError(f"{path}: node {name} reported twice (also in {seen[name]}); accepted: one report a node")
        seen[name] = path.name
        reports.append((path.name, report))
    if not reports:
        raise SpecError(f"{folder}: no node report (*.json written by 'trainstack health --node-out {folder}')")
    return reports, sweep[1] if sweep else None


def _read_json(path: Path, folder: Path) -> object:
    try:
        raw = read_regular(path, "JSON file", inside=folder, links=False, limit=FILE_LIMIT)
        return json.loads(raw.decode("utf-8"))
    except OSError as exc:
        raise SpecError(f"{path}: cannot read: {describe_os_error(exc)}") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 text (byte {exc.start}); expected a health report in JSON") from None
    except (json.JSONDecodeError, RecursionError) as exc:
        where = f"line {exc.lineno}: {exc.msg}" if isinstance(exc, json.JSONDecodeError) else "nested too deep"
        raise SpecError(f"{path}: not JSON ({where}); expected a health report") from None


def _validated(model: type[M], data: object, path: Path) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(document)"
        raise SpecError(
            f"{path}: {field}: {first['msg']} (accepted: a {model.__name__} as 'trainstack health --node-out' writes it)"
        ) from None
