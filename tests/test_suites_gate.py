"""The suite gate on real pytest runs: planted failures, an os._exit crash, a flaky test,
a timeout, known issues. numpy's own linalg tests run in test_verify_cli (the README's job)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.suite_gate import PLANTED, gate, pytest_suite
from trainstack.errors import SpecError
from trainstack.stackfile.schema import Suite
from trainstack.verify.suites.gate import judge
from trainstack.verify.suites.junit import read_summary
from trainstack.verify.suites.known_issues import load_known_issues

CRASH = '''
import os

def test_before():
    pass

def test_crash():
    os._exit(3)

def test_after():
    pass
'''

SLOW = '''
import time

def test_sleeps():
    time.sleep(60)
'''


@pytest.fixture()
def suites_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, body in (("test_planted.py", PLANTED), ("test_crash.py", CRASH), ("test_slow.py", SLOW)):
        (tmp_path / name).write_text(textwrap.dedent(body))
    monkeypatch.setenv("FLAKY_MARKER", str(tmp_path / "flaky.marker"))
    return tmp_path



def test_failures_flaky_and_setup_errors_are_counted(suites_dir: Path) -> None:
    result = gate(suites_dir, pytest_suite("planted", "test_planted.py"))
    [suite] = result.suites
    assert suite.status == "failed" and not result.passed
    assert suite.tests == 4
    assert suite.xml_failed == 3 and suite.summary_failed == 3 and suite.cross_check == "agree"
    assert suite.flaky == ["test_planted.py::test_flaky"]
    assert suite.failed == ["test_planted.py::test_fails", "test_planted.py::test_setup_error"]
    assert result.total_failed == 2


def test_known_issues_subtract_and_max_failed_allows(suites_dir: Path) -> None:
    (suites_dir / "known.toml").write_text(textwrap.dedent('''
        [[known]]
        test = "*test_setup_error"
        targets = ["cpu-*"]
        reason = "the fixture ships with a later release"
        link = "https://example.org/issues/1"

        [[known]]
        test = "*test_fails"
        targets = ["cu128-*"]
        reason = "only on CUDA 12.8"
        link = "https://example.org/issues/2"
    '''))
    known = load_known_issues(suites_dir / "known.toml")
    result = gate(suites_dir, pytest_suite("planted", "test_planted.py", max_failed=1), known=known, max_failed_tests=1)
    [suite] = result.suites
    assert [hit.test for hit in suite.known] == ["test_planted.py::test_setup_error"]
    assert suite.failed == ["test_planted.py::test_fails"]
    assert suite.status == "passed" and result.passed


def test_crash_inside_a_test_fails_the_suite_and_names_the_test(suites_dir: Path) -> None:
    result = gate(suites_dir, pytest_suite("crash", "test_crash.py", max_failed=5), max_failed_tests=5)
    [suite] = result.suites
    assert suite.status == "crashed" and not result.passed
    assert suite.crashed_in == "test_crash.py::test_crash"
    assert suite.failed == ["test_crash.py::test_crash"]
    assert "no JUnit XML" in suite.reason


def test_timeout_fails_the_suite(suites_dir: Path) -> None:
    result = gate(suites_dir, pytest_suite("slow", "test_slow.py", timeout=10))
    [suite] = result.suites
    assert suite.status == "timeout" and "timed out after 10 s" in suite.reason
    assert suite.crashed_in == "test_slow.py::test_sleeps"
    assert not result.passed


def test_missing_program_is_one_clear_error(suites_dir: Path) -> None:
    with pytest.raises(SpecError, match="program 'no-such-runner' is not in the environment"):
        gate(suites_dir, Suite(name="ghost", command="no-such-runner --all"), trust=True)


def test_non_pytest_command_is_judged_by_exit_status(suites_dir: Path) -> None:
    result = gate(suites_dir, Suite(name="shell", command="sh -c 'exit 3'"), trust=True)
    assert result.suites[0].status == "failed" and "exit 3" in result.suites[0].reason


def test_non_pytest_command_needs_trust_and_a_run_of_no_counted_test_does_not_pass(suites_dir: Path) -> None:
    with pytest.raises(SpecError, match="is not pytest .* only with --trust"):
        gate(suites_dir, Suite(name="shell", command="sh -c 'exit 0'"))
    with pytest.raises(SpecError, match="only with --trust"):  # 'pytest' as a word of a shell line is not pytest
        gate(suites_dir, Suite(name="shell", command="/bin/sh -c pytest"))
    trusted = gate(suites_dir, Suite(name="shell", command="sh -c 'exit 0'"), trust=True)
    assert trusted.suites[0].status == "failed" and "allow_no_tests" in trusted.suites[0].reason and not trusted.passed
    allowed = gate(suites_dir, Suite(name="shell", command="sh -c 'exit 0'", allow_no_tests=True), trust=True)
    assert allowed.passed


def test_total_over_max_failed_tests_fails_the_gate(suites_dir: Path) -> None:
    result = gate(suites_dir, pytest_suite("planted", "test_planted.py", max_failed=2), max_failed_tests=1)
    assert result.suites[0].status == "passed"
    assert not result.passed and "max_failed_tests = 1" in result.reasons[-1]
    assert judge(result.suites, 2).passed


def test_summary_line_parsing() -> None:
    assert read_summary("...\n= 2 failed, 40 passed, 1 error in 3.21s =\n").failed == 3
    assert read_summary("FF.\n2 failed, 1 passed, 3 warnings in 0.10s\n").counts == {"failed": 2, "passed": 1}
    assert read_summary("no summary here") is None


def test_xml_and_summary_that_disagree_fail_the_suite(suites_dir: Path) -> None:
    """A conftest that hides failures from the terminal summary, not from the XML."""
    (suites_dir / "hidden").mkdir()
    (suites_dir / "hidden" / "conftest.py").write_text(textwrap.dedent('''
        def pytest_terminal_summary(terminalreporter):
            terminalreporter.stats.pop("failed", None)
    '''))
    (suites_dir / "hidden" / "test_hidden.py").write_text("def test_a():\n    assert False\n")
    result = gate(suites_dir, pytest_suite("hidden", "hidden", max_failed=1, rerun_failed=False), max_failed_tests=1)
    [suite] = result.suites
    assert suite.xml_failed == 1 and suite.summary_failed == 0
    assert suite.status == "failed" and "DISAGREE" in suite.reason
