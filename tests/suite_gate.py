"""The suite gate run over this interpreter on suites planted in a folder: a pytest suite of a file, and
the planted test file whose tests fail, crash at set-up and flake."""

from __future__ import annotations

import sys
from pathlib import Path

from trainstack.stackfile.schema import Suite
from trainstack.verify.suites.gate import run_gate
from trainstack.verify.suites.known_issues import KnownIssues
from trainstack.verify.target import open_target

PLANTED = '''
import os
import pathlib

def test_ok():
    assert 1 + 1 == 2

def test_fails():
    assert 1 == 2

def test_flaky():
    marker = pathlib.Path(os.environ["FLAKY_MARKER"])
    if not marker.exists():
        marker.write_text("failed once")
        assert False, "fails on the first run only"

def test_setup_error(no_such_fixture):
    pass
'''


def gate(path: Path, *suites: Suite, known: KnownIssues | None = None, max_failed_tests: int = 0, trust: bool = False):
    # the flaky test keeps its marker in the suite's folder: left writable in the sandbox
    return run_gate(open_target(Path(sys.executable)), list(suites), max_failed_tests=max_failed_tests,
                    known=known or KnownIssues(), target_name="cpu-debian12-py311-release", cwd=path, trust=trust,
                    writable=(path,))


def pytest_suite(name: str, target: str, **kw) -> Suite:
    return Suite(name=name, command=f"python -m pytest -p no:cacheprovider {target}", **kw)
