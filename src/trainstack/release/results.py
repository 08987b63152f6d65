"""Verify and bench results, read defensively: what is missing is "not measured", never guessed.

Layout under the results directory (``--results``, default ``build``)::

    <slug>/verify.json        the verify gate of one flavour
    <slug>/verify.partial.json  a verify with parts skipped, read only where verify.json is missing
    <slug>/*.jsonl, *.jsonl   bench results, one JSON object per line

The previous release's figures come from such a directory or from its release.json.

Fields read from ``verify.json`` (``trainstack verify`` writes it; anything else is ignored,
and what is missing is reported as not measured):

- ``verdict``: "pass" or "fail" (nothing else, in that case); ``reasons``: why it failed, one line each
- ``skipped``: the parts left out (report, files, advisories, ops, linkcheck, smoke, suites); a "pass" with the
  suites skipped is reported "not run"
- ``gate.suites[]``: ``tests`` (tests run), ``failed`` (ids still failing, not known),
  ``known[]`` = {``test``, ``reason``, ``link``} (failures accepted by the known-issues file),
  ``excluded[]`` = {``test``, ``reason``} (tests the suite's exclude list kept from running;
  at most MAX_EXCLUDED_SHOWN of them are read)
- ``gate.total_failed``: failed tests over all suites (else the count of ``failed`` ids)
- ``links.issues[]``: those with ``accepted`` (the stack's reason, ``[verify.links] accept``) are
  listed with the known issues, as ``link: <file> needs <library>: <reason>`` (``accepted_link``)
- ``not_built``: components the build left out (build --skip-sources); a "pass" with any is
  reported "not built"
- ``stack_name`` and ``lock_inputs_hash``: the stack and lock verified; another stack's or
  another lock's result is refused (results written before they were recorded are taken)

Every text is one line without control, invisible or bidirectional characters, every link an
http(s) URL, every figure finite, >= 0 and at most FIGURE_MAX; no object gives a key twice.

Fields read from each bench line (``trainstack bench --out`` writes them); lines without
a model and a mode are skipped:

- ``model``; ``mode``; ``status`` (default "ok"; rows of another status, such as "oom",
  are listed with it and no figures)
- ``tokens_per_s_per_gpu``; the setup results are compared within: ``batch``, ``seq``,
  ``world_size``
- optional: ``mfu`` (a fraction of the GPU's peak); ``mem_allocated_gib`` (peak allocated)
- the flavour is the ``<slug>/`` directory the file is in; files directly in the results
  directory belong to no one flavour
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from trainstack import grammar
from trainstack.errors import SpecError
from trainstack.fsutil import loads_strict, read_text
from trainstack.redact import redact_data
from trainstack.release.schema import (
    FIGURE_MAX,
    SCHEMA_VERSION,
    Attribution,
    AttributionStep,
    ExcludedTest,
    FailedTest,
    KnownIssue,
    ReleaseNotes,
    Verification,
)

VERIFY_NAME = "verify.json"
PARTIAL_VERIFY_NAME = "verify.partial.json"  # verify --skip: beside the full gate's result, read only without it
VERIFY_SCHEMA_VERSION = 1  # the schema_version `trainstack verify` writes (trainstack.verify.run)

# Counts and figures as measured: whole counts >= 0, finite figures >= 0 (never NaN or Infinity)
# and no larger than any measurement (a figure near the float's limit overflows every sum of it).
Count = Annotated[int, Field(ge=0, le=2**53)]
Figure = Annotated[float, Field(ge=0, le=FIGURE_MAX, allow_inf_nan=False)]
# A text the notes show: one line of at most 2,000 characters, nothing invisible in it.
Line = Annotated[str, Field(max_length=2000), AfterValidator(grammar.no_controls)]
Link = Annotated[str, Field(max_length=2000), AfterValidator(grammar.web_link)]
Part = Literal["report", "files", "advisories", "ops", "linkcheck", "smoke", "suites"]
NOT_RUN = "not run"  # the verdict of a verification whose test gate was skipped: never "pass"
MAX_EXCLUDED = 100_000  # excluded tests one suite of a verify.json may list
NOT_BUILT = "not built"  # the verdict of a passing verification with components the build left out: never "pass"


class _Tolerant(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class _KnownHit(_Tolerant):
    test: Line
    reason: Line = ""
    link: Link | None = None


class _Excluded(_Tolerant):
    test: Line
    reason: Line


class _Suite(_Tolerant):
    name: Line = ""
    tests: Count | None = None
    failed: Annotated[list[Line], Field(max_length=MAX_EXCLUDED)] = []
    failure_reasons: Annotated[dict[Line, Line], Field(max_length=MAX_EXCLUDED)] = {}
    known: list[_KnownHit] = []
    excluded: Annotated[list[_Excluded], Field(max_length=MAX_EXCLUDED)] = []


class _LinkIssue(_Tolerant):
    file: Line
    library: Line
    accepted: Line = ""
    accepted_link: Link | None = None


class _Links(_Tolerant):
    issues: Annotated[list[_LinkIssue], Field(max_length=MAX_EXCLUDED)] = []


class _Gate(_Tolerant):
    suites: list[_Suite] = []
    total_failed: Count | None = None


class _VerifyDoc(_Tolerant):
    schema_version: int = 1
    verdict: Literal["pass", "fail"] | None = None  # verify's own words: "PASS" is not one of them
    reasons: list[Line] = []
    skipped: list[Part] = []  # parts left out (verify --skip): skipped suites are a gate not run
    gate: _Gate | None = None  # None: the suites were skipped or the stack has none
    links: _Links | None = None  # None: the link check was skipped
    not_built: list[Annotated[str, Field(max_length=200), AfterValidator(grammar.pep508_name)]] = []
    stack_name: Line | None = None  # what was verified; absent in results written before it was recorded
    lock_inputs_hash: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None


class _BenchLine(_Tolerant):
    model: Line | None = None
    mode: Line | None = None
    status: Line = "ok"
    tokens_per_s: Figure | None = Field(None, alias="tokens_per_s_per_gpu")
    batch: Count | None = None
    seq: Count | None = None
    world_size: Annotated[int, Field(ge=1)] = 1
    mfu: Figure | None = None
    peak_memory_gib: Figure | None = Field(None, alias="mem_allocated_gib")
    repeat: Count | None = None  # a row of a run across environments (bench --in, --attribute): not this flavour's

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
    field = ".".join(grammar.shown(p) for p in error["loc"]) or "(top level)"
    message = grammar.CONTROL.sub(" ", str(error["msg"]).removeprefix("Value error, "))  # its values shown already
    return f"{field}: {message[:300]}"


def _json(text: str, where: str, one_line: bool = False) -> Any:
    """Strict JSON: NaN, Infinity and nesting too deep for Python are refused with the place."""
    try:
        return redact_data(loads_strict(text))  # a credential a result carries is masked before any renderer escapes it
    except json.JSONDecodeError as exc:
        place = where if one_line else f"{where}:{exc.lineno}"
        raise SpecError(f"{place}: not valid JSON: {exc.msg}") from None
    except ValueError as exc:
        raise SpecError(f"{where}: not valid JSON: {exc}") from None
    except RecursionError:
        raise SpecError(f"{where}: not valid JSON: nested too deeply") from None


def _known_schema(version: int, where: Path, accepted: int) -> None:
    if version != accepted:
        raise SpecError(f"{where}: schema_version: {version} is not a schema this trainstack reads; accepted: {accepted}")


@dataclass(frozen=True)
class Verified:
    """What a verify result must have verified to count: the stack by its [stack] name and its
    lock manifest by its inputs hash (None: not checked)."""

    stack: str | None = None
    lock_inputs_hash: str | None = None


def parse_verify(text: str, slug: str, where: Path, source: str, expected: Verified = Verified()) -> Verification:
    """One flavour's verification from verify.json text; SpecError naming the file when unreadable
    or recorded for another stack or another lock than ``expected``."""
    try:
        doc = _VerifyDoc.model_validate(_json(text, str(where)))
    except ValidationError as exc:
        raise SpecError(f"{where}: {_first_error(exc)}") from None
    _known_schema(doc.schema_version, where, VERIFY_SCHEMA_VERSION)
    _same_target(doc, where, expected)
    gate = doc.gate
    verdict: str | None = doc.verdict
    reasons = doc.reasons
    if "suites" in doc.skipped and verdict == "pass":
        verdict, reasons = NOT_RUN, ["the test suites were skipped (verify --skip suites): no test gate ran"]
    if doc.not_built and verdict == "pass":
        verdict = NOT_BUILT
        reasons = [*reasons, f"not built (build --skip-sources), so not checked: {', '.join(doc.not_built)}"]
    links = [
        KnownIssue(title=f"link: {_site_path(i.file)} needs {i.library}: {i.accepted}", link=i.accepted_link)
        for i in (doc.links.issues if doc.links else [])
        if i.accepted
    ]
    verification = Verification(
        slug=slug, measured=True, verdict=verdict, reasons=reasons, source=source, not_built=doc.not_built, known_issues=links
    )
    if gate is None:
        return verification
    known = [hit for suite in gate.suites for hit in suite.known]
    failed = gate.total_failed if gate.total_failed is not None else sum(len(s.failed) for s in gate.suites)
    return verification.model_copy(
        update={
            "tests_run": _sum(s.tests for s in gate.suites),
            "tests_failed": failed,
            "tests_allowed": len(known),
            "known_issues": [KnownIssue(title=f"{hit.test}: {hit.reason}" if hit.reason else hit.test, link=hit.link) for hit in known]
            + links,
            "excluded": [ExcludedTest(test=item.test, reason=item.reason) for suite in gate.suites for item in suite.excluded],
            "failures": [
                FailedTest(suite=suite.name, test=test, reason=suite.failure_reasons.get(test, ""))
                for suite in gate.suites
                for test in suite.failed
            ],
        }
    )


def _site_path(path: str) -> str:
    """An object's path under site-packages ('nvfuser/_C.so'), else as written."""
    return path.rsplit("site-packages/", 1)[-1]


def _same_target(doc: _VerifyDoc, where: Path, expected: Verified) -> None:
    if expected.stack is not None and doc.stack_name is not None and doc.stack_name != expected.stack:
        raise SpecError(
            f"{where}: stack_name: verified stack '{grammar.shown(doc.stack_name)}', not "
            f"'{grammar.shown(expected.stack)}' (accepted: a verify.json of this stack; run 'trainstack verify' on it)"
        )
    if expected.lock_inputs_hash is not None and doc.lock_inputs_hash is not None and doc.lock_inputs_hash != expected.lock_inputs_hash:
        raise SpecError(
            f"{where}: lock_inputs_hash: verified lock {doc.lock_inputs_hash[:12]}, not the current "
            f"{expected.lock_inputs_hash[:12]} (accepted: a verify.json of the current lock; verify again)"
        )


def _sum(values: Iterable[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def read_verification(results: Path | None, slugs: Collection[str], expected: Verified = Verified()) -> list[Verification]:
    """Each flavour's verification: the full gate's verify.json, else a partial run's
    verify.partial.json (the notes name the file used); with neither, not measured."""
    found = []
    for slug in sorted(slugs):
        path = _verify_file(results / slug) if results is not None else None
        if path is None:
            found.append(Verification(slug=slug, measured=False))
            continue
        found.append(
            parse_verify(
                read_text(path, path.name, inside=results, folder_name="results folder"), slug, path, f"{slug}/{path.name}", expected
            )
        )
    return found


def _verify_file(folder: Path) -> Path | None:
    for name in (VERIFY_NAME, PARTIAL_VERIFY_NAME):
        path = folder / name
        if path.exists() or path.is_symlink():
            return path
    return None


def parse_bench_lines(text: str, where: Path, slug: str) -> list[BenchResult]:
    """Bench records of one JSON-lines file; lines that are not bench results are skipped."""
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        data = _json(line, f"{where}:{number}", one_line=True)
        if not isinstance(data, dict):
            continue
        try:
            rec = _BenchLine.model_validate(data)
        except ValidationError as exc:
            raise SpecError(f"{where}:{number}: {_first_error(exc)}") from None
        if rec.model is None or rec.mode is None or (rec.status == "ok" and rec.tokens_per_s is None) or rec.repeat is not None:
            continue
        ok = rec.status == "ok"
        rows.append(
            BenchResult(
                slug=slug,
                model=rec.model,
                setup=rec.setup,
                mode=rec.mode,
                status=rec.status,
                tokens_per_s=rec.tokens_per_s if ok else None,
                mfu=rec.mfu if ok else None,
                peak_memory_gib=rec.peak_memory_gib if ok else None,
            )
        )
    return rows


BenchKey = tuple[str, str, str, str]  # (slug, model, setup, mode)


def read_bench(results: Path | None) -> dict[BenchKey, BenchResult]:
    """(slug, model, setup, mode) -> the last result recorded for it under ``results``."""
    if results is None or not results.is_dir():
        return {}
    latest: dict[BenchKey, BenchResult] = {}
    for path in sorted(results.rglob("*.jsonl")):
        relative = path.relative_to(results)
        slug = relative.parts[0] if len(relative.parts) > 1 else ""
        for row in parse_bench_lines(read_text(path, "bench results file", inside=results, folder_name="results folder"), path, slug):
            latest[row.key] = row
    return latest


def bench_of_release(path: Path) -> dict[BenchKey, BenchResult]:
    """The bench figures a previous release.json published, keyed like read_bench's."""
    data = _json(read_text(path, "release.json", inside=path.parent), str(path))
    try:
        notes = ReleaseNotes.model_validate(data)
    except ValidationError as exc:
        raise SpecError(f"{path}: not a release.json: {_first_error(exc)}") from None
    _known_schema(notes.schema_version, path, SCHEMA_VERSION)
    for row in notes.performance:
        for figure in (row.tokens_per_s, row.mfu, row.peak_memory_gib):
            if figure is not None and not 0 <= figure <= FIGURE_MAX:
                raise SpecError(
                    f"{path}: performance: {grammar.shown(row.model)} {grammar.shown(row.mode)}: {figure} is not a measured figure "
                    f"(accepted: a finite number from 0 to {FIGURE_MAX:g})"
                )
    found = (
        BenchResult(
            slug=r.slug,
            model=r.model,
            setup=r.setup,
            mode=r.mode,
            status=r.status,
            tokens_per_s=r.tokens_per_s,
            mfu=r.mfu,
            peak_memory_gib=r.peak_memory_gib,
        )
        for r in notes.performance
    )
    return {row.key: row for row in found}


# --- attributions (bench --attribute --out writes <stem>.attribution.json) --------------------------

ATTRIBUTION_SUFFIX = ".attribution.json"
MAX_STEPS = 200
Signed = Annotated[float, Field(ge=-FIGURE_MAX, le=FIGURE_MAX, allow_inf_nan=False)]
Version = Annotated[str, Field(max_length=200), AfterValidator(grammar.no_controls)]


class _Change(_Tolerant):
    name: Annotated[str, Field(max_length=200), AfterValidator(grammar.pep508_name)]
    before: Version | None = None
    after: Version | None = None

    def text(self) -> str:
        if self.before is None:
            return f"{self.name} {self.after} (added)"
        if self.after is None:
            return f"{self.name} {self.before} (removed)"
        return f"{self.name} {self.before} → {self.after}"


class _Step(_Tolerant):
    step: Line
    changes: Annotated[list[_Change], Field(max_length=100_000)] = []
    note: Line | None = None
    repeats: Annotated[list[Figure], Field(max_length=10_000)] = []
    median: Figure | None = None
    spread: Figure = 0.0
    change: Signed | None = None
    contribution: Signed | None = None
    share: Signed | None = None
    confidence: Line = ""
    headline: Line | None = None


class _AttributionDoc(_Tolerant):
    previous_release: Line
    release: Line
    flavour: Line = ""
    model: Line
    mode: Line
    batch: Count | None = None
    seq: Count | None = None
    noise_floor: Figure = 0.0
    total_change: Signed | None = None
    total_confidence: Line = ""
    unresolved: Annotated[list[Line], Field(max_length=MAX_STEPS)] = []
    steps: Annotated[list[_Step], Field(min_length=1, max_length=MAX_STEPS)]


def read_attributions(results: Path | None, release: str) -> list[Attribution]:
    """The attributions under ``results`` of the speed change into ``release``, in file order."""
    if results is None or not results.is_dir():
        return []
    found = (read_attribution(path, results) for path in sorted(results.rglob(f"*{ATTRIBUTION_SUFFIX}")))
    return [a for a in found if a.release == release]


def read_attribution(path: Path, inside: Path) -> Attribution:
    """One ``<stem>.attribution.json`` (bench --attribute), every value checked."""
    data = _json(read_text(path, "attribution file", inside=inside, folder_name="results folder"), str(path))
    try:
        doc = _AttributionDoc.model_validate(data)
    except ValidationError as exc:
        raise SpecError(f"{path}: not an attribution (bench --attribute): {_first_error(exc)}") from None
    setup = " ".join(p for p in (f"b{doc.batch}" if doc.batch else "", f"s{doc.seq}" if doc.seq else "") if p)
    return Attribution(
        slug=doc.flavour,
        model=doc.model,
        setup=setup,
        mode=doc.mode,
        previous_release=doc.previous_release,
        release=doc.release,
        noise_floor=doc.noise_floor,
        total_change=doc.total_change,
        total_confidence=doc.total_confidence,
        unresolved=doc.unresolved,
        steps=[
            AttributionStep(
                step=s.step,
                changed="; ".join(c.text() for c in s.changes[:50]) + (f"; … {len(s.changes) - 50} more" if len(s.changes) > 50 else ""),
                headline=s.headline or "",
                note=s.note or "",
                median=s.median,
                repeats=len(s.repeats),
                spread=s.spread,
                change=s.change,
                contribution=s.contribution,
                share=s.share,
                confidence=s.confidence,
            )
            for s in doc.steps
        ],
    )
