"""The suite gate: run every declared suite, then compare what still fails to the limits."""

from __future__ import annotations

import shlex
import tempfile
from pathlib import Path

from trainstack.console import err
from trainstack.errors import SpecError, VerifyError
from trainstack.fsutil import describe_os_error
from trainstack.stackfile.schema import Suite
from trainstack.trust import is_pytest_command
from trainstack.verify.suites.known_issues import KnownIssues
from trainstack.verify.suites.runner import NO_ISOLATION, Isolation, run_suite
from trainstack.verify.suites.schema import GateResult, SuiteResult
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
    trust: bool = False,
    isolate: bool = True,
    writable: tuple[Path, ...] = (),
) -> GateResult:
    """``where``: suite name -> "stack.toml:LINE", for error messages about the suite.
    A suite command that is not pytest runs only with ``trust`` (else SpecError before any
    suite runs). ``isolate``: suites run in the sandbox where the machine allows it, with
    their own work folder (and ``writable``) the only folders they may write."""
    where = where or {}
    refuse_untrusted(suites, where, trust)
    isolation = Isolation.probe() if isolate else NO_ISOLATION
    err.print(f"suites: isolation: {isolation.text}", highlight=False, soft_wrap=True)
    try:
        with tempfile.TemporaryDirectory(prefix="trainstack-suites-") as tmp:
            directory = workdir or Path(tmp)
            directory.mkdir(parents=True, exist_ok=True)
            results = [
                run_suite(
                    target,
                    suite,
                    workdir=directory,
                    cwd=cwd,
                    where=where.get(suite.name, suite.name),
                    known=known,
                    target_name=target_name,
                    isolation=isolation,
                    writable=writable,
                )
                for suite in suites
            ]
    except OSError as exc:  # the work folder (under $TMPDIR) full, gone or not writable: no suite verdict
        place = exc.filename or workdir or tempfile.gettempdir()
        raise VerifyError(
            f"{place}: {describe_os_error(exc)} (while running the suites, their work folder under {workdir or tempfile.gettempdir()})",
            hint="free space there or point TMPDIR at a folder with room; no suite verdict was made",
        ) from None
    return judge(results, max_failed_tests, isolation.text)


def refuse_untrusted(suites: list[Suite], where: dict[str, str], trust: bool) -> None:
    """SpecError naming the first suite whose command is not pytest, unless trusted."""
    if trust:
        return
    for suite in suites:
        if not is_pytest_command(suite.command):
            raise SpecError(
                f"{where.get(suite.name, suite.name)}: verify.suite '{suite.name}': command {shlex.quote(suite.command)[:200]} "
                "is not pytest ('python -m pytest ...' or 'pytest ...'); it would run whatever the stack names, "
                "so verify runs it only with --trust"
            )


def judge(results: list[SuiteResult], max_failed_tests: int, isolation: str = "") -> GateResult:
    """Every suite within its own max_failed, not crashed or timed out, and the total within
    the stack's max_failed_tests."""
    reasons = [f"suite {r.name}: {r.status}: {r.reason}" for r in results if r.status != "passed"]
    total = sum(r.remaining for r in results)
    if total > max_failed_tests:
        reasons.append(f"{total} failing test(s) in all suites, more than max_failed_tests = {max_failed_tests}")
    warnings = [
        f"suite {r.name}: exclude test '{item.test}' matched no test (its reason: {item.reason})"
        for r in results
        for item in r.unmatched_exclusions
    ]
    return GateResult(
        suites=results,
        max_failed_tests=max_failed_tests,
        total_failed=total,
        passed=not reasons,
        reasons=reasons,
        isolation=isolation,
        warnings=warnings,
    )
