"""The known-issues file: failures that are accepted per target, each with a reason and a link.

    [[known]]
    test = "*numpy/linalg/tests/test_linalg.py::TestEigh::test_big*"   # fnmatch on the test id
    # a collection error (a module that fails to import) is accepted only by its exact id
    suite = "numpy-linalg"          # optional: only in this suite
    targets = ["cu128-*"]           # flavour slugs (fnmatch); default: every target
    reason = "LAPACK rounding on this CPU"
    link = "https://github.com/numpy/numpy/issues/..."
    count = 1                       # optional: how many failures it accepts per suite run;
                                    # default: every test it matches

An entry with a count accepts that many of the failures it matches (in the order the suite
reports them); one more stays a failure, so a pattern over a module that is allowed one
failing test does not hide a second.
"""

from __future__ import annotations

import os
import re
import sys
from fnmatch import fnmatch
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from trainstack import grammar
from trainstack.errors import SpecError
from trainstack.fsutil import read_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only: tomllib is in the standard library from 3.11
    import tomli as tomllib


class KnownIssue(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # what reaches verify.json and the release notes: one line each, nothing invisible; an http(s) link
    test: Annotated[str, Field(min_length=1), AfterValidator(grammar.no_controls)]
    suite: Annotated[str, AfterValidator(grammar.no_controls)] | None = None
    targets: list[Annotated[str, AfterValidator(grammar.no_controls)]] = ["*"]
    reason: Annotated[str, Field(min_length=1), AfterValidator(grammar.no_controls)]
    link: Annotated[str, AfterValidator(grammar.web_link)]
    count: Annotated[int, Field(ge=1, le=1_000_000)] | None = None  # failures accepted per suite run; None: all it matches

    def matches(self, suite: str, target: str, test_ids: list[str], *, exact: bool = False) -> bool:
        if self.suite is not None and self.suite != suite:
            return False
        if not any(fnmatch(target, pattern) for pattern in self.targets):
            return False
        if exact:
            return self.test in test_ids
        return any(fnmatch(test_id, self.test) for test_id in test_ids)


class KnownIssues(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    known: list[KnownIssue] = []

    def find(self, suite: str, target: str, test_ids: list[str], *, exact: bool = False) -> KnownIssue | None:
        """The first entry matching one of ``test_ids``; ``exact``: only an entry that names
        the id itself, no pattern (how a module that fails to import may be accepted)."""
        return next((issue for issue in self.known if issue.matches(suite, target, test_ids, exact=exact)), None)

    def accept(self, suite: str, target: str, failures: list[list[str]], *, exact: bool = False) -> list[KnownIssue | None]:
        """For each failure (its ids), the entry that accepts it, or None: the first matching
        entry whose count is not used up by the failures before it (an entry without a count
        accepts every failure it matches)."""
        used: dict[int, int] = {}
        accepted: list[KnownIssue | None] = []
        for test_ids in failures:
            found = None
            for number, issue in enumerate(self.known):
                if issue.matches(suite, target, test_ids, exact=exact) and (issue.count is None or used.get(number, 0) < issue.count):
                    used[number] = used.get(number, 0) + 1
                    found = issue
                    break
            accepted.append(found)
        return accepted


def load_known_issues(path: Path, folder: Path | None = None) -> KnownIssues:
    """Parse and validate; SpecError naming file, line and field when malformed. The file is
    read inside ``folder`` (the stack's, where it lies in it; else its own): a symbolic link
    may not lead out of it."""
    inside = folder if folder is not None and _within(path, folder) else path.parent
    text = read_text(
        path, "known-issues file", inside=inside, missing="no such known-issues file", hint="expected a known-issues file in TOML"
    )
    if len(text) > MAX_BYTES:
        raise SpecError(
            f"{path}: {len(text)} characters, more than a known-issues file holds "
            f"(accepted: at most {MAX_BYTES} characters, {MAX_ENTRIES} [[known]] entries)"
        )
    depth = nesting(text)
    if depth > MAX_DEPTH:
        raise SpecError(f"{path}: arrays or tables nested {depth} deep; accepted: at most {MAX_DEPTH} (a known-issues file needs three)")
    try:
        return _parse(text, path)
    except RecursionError:  # what the count above could not see: still one line
        raise SpecError(f"{path}: arrays or tables nested too deeply; accepted: at most {MAX_DEPTH}") from None


MAX_BYTES = 4 << 20
MAX_ENTRIES = 100_000
MAX_DEPTH = 16


def _parse(text: str, path: Path) -> KnownIssues:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = re.search(r"line (\d+)", str(exc))
        where = f"{path}:{line.group(1)}" if line else str(path)
        raise SpecError(f"{where}: TOML syntax error: {str(exc).split(' (at line')[0]}") from None
    if isinstance(data.get("known"), list) and len(data["known"]) > MAX_ENTRIES:
        raise SpecError(f"{path}: known: {len(data['known'])} entries; accepted: at most {MAX_ENTRIES}")
    try:
        return KnownIssues.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_describe(exc, text, path)) from None


def nesting(text: str) -> int:
    """The deepest nesting of arrays and inline tables in TOML ``text``, strings and comments
    left out (a bound checked before the parser recurses)."""
    deepest = depth = 0
    quote: str | None = None
    escaped = comment = False
    for char in text:
        if comment:
            comment = char != "\n"
        elif quote is not None:
            if escaped:
                escaped = False
            elif char == "\\" and quote == '"':
                escaped = True
            elif char == quote or char == "\n":
                quote = None
        elif char in "\"'":
            quote = char
        elif char == "#":
            comment = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(0, depth - 1)
    return deepest


def _within(path: Path, folder: Path) -> bool:
    root = os.path.abspath(folder)
    return os.path.commonpath([root, os.path.abspath(path)]) == root


def _describe(exc: ValidationError, text: str, path: Path) -> str:
    error = exc.errors()[0]
    loc = [str(p) for p in error["loc"]]
    field = ".".join(loc)
    line = _line_of(text, loc)
    where = f"{path}:{line}" if line else str(path)
    if error["type"] == "extra_forbidden":
        message = "unknown field (fields: test, suite, targets, reason, link, count)"
    elif error["type"] == "missing":
        message = "required field is missing"
    elif loc[-1] == "link":
        message = f"must be an http(s) URL to the issue, not '{grammar.shown(error.get('input', ''))}'"
    else:
        message = str(error["msg"]).removeprefix("Value error, ")
    return f"{where}: {field}: {message}"


def _line_of(text: str, loc: list[str]) -> int | None:
    """Line of ``known[N].field``: the field's assignment inside the N-th [[known]] table,
    or that table's header when the field is missing."""
    if len(loc) < 2 or loc[0] != "known" or not loc[1].isdigit():
        return None
    index, header, count = int(loc[1]), None, -1
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if line.startswith("[["):
            count += line.strip("[] ") == "known"
            if count == index and header is None:
                header = number
            elif header is not None:
                break
            continue
        if header is not None and len(loc) > 2 and re.match(rf"{re.escape(loc[2])}\s*=", line):
            return number
    return header
