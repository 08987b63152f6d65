"""A suite's exclude list: tests kept from running (known failures), each with its reason.
Real pytest runs through the gate and through `trainstack verify`; the verify.json they write
is read by release, whose notes list the excluded tests with their reasons."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from tests.clirun import assert_no_traceback
from tests.release_manifests import COMPONENTS, R128, two_releases
from tests.suite_gate import PLANTED, gate, pytest_suite
from trainstack.cli import main
from trainstack.release.html import render_html
from trainstack.release.markdown import render_markdown
from trainstack.release.notes import Inputs, make_notes
from trainstack.release.results import parse_verify
from trainstack.stackfile.schema import Exclusion

STACK = '''[stack]
name = "s"
release = "1"
image = "s"

[components]
pytest = ">=8"

[matrix]
cuda = ["cpu"]
os = ["debian12"]
python = ["3.11"]

[verify]
smoke = []

[[verify.suite]]
name = "planted"
command = "python -m pytest -p no:cacheprovider test_planted.py"
{extra}
'''

EXCLUDES = '''
[[verify.suite.exclude]]
test = "test_planted.py::test_fails"
reason = "fails on every CPU: upstream bug 1234"

[[verify.suite.exclude]]
test = "*::test_setup_error"
reason = "its fixture ships with a later release"

[[verify.suite.exclude]]
test = "*::test_gone"
reason = "removed upstream"
'''


@pytest.fixture()
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "test_planted.py").write_text(textwrap.dedent(PLANTED))
    monkeypatch.setenv("FLAKY_MARKER", str(tmp_path / "flaky.marker"))
    return tmp_path


def test_excluded_tests_do_not_run_and_are_listed_with_their_reasons(planted: Path) -> None:
    exclude = [Exclusion(test="test_planted.py::test_fails", reason="upstream bug"),
               Exclusion(test="*::test_setup_error", reason="fixture later"),
               Exclusion(test="*::test_gone", reason="removed upstream")]
    result = gate(planted, pytest_suite("planted", "test_planted.py", exclude=exclude))
    [suite] = result.suites
    assert suite.status == "passed" and result.passed, suite.reason
    assert [(e.test, e.reason) for e in suite.excluded] == [
        ("test_planted.py::test_fails", "upstream bug"), ("test_planted.py::test_setup_error", "fixture later")]
    assert suite.failed == [] and suite.ran == 2 and suite.cross_check == "agree"  # test_ok and test_flaky ran
    assert "2 deselected" in suite.summary_line and "2 excluded" in suite.reason
    assert [(e.test, e.reason) for e in suite.unmatched_exclusions] == [("*::test_gone", "removed upstream")]
    assert result.warnings == ["suite planted: exclude test '*::test_gone' matched no test (its reason: removed upstream)"]


def test_verify_writes_the_exclusions_and_release_shows_them(planted: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # verify's sandbox leaves the suite's folder read-only: no flaky test keeping a marker there
    (planted / "test_planted.py").write_text(textwrap.dedent(PLANTED).replace("def test_flaky", "def _not_collected"))
    stack = planted / "stack.toml"
    stack.write_text(STACK.format(extra=EXCLUDES))
    out = planted / "verify.json"
    code = main(["verify", str(stack), "--python", sys.executable, "--skip", "report,ops,linkcheck", "-o", str(out)])
    captured = capsys.readouterr()
    summary = captured.out
    assert code == 0, captured.err
    written = json.loads(out.read_text())
    [suite] = written["gate"]["suites"]
    assert suite["excluded"] == [
        {"test": "test_planted.py::test_fails", "reason": "fails on every CPU: upstream bug 1234"},
        {"test": "test_planted.py::test_setup_error", "reason": "its fixture ships with a later release"}]
    assert suite["unmatched_exclusions"] == [{"test": "*::test_gone", "reason": "removed upstream"}]
    assert "excluded planted: test_planted.py::test_fails: fails on every CPU: upstream bug 1234 (not run)" in summary
    assert "warning: suite planted: exclude test '*::test_gone' matched no test" in summary

    found = parse_verify(out.read_text(), R128, out, "x/verify.json")
    assert [(e.test, e.reason) for e in found.excluded] == [(e["test"], e["reason"]) for e in suite["excluded"]]
    old, new = two_releases()
    notes = make_notes(Inputs(current=new, previous=old, components=COMPONENTS, description="", fragments=[],
                              verification=[found], bench={}, previous_bench={}), {}.get)
    markdown = render_markdown(notes)
    assert (f"Tests excluded from {R128}'s gate (not run):\n\n"
            "- `test_planted.py::test_fails`: fails on every CPU: upstream bug 1234\n"
            "- `test_planted.py::test_setup_error`: its fixture ships with a later release\n") in markdown
    html = render_html(notes, [])
    assert "<li><code>test_planted.py::test_fails</code>: fails on every CPU: upstream bug 1234</li>" in html


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ('[[verify.suite.exclude]]\ntest = "*"\nreason = "all"\n', "matches every test"),
        ('[[verify.suite.exclude]]\ntest = " a::b"\nreason = "r"\n', "is not a test id pattern"),
        ('[[verify.suite.exclude]]\ntest = "a::b"\nreason = ""\n', "is not a one-line text"),
        ('[[verify.suite.exclude]]\ntest = "a::b"\nreason = "two\\nlines"\n', "holds the control character"),
        ('[[verify.suite.exclude]]\ntest = "a::b"\n', "reason"),
        ('[[verify.suite.exclude]]\ntest = "a::b"\nreason = "r"\n[[verify.suite.exclude]]\ntest = "a::b"\nreason = "s"\n',
         "is given twice"),
        ("".join(f'[[verify.suite.exclude]]\ntest = "t{n}"\nreason = "r"\n' for n in range(1001)), "1000"),
    ],
)
def test_bad_exclusions_are_one_line_naming_the_field(planted: Path, extra: str, expected: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    stack = planted / "stack.toml"
    stack.write_text(STACK.format(extra=extra))
    assert main(["check", str(stack)]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {stack}:"), err
    assert "verify.suite" in lines[0] and "exclude" in lines[0] and expected in lines[0], err


def test_exclusions_need_a_pytest_command(planted: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack = planted / "stack.toml"
    stack.write_text(STACK.format(extra=EXCLUDES).replace('"python -m pytest -p no:cacheprovider test_planted.py"',
                                                            '"sh run-tests.sh"'))
    assert main(["check", str(stack)]) == 2
    err = capsys.readouterr().err
    assert_no_traceback(err)
    assert "exclude needs a pytest command" in err
