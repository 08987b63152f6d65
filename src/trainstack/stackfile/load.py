"""Load stack.toml into a validated Stack; every error names file, line, field and the fix."""

from __future__ import annotations

import difflib
import sys
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from pydantic import BaseModel, ValidationError

from trainstack import grammar
from trainstack.errors import SpecError
from trainstack.fsutil import read_text
from trainstack.rules.data import shipped_rules
from trainstack.rules.schema import Rules
from trainstack.rules.stack import stack_rules
from trainstack.stackfile.matrix import base_of, expand_flavours
from trainstack.stackfile.paths import stack_path
from trainstack.stackfile.schema import TAG_AXES, Stack
from trainstack.stackfile.tags import axes_of, flavour_tags, pinned_versions, tag_template
from trainstack.trust import runs_code

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only: tomllib is in the standard library from 3.11
    import tomli as tomllib


def load_stack(path: str | Path) -> Stack:
    """Read, parse and validate a stack file. Raises SpecError with a one-line message."""
    path = Path(path)
    # a FIFO or a directory is refused unopened
    text = read_text(path, "stack file", missing="no such stack file", hint="a stack file is TOML")
    try:
        return parse_stack(text, path)
    except RecursionError:
        raise SpecError(f"{path}: tables or arrays nested too deeply; a stack file needs a few levels") from None


def parse_stack(text: str, path: Path) -> Stack:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: TOML syntax error: {grammar.shown(exc, 300)}") from None
    _refuse_control_characters(data, text, path)
    rules = _rules_in_effect(data, text, path)
    try:
        stack = Stack.model_validate(data, context={"rules": rules})
    except ValidationError as exc:
        raise SpecError(_describe(exc, text, path)) from None
    if not expand_flavours(stack):
        line = locate(text, ("matrix", "exclude"))
        raise SpecError(f"{path}:{line}: matrix: every cell is excluded; nothing would be built")
    _require_bases(stack, text, path)
    _confine_paths(stack, text, path)
    _trusted_env(stack, text, path)
    _tag_fields_known(stack, text, path)
    stack._rules_in_effect = rules
    _require_known_os(stack, text, path)
    return stack


def _rules_in_effect(data: dict[str, Any], text: str, path: Path) -> Rules:
    """The shipped rules with the stack's own over them, built before the stack is validated so that
    validation (known Python versions, OS names) sees them. A ``[rules]`` value that is no table is
    left to validation to refuse."""
    table = data.get("rules")
    return stack_rules(table if isinstance(table, dict) else {}, text, path) or shipped_rules()


def _require_known_os(stack: Stack, text: str, path: Path) -> None:
    """Each OS of the matrix is one the rules in effect describe (its glibc decides the wheels)."""
    known = stack.rules_in_effect.platforms.os
    given: list[tuple[tuple[str, ...], str]] = [(("matrix", "os"), name) for name in stack.matrix.os]
    given += [(("matrix", "include", str(n), "os"), cell.os) for n, cell in enumerate(stack.matrix.include)]
    for loc, name in given:
        if name not in known:
            raise _located(
                text,
                path,
                loc,
                f"OS '{grammar.shown(name)}' is not in the rules data (one of: {', '.join(known)}); "
                f'describe it under [rules.platforms.os."{grammar.shown(name)}"] or pick a known one',
            )


def _located(text: str, path: Path, loc: tuple[str, ...], message: str) -> SpecError:
    line = locate(text, loc)
    where = f"{path}:{line}" if line else str(path)
    field = ".".join(grammar.shown(part) for part in loc)
    return SpecError(f"{where}: {field}: {message}")


def _refuse_control_characters(data: object, text: str, path: Path, loc: tuple[str, ...] = ()) -> None:
    """No string anywhere (keys included) holds a newline or another control character."""
    items: list[tuple[str, object]] = []
    if isinstance(data, dict):
        items = [(str(key), value) for key, value in data.items()]
        for key, _ in items:
            if grammar.CONTROL.search(key):
                raise _located(text, path, loc, f"the key '{grammar.shown(key)}' holds a control character")
    elif isinstance(data, list):
        items = [(str(number), value) for number, value in enumerate(data)]
    elif isinstance(data, str):
        try:
            grammar.no_controls(data)
        except ValueError as exc:
            raise _located(text, path, loc, str(exc)) from None
    for key, value in items:
        _refuse_control_characters(value, text, path, (*loc, key))


def _require_bases(stack: Stack, text: str, path: Path) -> None:
    """With bases given (an image is meant to be built), each flavour needs one, and exactly one
    (stackfile.bases: keyed by OS or by any axis of the matrix)."""
    bases = stack.build.base
    if not bases:
        return
    for flavour in expand_flavours(stack):
        try:
            found = base_of(stack, flavour)
        except SpecError as exc:
            raise _located(text, path, ("build", "base"), exc.message.removeprefix("build.base: ")) from None
        if found is None:
            raise _located(
                text,
                path,
                ("build", "base"),
                f"no base image for flavour {flavour.slug} (keys given: {', '.join(sorted(bases))}); "
                f'add "{flavour.os}" = "debootstrap:SUITE" or an image reference such as "docker.io/library/debian:12", '
                f'or a key of its other axes such as "cuda={flavour.cuda}"',
            )


def _confine_paths(stack: Stack, text: str, path: Path) -> None:
    """Each path the stack names leads where its field allows (trainstack.stackfile.paths), links followed."""
    folder = path.parent
    given: list[tuple[tuple[str, ...], str, str | None]] = [
        (("components", key, "path"), "components.path", c.path) for key, c in stack.components.items()
    ]
    given += [
        (("build", "ca_bundle"), "build.ca_bundle", stack.build.ca_bundle),
        (("build", "compiler_cache", "dir"), "build.compiler_cache.dir", stack.build.compiler_cache.dir),
        (("verify", "known_issues"), "verify.known_issues", stack.verify.known_issues),
        (("verify", "advisories"), "verify.advisories", stack.verify.advisories),
    ]
    for loc, field, value in given:
        if value is None:
            continue
        try:
            stack_path(value.removeprefix("file://"), folder, field)
        except ValueError as exc:
            raise _located(text, path, loc, str(exc)) from None


def _tag_fields_known(stack: Stack, text: str, path: Path) -> None:
    """Each field of [stack] tag is a flavour field or one of the stack's components."""
    if stack.stack.tag is None:
        return
    keys = {c.key for c in stack.components.values()}
    for field in grammar.tag_template_fields(stack.stack.tag):
        if field not in TAG_AXES and canonicalize_name(field) not in keys:
            example = sorted(keys)[0].replace("-", "_")
            raise _located(
                text,
                path,
                ("stack", "tag"),
                f"'{{{field}}}' is neither a flavour field nor a component (accepted: {', '.join(TAG_AXES)}, or a "
                f"component's name with '_' for '-', such as {{{example}}}, for its locked version)",
            )
    pinned = pinned_versions(stack)
    if pinned is None:
        return  # the lock fills the versions, and checks the tags
    try:
        flavour_tags(tag_template(stack), {f.slug: (axes_of(stack, f), pinned) for f in expand_flavours(stack)})
    except ValueError as exc:
        raise _located(text, path, ("stack", "tag"), str(exc)) from None


def _trusted_env(stack: Stack, text: str, path: Path) -> None:
    """A component's build_env sets a variable that loads or runs code (trust.runs_code:
    LD_PRELOAD, PYTHONPATH, BASH_ENV, ...) only when [build] allow_env names it, the image's [env]
    (PROMPT_COMMAND, OPENSSL_CONF, NCCL_NET_PLUGIN, ...) only when [env] allow names it: else it
    would load or run code in every build process, or every program of the image or venv."""
    allowed = set(stack.build.allow_env)
    for key, component in stack.components.items():
        for name in component.build_env:
            reason = runs_code(name)
            if reason is not None and name not in allowed:
                raise _located(
                    text,
                    path,
                    ("components", key, "build_env", name),
                    f"'{grammar.shown(name)}' makes the build's processes load or run other code ({reason}); set it "
                    f'only by naming it in [build] allow_env (allow_env = ["{grammar.shown(name)}"]), or leave it out',
                )
    for name in stack.env:
        reason = runs_code(name)
        if reason is not None and name not in stack.env_allow:
            raise _located(
                text,
                path,
                ("env", name),
                f"'{grammar.shown(name)}' makes every program of the image or venv load or run other code ({reason}); "
                f'set it only by naming it in [env] allow (allow = ["{grammar.shown(name)}"]), or leave it out',
            )


def _describe(exc: ValidationError, text: str, path: Path) -> str:
    """The first validation error as one line: file:line: field: message."""
    # an unknown field usually explains a "missing" one beside it (a typo), so name it first
    error = min(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    loc = tuple(str(part) for part in error["loc"] if not str(part).startswith("function-"))
    if loc[:1] == ("env_allow",):  # [env] allow, moved out of [env] by the schema
        loc = ("env", "allow", *loc[1:])
    field = ".".join(grammar.shown(part) for part in loc) or "(top level)"
    line = locate(text, loc)
    where = f"{path}:{line}" if line else str(path)
    kind = error["type"]
    if kind == "extra_forbidden":
        return f"{where}: {field}: unknown field{_suggest(loc)}"
    if kind == "missing":
        return f"{where}: {field}: required field is missing"
    dotted = _dotted_key(loc, error.get("input")) if kind in ("string_type", "int_type", "float_type", "bool_type") else None
    if dotted is not None:
        return (
            f"{where}: {field}: a table where a value belongs: TOML reads the bare key {grammar.shown(dotted)} as "
            f"nested keys split at each dot; a key with a dot needs quotes (accepted: "
            f'"{grammar.shown(dotted)}" = "...")'
        )
    message = grammar.shown(str(error["msg"]).removeprefix("Value error, "), 400)
    if kind == "finite_number":
        message += " (a number such as 10; inf and nan are not accepted)"
    return f"{where}: {field}: {message}"


def _dotted_key(loc: tuple[str, ...], value: object) -> str | None:
    """'ubuntu22.04' where a text was wanted and TOML gave a table, from the bare dotted key
    ubuntu22.04 (read as ubuntu22 -> 04); None for any other error."""
    if not loc or not isinstance(value, dict) or len(value) != 1:
        return None
    parts = [loc[-1]]
    while isinstance(value, dict) and len(value) == 1:
        key, value = next(iter(value.items()))
        parts.append(str(key))
    return ".".join(parts) if isinstance(value, (str, int, float, bool)) else None


def _suggest(loc: tuple[str, ...]) -> str:
    """'; did you mean ...?' with the closest valid field name, or the list of valid names."""
    model: type[BaseModel] | None = Stack
    for part in loc[:-1]:
        model = _child_model(model, part)
        if model is None:
            return ""
    if model is None:
        return ""
    valid = sorted(model.model_fields)
    close = difflib.get_close_matches(loc[-1], valid, n=1, cutoff=0.6)
    if close:
        return f"; did you mean '{close[0]}'?"
    return f"; valid fields: {', '.join(valid)}"


def _child_model(model: type[BaseModel] | None, part: str) -> type[BaseModel] | None:
    if model is None:
        return None
    if part.isdigit() or part not in model.model_fields:
        # list index or dict key: stay on the item model found by the previous step
        return model
    annotation: Any = model.model_fields[part].annotation
    for candidate in _walk_types(annotation):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _walk_types(annotation: Any) -> list[Any]:
    found = [annotation]
    for arg in getattr(annotation, "__args__", ()) or ():
        found.extend(_walk_types(arg))
    return found


def locate(text: str, loc: tuple[str, ...]) -> int | None:
    """Best line number (1-based) in TOML ``text`` for a field location such as
    ``("components", "flash-attn", "jobs", "divisor")``.

    An exact assignment wins; then an inline table that mentions the last key; then the
    deepest table header on the path.
    """
    keys = [part for part in loc if not part.isdigit()]
    if not keys:
        return None
    fallback: tuple[int, int] | None = None  # (depth, line)
    table: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if line.startswith("["):
            table = [t.strip().strip('"') for t in line.strip("[]").split(".")]
            depth = _common_prefix(table, keys)
            if depth == len(table) and (fallback is None or depth > fallback[0]):
                fallback = (depth, number)
            continue
        if "=" not in line:
            continue
        path = table + [k.strip().strip('"') for k in line.split("=", 1)[0].split(".")]
        if path == keys:
            return number
        depth = _common_prefix(path, keys)
        if depth == len(path) and _mentions(line, keys[-1]):
            return number
        if depth == len(path) and (fallback is None or depth > fallback[0]):
            fallback = (depth, number)
    return fallback[1] if fallback else None


def _common_prefix(a: list[str], b: list[str]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _mentions(line: str, key: str) -> bool:
    return f"{key} =" in line or f"{key}=" in line or f'"{key}"' in line
