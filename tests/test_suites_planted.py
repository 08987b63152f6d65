"""The suite gate on the planted-failure suite (tests/data/planted_suite): its counts equal pytest's
own summary line, collection errors are failures (accepted only by an exact known-issues
entry), a run of no test fails, a hang's child process dies with its process group, reruns
keep parametrised ids and the suite's own options."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from trainstack.stackfile.schema import Suite
from trainstack.verify.suites.gate import run_gate
from trainstack.verify.suites.known_issues import KnownIssue, KnownIssues
from trainstack.verify.suites.runner import rerun_argv
from trainstack.verify.target import open_target

PLANTED = Path(__file__).resolve().parent / "data" / "planted_suite"
SELECT = "-p no:cacheprovider -o python_files=planted_*.py"
IMPORT_ERROR = "tests/data/planted_suite/main/planted_import_error.py"


@pytest.fixture()
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PLANTED_STATE", str(tmp_path))
    return tmp_path


def gate(command: str, known: KnownIssues | None = None, **suite: object):
    spec = Suite(name="planted", command=f"python -m pytest {SELECT} {command}", **suite)
    state = os.environ.get("PLANTED_STATE")  # the planted tests write their pids there: left writable in the sandbox
    result = run_gate(open_target(Path(sys.executable)), [spec], max_failed_tests=100, known=known or KnownIssues(),
                      target_name="local", cwd=PLANTED.parents[2], writable=(Path(state),) if state else ())
    return result.suites[0]


def test_counts_equal_pytests_summary_line(state: Path) -> None:
    suite = gate("--continue-on-collection-errors tests/data/planted_suite/main")
    assert suite.cross_check == "agree", suite.cross_check
    assert suite.counts == {"passed": 5, "failed": 3, "error": 2, "skipped": 2, "xfailed": 1}
    assert suite.summary_line.startswith("3 failed, 5 passed, 2 skipped, 1 xfailed, 2 errors")
    assert suite.collection_errors == [IMPORT_ERROR]
    # the parametrised flaky tests were rerun by their full ids and passed: flaky, not failing
    assert sorted(suite.flaky) == ["tests/data/planted_suite/main/planted_main.py::test_flaky[first-try]",
                                   "tests/data/planted_suite/main/planted_main.py::test_flaky[x[1]]"]
    assert sorted(suite.failed) == sorted([IMPORT_ERROR, "tests/data/planted_suite/main/planted_main.py::test_fails",
                                           "tests/data/planted_suite/main/planted_main.py::test_teardown_error"])
    assert suite.status == "failed" and suite.ran == 9


def test_a_pattern_never_accepts_a_collection_error(state: Path) -> None:
    link = "https://example.org/issue"
    wildcard = KnownIssues(known=[KnownIssue(test="*planted*", reason="everything planted", link=link)])
    suite = gate("--continue-on-collection-errors tests/data/planted_suite/main", wildcard, max_failed=0)
    assert suite.failed == [IMPORT_ERROR] and suite.status == "failed"
    exact = KnownIssues(known=[
        KnownIssue(test=IMPORT_ERROR, reason="module needs a package not in this stack", link=link),
        KnownIssue(test="*planted_main.py::*", reason="planted", link=link),
    ])
    suite = gate("--continue-on-collection-errors tests/data/planted_suite/main", exact)
    assert suite.failed == [] and suite.status == "passed"


def test_collection_error_that_interrupts_pytest_is_an_error(state: Path) -> None:
    suite = gate("tests/data/planted_suite/main")
    assert suite.status == "error" and suite.exit_code == 2
    assert suite.failed == [IMPORT_ERROR] and suite.ran == 0
    assert suite.cross_check == "agree"


def test_a_suite_that_ran_no_test_fails_unless_allowed(state: Path) -> None:
    suite = gate("-k no_test_has_this_name tests/data/planted_suite/main/planted_main.py")
    assert suite.status == "failed" and "no test ran" in suite.reason
    allowed = gate("-k no_test_has_this_name tests/data/planted_suite/main/planted_main.py", allow_no_tests=True)
    assert allowed.status == "passed"


def test_timeout_kills_the_whole_process_group(state: Path) -> None:
    suite = gate("tests/data/planted_suite/hang", timeout=15)
    assert suite.status == "timeout" and "process group was killed" in suite.reason
    assert suite.failed == ["tests/data/planted_suite/hang/planted_hang.py::test_hangs_with_a_child_process"]
    assert suite.crashed_in == "tests/data/planted_suite/hang/planted_hang.py::test_hangs_with_a_child_process"
    assert (state / "child.pid").is_file()  # the child started (its pid is one of the suite's own PID namespace)
    assert _alive_of(state) == []


def test_timeout_ends_children_that_left_the_process_group(state: Path) -> None:
    start = time.monotonic()
    suite = gate("tests/data/planted_suite/escape -k holds_the_pipes", timeout=5)
    assert time.monotonic() - start < 5 + 15  # the timeout, pytest's start and the kill
    assert suite.status == "timeout"
    assert (state / "escaped.pid").is_file()
    assert _alive_of(state) == []


def test_a_daemon_left_by_a_finished_suite_neither_holds_verify_nor_survives(state: Path) -> None:
    start = time.monotonic()
    suite = gate("tests/data/planted_suite/escape -k leaves_a_daemon", timeout=300)
    assert time.monotonic() - start < 20
    assert suite.status == "passed" and suite.ran == 1, suite.reason
    assert (state / "daemon.pid").is_file()
    assert _alive_of(state) == []


def test_crash_is_counted_with_the_test_it_happened_in(state: Path) -> None:
    suite = gate("tests/data/planted_suite/crash")
    assert suite.status == "crashed"
    assert suite.failed == ["tests/data/planted_suite/crash/planted_crash.py::test_crash"]
    assert suite.counts == {"passed": 1}


def test_rerun_keeps_the_invocation_and_parametrised_ids() -> None:
    words = ["/v/bin/python", "-m", "pytest", "--pyargs", "numpy", "-p", "no:cacheprovider", "-k", "linalg",
             "--junitxml=/x.xml", "-q"]
    ids = ["/v/numpy/linalg/tests/test_linalg.py::TestEig::test_types[complex64]"]
    assert rerun_argv(words, ids) == ["/v/bin/python", "-m", "pytest", "--pyargs", "-p", "no:cacheprovider",
                                      "-k", "linalg", "-q", *ids]


def _alive_of(state: Path) -> list[int]:
    """The running processes a planted suite started (found by the PLANTED_STATE of their
    environment: the pids they write are those of the suite's own PID namespace); a zombie
    left to a parent that does not reap counts as dead."""
    mark = f"PLANTED_STATE={state}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if mark not in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                continue
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        state_line = next(line for line in status.splitlines() if line.startswith("State:"))
        if "Z" not in state_line.split()[1]:
            found.append(int(entry))
    return found
