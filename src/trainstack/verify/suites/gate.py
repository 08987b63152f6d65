"""The suite gate: run every declared suite, then compare what still fails to the limits."""

from __future__ import annotations

import tempfile
from pathlib import Path

from trainstack.stackfile.models import Suite
from trainstack.verify.suites.known_issues import KnownIssues
from trainstack.verify.suites.models import GateResult, SuiteResult
from trainstack.verify.suites.runner import run_suite
from trainstack.verify.target import Target


def run_gate(
    target: Target,
    suites: list[Suite],
    *,
    max_failed_tests: int,
    known: KnownIssues,
    target_name: str,
    cwd: Path,
    where: dict[str, str] | None = None,
    workdir: Path | None = None,
) -> GateResult:
    """``where``: suite name -> "stack.toml:LINE", for error messages about the suite."""
    with tempfile.TemporaryDirectory(prefix="trainstack-suites-") as tmp:
        directory = workdir or Path(tmp)
        directory.mkdir(parents=True, exist_ok=True)
        results = [
            run_suite(target, suite, workdir=directory, cwd=cwd, where=(where or {}).get(suite.name, suite.name),
                      known=known, target_name=target_name)
            for suite in suites
        ]
    return judge(results, max_failed_tests)


def judge(results: list[SuiteResult], max_failed_tests: int) -> GateResult:
    """Every suite within its own max_failed, not crashed or timed out, and the total within
    the stack's max_failed_tests."""
    reasons = [f"suite {r.name}: {r.status}: {r.reason}" for r in results if r.status != "passed"]
    total = sum(r.remaining for r in results)
    if total > max_failed_tests:
        reasons.append(f"{total} failing test(s) in all suites, more than max_failed_tests = {max_failed_tests}")
    return GateResult(suites=results, max_failed_tests=max_failed_tests, total_failed=total,
                      passed=not reasons, reasons=reasons)
