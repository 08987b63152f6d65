"""`verify`: report, op table, link check, smoke checks and the suite gate for one target,
one verdict, and verify.json written atomically."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from trainstack.attest.files import FileDrift
from trainstack.errors import SpecError
from trainstack.stackfile.load import locate
from trainstack.stackfile.paths import stack_path
from trainstack.stackfile.schema import SMOKE_CHECKS, Stack, Verify
from trainstack.verify.advisories import AdvisoryCheck, check_advisories
from trainstack.verify.envvars import EnvSetting, check_env
from trainstack.verify.filedrift import check_files
from trainstack.verify.linkcheck.check import LinkReport, accept_known, check_paths
from trainstack.verify.linkcheck.confirm import confirm_in_target
from trainstack.verify.ops import OpTable, op_table, prebuilt_wanted
from trainstack.verify.provenance import ProvenanceCheck
from trainstack.verify.report import collect_report
from trainstack.verify.report_schema import EnvReport
from trainstack.verify.smoke import SmokeResult, run_smoke
from trainstack.verify.suites.gate import refuse_untrusted, run_gate
from trainstack.verify.suites.known_issues import KnownIssues, load_known_issues
from trainstack.verify.suites.schema import GateResult
from trainstack.verify.target import Target

PARTS = ("report", "files", "advisories", "ops", "linkcheck", "smoke", "suites")
SCHEMA_VERSION = 1
# what --python checks for imports when no stack names the components
DEFAULT_IMPORTS = ("torch", "numpy", "triton", "deepspeed", "flash-attn", "apex", "transformer-engine", "xformers", "transformers")


class VerifyResult(BaseModel):
    schema_version: int = SCHEMA_VERSION
    target: str
    stack: str | None
    flavour: str | None
    generated_at: str
    seconds: float
    skipped: list[str]
    not_built: list[str] = []  # components left out on purpose by build --skip-sources: not checked, not failures
    # what was verified: the stack's [stack] name and its lock manifest's inputs hash (release
    # takes the result only for that stack and lock)
    stack_name: str | None = None
    lock_inputs_hash: str | None = None
    report: EnvReport | None
    # every installed file against the build's record (or the wheels' RECORD): what changed since
    files: FileDrift | None = None
    advisories: AdvisoryCheck | None = None  # the stack's OSV advisories that affect the lock
    provenance: ProvenanceCheck | None = None  # verify --provenance: what the signed statement was checked against
    # the stack's [env], each with the value the environment's activation sets (with the report part)
    environment: list[EnvSetting] = []
    ops: OpTable | None
    links: LinkReport | None
    smoke: list[SmokeResult]
    gate: GateResult | None
    verdict: Literal["pass", "fail"]
    reasons: list[str]


class Scope(BaseModel):
    """What to verify, decided from the stack (or defaults for a bare --python)."""

    stack_path: Path | None = None
    stack: Stack | None = None
    flavour: str | None = None
    components: list[str] = []
    locked: tuple[str, dict[str, str]] | None = None
    also_installed: dict[str, str] = {}  # what the stack installs beyond the lock's packages (toolchain, path components)
    build_record: Path | None = None
    skip: list[str] = []
    not_built: list[str] = []  # components the build left out on purpose (build --skip-sources)
    lock_inputs_hash: str | None = None  # of the lock manifest the built flavour came from
    accelerator: str | None = None  # what the flavour targets: 'cuda' for a CUDA flavour, 'cpu'; None: the host's

    @property
    def settings(self) -> Verify:
        return self.stack.verify if self.stack else Verify()


def run_verify(target: Target, scope: Scope, *, trust: bool = False) -> VerifyResult:
    """``trust``: run suite commands that are not pytest (refused before anything runs otherwise)."""
    start = time.perf_counter()
    wanted = [p for p in PARTS if p not in scope.skip]
    if "suites" in wanted:
        refuse_untrusted(scope.settings.suite, _where(scope), trust)
    files = check_files(target, scope.build_record) if "files" in wanted else None  # before anything runs in it
    advisories = _advisories(scope) if "advisories" in wanted else None
    report = (
        collect_report(target, locked=scope.locked, build_record=scope.build_record, also=scope.also_installed)
        if "report" in wanted
        else None
    )
    rules = scope.stack.rules_in_effect if scope.stack is not None else None
    ops = op_table(target, prebuilt_wanted(scope.stack, scope.components), rules, scope.accelerator) if "ops" in wanted else None
    links = _links(target, scope) if "linkcheck" in wanted else None
    smoke = run_smoke(target, _smoke_checks(scope), _imports(scope, report)) if "smoke" in wanted else []
    gate = _gate(target, scope, trust) if "suites" in wanted else None
    environment = check_env(target, scope.stack.env) if scope.stack is not None and "report" in wanted else []
    reasons = judge(report, ops, links, smoke, gate)
    reasons += files.reasons if files is not None else []
    reasons += advisories.reasons if advisories is not None else []
    reasons += [
        f"env: {e.name} is '{e.declared}' in the stack's [env], the environment's activation sets "
        f"{repr(e.found) if e.found is not None else 'nothing'} (build the flavour again)"
        for e in environment
        if not e.ok
    ]
    return VerifyResult(
        target=str(target.python),
        stack=str(scope.stack_path) if scope.stack_path else None,
        flavour=scope.flavour,
        generated_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        seconds=round(time.perf_counter() - start, 2),
        skipped=[p for p in PARTS if p not in wanted],
        not_built=scope.not_built,
        stack_name=scope.stack.stack.name if scope.stack else None,
        lock_inputs_hash=scope.lock_inputs_hash,
        report=report,
        files=files,
        advisories=advisories,
        environment=environment,
        ops=ops,
        links=links,
        smoke=smoke,
        gate=gate,
        verdict="fail" if reasons else "pass",
        reasons=reasons,
    )


def _advisories(scope: Scope) -> AdvisoryCheck | None:
    if scope.stack is None or scope.stack_path is None or scope.locked is None:
        return None
    return check_advisories(scope.settings, scope.stack_path, scope.locked[1])


def _links(target: Target, scope: Scope) -> LinkReport:
    """The static link check, its findings confirmed inside the target interpreter."""
    links = scope.settings.links
    return accept_known(confirm_in_target(check_paths(target.library_roots(), links), target), links.accept)


def _smoke_checks(scope: Scope) -> list[str]:
    return list(scope.settings.smoke) if scope.stack else list(SMOKE_CHECKS)


def _imports(scope: Scope, report: EnvReport | None) -> list[str]:
    if scope.stack is not None:
        return scope.components
    installed = report.packages if report else {}
    return [name for name in DEFAULT_IMPORTS if name in installed]


def _where(scope: Scope) -> dict[str, str]:
    if scope.stack_path is None:
        return {}
    text = scope.stack_path.read_text(encoding="utf-8")
    return {s.name: f"{scope.stack_path}:{locate(text, ('verify', 'suite', 'command')) or ''}".rstrip(":") for s in scope.settings.suite}


def _gate(target: Target, scope: Scope, trust: bool = False) -> GateResult | None:
    settings = scope.settings
    if not settings.suite:
        return None
    known = KnownIssues()
    base = scope.stack_path.parent if scope.stack_path else Path.cwd()
    if settings.known_issues:  # the path rule check applied, so verify opens what check accepted
        try:
            path = stack_path(settings.known_issues, base, "verify.known_issues")
        except ValueError as exc:
            raise SpecError(f"{scope.stack_path or 'verify'}: verify.known_issues: {exc}") from None
        known = load_known_issues(path, base)
    return run_gate(
        target,
        settings.suite,
        max_failed_tests=settings.max_failed_tests,
        known=known,
        target_name=scope.flavour or "local",
        cwd=base,
        where=_where(scope),
        trust=trust,
    )


def judge(
    report: EnvReport | None, ops: OpTable | None, links: LinkReport | None, smoke: list[SmokeResult], gate: GateResult | None
) -> list[str]:
    """Every reason the verdict is 'fail', one line each (empty: pass)."""
    reasons: list[str] = []
    if report is not None:
        drift = report.drift
        reasons += [f"drift: {name} is locked but not installed" for name in drift.missing]
        reasons += [f"drift: {c.name} locked {c.locked}, installed {c.installed}" for c in drift.different]
        reasons += [f"build: built with {f.name} {f.built}, runs {f.runtime}" for f in report.build.facts if f.match is False]
        reasons += [f"report: {report.errors['probe']}"] if "probe" in report.errors else []
    if ops is not None:
        reasons += [
            f"op {r.package}/{r.name} is recorded as built ahead of time but does not load: {r.load_error}"
            if r.load_error
            else f"op {r.package}/{r.name} is installed but unusable: {r.why_not}"
            for r in ops.broken
        ]
        reasons += [f"op table: the probe failed: {ops.error}"] if ops.error else []
        reasons += [f"prebuilt op missing: {line}" for line in ops.unbuilt]
    if links is not None:
        reasons += [f"link: {i.library} needed by {i.file}: {i.reason or i.detail}" for i in links.errors]
    reasons += [f"smoke {s.name}: {s.reason}" for s in smoke if s.status == "fail"]
    if gate is not None:
        reasons += gate.reasons
    return reasons
