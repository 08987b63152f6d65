"""Why a suite's test failed reaches the reader: the assertion or error line of each failure
(as pytest's short summary gives it) in verify's output, in verify.json's suites and in the
release notes' test section; a conftest that fails to import names the missing module."""

from __future__ import annotations

import io
import sys
import textwrap
from pathlib import Path

from rich.console import Console

from trainstack.release.markdown import verification_lines
from trainstack.release.results import parse_verify
from trainstack.stackfile.schema import Suite
from trainstack.verify.render import render_gate
from trainstack.verify.suites.gate import run_gate
from trainstack.verify.suites.known_issues import KnownIssues
from trainstack.verify.target import open_target

FAILING = '''
import pytest

def test_ok():
    assert True

def test_arith():
    assert 1 + 1 == 3, "one and one make two"

def test_raises():
    raise RuntimeError("the device went away")

@pytest.fixture
def broken():
    raise KeyError("HOME_SECRETS")

def test_setup(broken):
    pass
'''


def gate(cwd: Path, command: str):
    suite = Suite(name="planted", command=command, rerun_failed=False)
    return run_gate(open_target(Path(sys.executable)), [suite], max_failed_tests=0, known=KnownIssues(),
                    target_name="cpu-debian12-py311-release", cwd=cwd, isolate=False)


def test_each_failure_keeps_its_reason_in_the_result_the_output_and_the_notes(tmp_path: Path) -> None:
    (tmp_path / "test_planted.py").write_text(textwrap.dedent(FAILING))
    result = gate(tmp_path, "python -m pytest -p no:cacheprovider test_planted.py")
    [suite] = result.suites
    reasons = suite.failure_reasons
    assert "one and one make two" in reasons["test_planted.py::test_arith"]
    assert "assert (1 + 1) == 3" in reasons["test_planted.py::test_arith"]
    assert reasons["test_planted.py::test_raises"] == "RuntimeError: the device went away"
    assert "KeyError: 'HOME_SECRETS'" in reasons["test_planted.py::test_setup"]

    out = io.StringIO()
    render_gate(result, Console(file=out, width=300, color_system=None))
    shown = out.getvalue()
    assert "failing planted: test_planted.py::test_raises - RuntimeError: the device went away" in shown

    doc = {"schema_version": 1, "verdict": "fail", "reasons": result.reasons, "gate": result.model_dump()}
    import json
    verification = parse_verify(json.dumps(doc), "cpu-debian12-py311-release", tmp_path / "verify.json", "verify.json")
    notes = "\n".join(verification_lines(type("Notes", (), {"verification": [verification]})()))
    assert "Tests failing in cpu-debian12-py311-release's gate" in notes
    assert "test_planted.py::test_raises" in notes and "RuntimeError: the device went away" in notes


def test_a_conftest_that_fails_to_import_names_what_is_missing(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text("import no_such_module_for_trainstack\n")
    (tmp_path / "test_one.py").write_text("def test_one():\n    pass\n")
    result = gate(tmp_path, "python -m pytest -p no:cacheprovider test_one.py")
    [suite] = result.suites
    assert suite.status != "passed"
    assert "No module named 'no_such_module_for_trainstack'" in suite.reason, suite.reason


def test_a_module_that_fails_to_import_names_what_is_missing(tmp_path: Path) -> None:
    sub = tmp_path / "pkg"
    sub.mkdir()
    (sub / "test_broken.py").write_text("import no_such_module_for_trainstack\n\ndef test_x():\n    pass\n")
    (tmp_path / "test_fine.py").write_text("def test_fine():\n    pass\n")
    result = gate(tmp_path, "python -m pytest -p no:cacheprovider .")
    [suite] = result.suites
    [module] = suite.collection_errors
    assert "No module named 'no_such_module_for_trainstack'" in suite.failure_reasons[module]
