"""Results of the suite gate."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

SuiteStatus = Literal["passed", "failed", "crashed", "timeout", "error"]


class KnownHit(BaseModel):
    test: str
    reason: str
    link: str


class ExcludedTest(BaseModel):
    test: str  # the test's id (in unmatched_exclusions: the stack's pattern that matched none)
    reason: str


class SuiteResult(BaseModel):
    name: str
    command: str
    status: SuiteStatus
    exit_code: int | None
    seconds: float
    reason: str  # one line: why the suite has this status
    tests: int = 0
    xml_failed: int | None = None  # failures + errors counted from the JUnit XML
    summary_failed: int | None = None  # the same from the runner's summary line
    summary_line: str = ""
    cross_check: str = ""  # "agree" or what disagreed
    failed: list[str] = []  # still failing after the rerun, not known
    flaky: list[str] = []  # failed, then passed when rerun
    known: list[KnownHit] = []  # failing, accepted by the known-issues file
    crashed_in: str | None = None  # the test running when the interpreter died
    max_failed: int = 0
    collection_errors: list[str] = []  # modules that failed to import (counted in failed unless known exactly)
    counts: dict[str, int] = {}  # passed/failed/error/skipped/xfailed/xpassed, as pytest's summary line counts
    ran: int = 0  # tests that ran (passed, failed, xfailed, xpassed)
    excluded: list[ExcludedTest] = []  # left out by the suite's exclude list, not run, each with its reason
    unmatched_exclusions: list[ExcludedTest] = []  # exclude entries that matched no collected test
    # why each failing test (failed, collection errors, known, flaky) failed: one line, as pytest's short summary
    failure_reasons: dict[str, str] = {}

    @property
    def remaining(self) -> int:
        return len(self.failed)


class GateResult(BaseModel):
    suites: list[SuiteResult]
    max_failed_tests: int
    total_failed: int
    passed: bool
    reasons: list[str]  # why the gate failed, one line each
    isolation: str = ""  # how the suites were isolated from the machine (the sandbox, or none and why)
    warnings: list[str] = []  # worth a look, not failures: exclusions that matched no test
