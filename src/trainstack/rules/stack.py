"""A stack's own rules: a `[rules]` table in the stack file and a `<stack>.rules.toml` file beside
it (the file first, the table over it), merged over the shipped data files and validated the
same way. Errors name the file, the line and the field."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trainstack.errors import SpecError
from trainstack.fsutil import read_text
from trainstack.rules.data import merged_rules
from trainstack.rules.schema import Rules

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only: tomllib is in the standard library from 3.11
    import tomli as tomllib


def rules_file(stack_path: Path) -> Path:
    """'stacks/torch.toml' -> 'stacks/torch.rules.toml'."""
    return stack_path.with_name(stack_path.stem + ".rules.toml")


def stack_rules(table: dict[str, Any], text: str, stack_path: Path) -> Rules | None:
    """The rules in effect for this stack, or None when it adds none (the shipped ones apply)."""
    beside = rules_file(stack_path)
    from_file: dict[str, Any] = {}
    file_text = ""
    if beside.exists() or beside.is_symlink():
        file_text = read_text(
            beside, "rules file", inside=stack_path.parent, folder_name="stack's folder", hint="expected a rules file in TOML"
        )
        try:
            from_file = tomllib.loads(file_text)
        except tomllib.TOMLDecodeError as exc:
            raise SpecError(f"{beside}: TOML syntax error: {exc}") from None
        _check(from_file, file_text, beside, ())
    if table:
        _check(table, text, stack_path, ("rules",))
    if not from_file and not table:
        return None
    return _validated(_merged(from_file, table), text, stack_path, ("rules",))


def _check(extra: dict[str, Any], text: str, path: Path, prefix: tuple[str, ...]) -> None:
    """Each source of rules must be valid over the shipped data on its own, so an error
    names the file that holds it."""
    _validated(extra, text, path, prefix)


def _merged(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    merged = dict(first)
    for key, value in second.items():
        merged[key] = _merged(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
    return merged


def _validated(extra: dict[str, Any], text: str, path: Path, prefix: tuple[str, ...]) -> Rules:
    try:
        return merged_rules(extra)
    except ValidationError as exc:
        error = min(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
        loc = prefix + tuple(str(part) for part in error["loc"])
        line = line_of(text, loc)
        where = f"{path}:{line}" if line else str(path)
        field = ".".join(loc)
        if error["type"] == "extra_forbidden":
            message = "unknown field (the rules data files' layout: torch, cuda, platforms, extensions tables)"
        elif error["type"] == "missing":
            message = "required field is missing (a new entry needs every field the shipped ones have)"
        else:
            message = str(error["msg"]).removeprefix("Value error, ")[:300]
        raise SpecError(f"{where}: {field}: {message}") from None


def line_of(text: str, loc: tuple[str, ...]) -> int | None:
    """The line of ``loc``'s assignment in TOML ``text``, else of the deepest table header on
    its path (keys such as "2.0" hold dots, so headers are parsed as TOML, not split)."""
    table: tuple[str, ...] = ()
    best: tuple[int, int] | None = None  # (depth, line)
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line.startswith("[") and not line.startswith("[["):
            table = _header_keys(line)
            if table and table == loc[: len(table)] and (best is None or len(table) > best[0]):
                best = (len(table), number)
        elif "=" in line and not line.startswith("#"):
            key = line.split("=", 1)[0].strip().strip('"')
            if table + (key,) == loc:
                return number
    return best[1] if best else None


def _header_keys(line: str) -> tuple[str, ...]:
    try:
        data: object = tomllib.loads(line)
    except tomllib.TOMLDecodeError:
        return ()
    keys: list[str] = []
    while isinstance(data, dict) and len(data) == 1:
        key, data = next(iter(data.items()))
        keys.append(key)
    return tuple(keys)
