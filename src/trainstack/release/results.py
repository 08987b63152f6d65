"""Verify and bench results, read defensively: what is missing is "not measured", never guessed.

Layout under the results directory (``--results``, default ``build``)::

    <slug>/verify.json        the verify gate of one flavour
    <slug>/*.jsonl, *.jsonl   bench results, one JSON object per line

Fields read from ``verify.json`` (anything else is ignored):

- verdict: ``verdict`` | ``status`` | ``result`` (a string), or ``passed``/``ok`` (a boolean)
- counts: ``tests`` = {``run``|``total``|``collected``, ``failed``|``failures``,
  ``allowed``|``allowed_failures``|``known_failures``}, or the same keys prefixed
  ``tests_`` at the top level, or summed over ``suites`` = [{the same keys}]
- known issues: ``known_issues`` = ["text", ...] or [{``title``|``summary``|``id``,
  ``link``|``url``}, ...]

Fields read from each bench line (``trainstack bench --out`` writes them); lines without
a model and a mode are skipped:

- ``model`` | ``preset``; ``mode``; ``status`` (default "ok"; rows of another status are
  listed with it and no figures)
- throughput per GPU: ``tokens_per_s_per_gpu`` | ``tokens_per_s`` | ``tokens_per_sec``
- the setup results are compared within: ``batch``, ``seq``, ``world_size``
- optional: ``mfu`` (a fraction); peak memory ``mem_allocated_gib`` | ``peak_memory_gib``
- the flavour: ``flavour`` | ``slug``, else the ``<slug>/`` directory the file is in
"""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from trainstack.errors import SpecError
from trainstack.release.model import KnownIssue, Verification

VERIFY_NAME = "verify.json"


class _Tolerant(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class _Counts(_Tolerant):
    run: int | None = Field(None, validation_alias=AliasChoices("run", "total", "collected"))
    failed: int | None = Field(None, validation_alias=AliasChoices("failed", "failures"))
    allowed: int | None = Field(None, validation_alias=AliasChoices("allowed", "allowed_failures", "known_failures"))


class _Issue(_Tolerant):
    title: str | None = Field(None, validation_alias=AliasChoices("title", "summary", "id", "name"))
    link: str | None = Field(None, validation_alias=AliasChoices("link", "url"))


class _VerifyDoc(_Tolerant):
    verdict: str | None = Field(None, validation_alias=AliasChoices("verdict", "status", "result"))
    passed: bool | None = Field(None, validation_alias=AliasChoices("passed", "ok"))
    tests: _Counts | None = None
    tests_run: int | None = Field(None, validation_alias=AliasChoices("tests_run", "tests_total"))
    tests_failed: int | None = None
    tests_allowed: int | None = None
    suites: list[_Counts] = []
    known_issues: list[_Issue | str] = []


class _BenchLine(_Tolerant):
    model: str | None = Field(None, validation_alias=AliasChoices("model", "preset"))
    mode: str | None = None
    status: str = "ok"
    tokens_per_s: float | None = Field(
        None, validation_alias=AliasChoices("tokens_per_s_per_gpu", "tokens_per_s", "tokens_per_sec")
    )
    batch: int | None = None
    seq: int | None = None
    world_size: int = 1
    mfu: float | None = None
    peak_memory_gib: float | None = Field(None, validation_alias=AliasChoices("mem_allocated_gib", "peak_memory_gib"))
    flavour: str | None = Field(None, validation_alias=AliasChoices("flavour", "slug"))

    @property
    def setup(self) -> str:
        parts = [f"b{self.batch}" if self.batch else "", f"s{self.seq}" if self.seq else ""]
        parts.append(f"x{self.world_size} GPUs" if self.world_size > 1 else "")
        return " ".join(p for p in parts if p)


class BenchResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    slug: str
    model: str
    setup: str
    mode: str
    status: str = "ok"
    tokens_per_s: float | None = None
    mfu: float | None = None
    peak_memory_gib: float | None = None

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.slug, self.model, self.setup, self.mode)


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    field = ".".join(str(p) for p in error["loc"]) or "(top level)"
    return f"{field}: {error['msg']}"


def parse_verify(text: str, slug: str, where: Path, source: str) -> Verification:
    """One flavour's verification from verify.json text; SpecError naming the file when unreadable."""
    try:
        doc = _VerifyDoc.model_validate(json.loads(text))
    except json.JSONDecodeError as exc:
        raise SpecError(f"{where}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    except ValidationError as exc:
        raise SpecError(f"{where}: {_first_error(exc)}") from None
    counts = _counts(doc)
    verdict = doc.verdict or ({True: "pass", False: "fail"}.get(doc.passed) if doc.passed is not None else None)
    issues = [KnownIssue(title=i) if isinstance(i, str) else KnownIssue(title=i.title or "(untitled)", link=i.link)
              for i in doc.known_issues]
    return Verification(
        slug=slug, measured=True, verdict=verdict, tests_run=counts.run, tests_failed=counts.failed,
        tests_allowed=counts.allowed, known_issues=issues, source=source,
    )


def _counts(doc: _VerifyDoc) -> _Counts:
    if doc.tests is not None:
        return doc.tests
    if any(v is not None for v in (doc.tests_run, doc.tests_failed, doc.tests_allowed)):
        return _Counts(run=doc.tests_run, failed=doc.tests_failed, allowed=doc.tests_allowed)
    if doc.suites:
        return _Counts(**{f: _sum(getattr(s, f) for s in doc.suites) for f in ("run", "failed", "allowed")})
    return _Counts()


def _sum(values: Any) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def read_verification(results: Path | None, slugs: Collection[str]) -> list[Verification]:
    """Each flavour's verification; a flavour without verify.json is reported not measured."""
    found = []
    for slug in sorted(slugs):
        path = results / slug / VERIFY_NAME if results is not None else None
        if path is None or not path.is_file():
            found.append(Verification(slug=slug, measured=False))
            continue
        found.append(parse_verify(path.read_text(encoding="utf-8"), slug, path, f"{slug}/{VERIFY_NAME}"))
    return found


def parse_bench_lines(text: str, where: Path, default_slug: str) -> list[BenchResult]:
    """Bench records of one JSON-lines file; lines that are not bench results are skipped."""
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SpecError(f"{where}:{number}: not valid JSON: {exc.msg}") from None
        if not isinstance(data, dict):
            continue
        try:
            rec = _BenchLine.model_validate(data)
        except ValidationError as exc:
            raise SpecError(f"{where}:{number}: {_first_error(exc)}") from None
        if rec.model is None or rec.mode is None or (rec.status == "ok" and rec.tokens_per_s is None):
            continue
        ok = rec.status == "ok"
        rows.append(BenchResult(
            slug=rec.flavour or default_slug, model=rec.model, setup=rec.setup, mode=rec.mode, status=rec.status,
            tokens_per_s=rec.tokens_per_s if ok else None, mfu=rec.mfu if ok else None,
            peak_memory_gib=rec.peak_memory_gib if ok else None,
        ))
    return rows


BenchKey = tuple[str, str, str, str]  # (slug, model, setup, mode)


def read_bench(results: Path | None) -> dict[BenchKey, BenchResult]:
    """(slug, model, setup, mode) -> the last result recorded for it under ``results``."""
    if results is None or not results.is_dir():
        return {}
    latest: dict[BenchKey, BenchResult] = {}
    for path in sorted(results.rglob("*.jsonl")):
        relative = path.relative_to(results)
        default_slug = relative.parts[0] if len(relative.parts) > 1 else ""
        for row in parse_bench_lines(path.read_text(encoding="utf-8"), path, default_slug):
            latest[row.key] = row
    return latest
