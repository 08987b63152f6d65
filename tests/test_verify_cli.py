"""`trainstack verify` end to end: the README's job (lock, build, verify cpu-minimal), a
failing gate, drift, and bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.clirun import assert_no_traceback
from tests.verify_fixtures import REPO, numpy_python  # noqa: F401 - fixture
from trainstack.cli import main

FLAVOUR = "cpu-debian12-py311-release"


@pytest.fixture()
def built_cpu_minimal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    stack = tmp_path / "cpu-minimal.toml"
    shutil.copy(REPO / "examples/stacks/cpu-minimal.toml", stack)
    monkeypatch.chdir(tmp_path)
    assert main(["lock", str(stack)]) == 0
    assert main(["build", str(stack), "--flavour", FLAVOUR]) == 0
    return stack


@pytest.mark.python("3.11")  # builds a py311 flavour
@pytest.mark.slow
def test_readme_job_lock_build_verify(built_cpu_minimal: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(built_cpu_minimal), "--flavour", FLAVOUR]) == 0
    out = capsys.readouterr().out
    assert "VERIFY PASSED" in out
    result = json.loads((built_cpu_minimal.parent / "build" / FLAVOUR / "verify.json").read_text())
    assert result["verdict"] == "pass" and result["flavour"] == FLAVOUR
    smoke = {s["name"]: s for s in result["smoke"]}
    assert smoke["matmul[cpu]"]["status"] == "pass"
    assert smoke["matmul[gpu]"]["status"] == "skip"
    [suite] = result["gate"]["suites"]
    assert suite["name"] == "numpy-linalg" and suite["status"] == "passed" and suite["tests"] > 300
    assert suite["xml_failed"] == 0 and suite["cross_check"] == "agree" and "passed" in suite["summary_line"]
    assert result["report"]["drift"]["missing"] == [] and result["report"]["drift"]["different"] == []
    assert result["links"]["files_checked"] > 0


@pytest.mark.python("3.11")  # builds a py311 flavour
def test_drift_after_an_uninstall_fails_the_verdict(built_cpu_minimal: Path, capsys: pytest.CaptureFixture[str]) -> None:
    venv = built_cpu_minimal.parent / "build" / FLAVOUR / "venv"
    subprocess.run(["uv", "pip", "uninstall", "-q", "--python", venv / "bin/python", "hypothesis"], check=True)
    code = main(["verify", str(built_cpu_minimal), "--skip", "suites", "--skip", "ops", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 1 and result["verdict"] == "fail"
    assert "drift: hypothesis is locked but not installed" in result["reasons"]
    assert any(s["name"] == "import hypothesis" and s["status"] == "fail" for s in result["smoke"])


def test_failing_suite_on_any_python_exits_1_and_writes_json(
    numpy_python: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    (tmp_path / "test_bad.py").write_text("def test_bad():\n    assert 2 + 2 == 5\n")
    stack = tmp_path / "stack.toml"
    stack.write_text(textwrap.dedent('''
        [stack]
        name = "planted"
        release = "1"
        image = "planted"
        [components]
        numpy = ">=2"
        [matrix]
        cuda = ["cpu"]
        os = ["debian12"]
        python = ["3.11"]
        [verify]
        smoke = ["imports"]
        [[verify.suite]]
        name = "bad"
        command = "python -m pytest -p no:cacheprovider test_bad.py"
    '''))
    output = tmp_path / "out" / "verify.json"
    code = main(["verify", str(stack), "--python", str(numpy_python), "--skip", "linkcheck", "--output", str(output)])
    out = capsys.readouterr().out
    assert code == 1 and "VERIFY FAILED" in out and "test_bad.py::test_bad" in out
    result = json.loads(output.read_text())
    assert result["gate"]["suites"][0]["failed"] == ["test_bad.py::test_bad"]
    assert not list(output.parent.glob(".*.tmp"))
    # -q: the failures (each with its reason) and the verdict, nothing of the parts that held
    code = main(["verify", str(stack), "--python", str(numpy_python), "--skip", "linkcheck,report,ops", "-q"])
    captured = capsys.readouterr()
    lines = [line for line in captured.out.splitlines() if line.strip()]
    assert code == 1 and captured.err == ""
    assert lines[0] == "  failing bad: test_bad.py::test_bad - assert (2 + 2) == 5", lines
    assert "VERIFY FAILED" in lines[2] and "smoke" not in captured.out and "test suites" not in captured.out
    assert len(lines) == 6, lines  # the failing test, then the verdict's box: its title and two reasons


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["verify"], "give a stack file or --python PATH"),
        (["verify", "--python", sys.executable, "--skip", "everything"], "--skip everything: not a part of verify"),
        (["verify", "--python", "/etc/hostname"], "/etc/hostname: "),
        (["verify", str(REPO / "examples/stacks/torch-cuda.toml")], "choose one with --flavour"),
    ],
)
def test_bad_input_is_exit_2_and_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert_no_traceback(err)
    assert message in err


def test_a_flavour_never_built_is_exit_8_verification_could_not_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(REPO / "examples/stacks/cpu-minimal.toml"), "--build-dir", "/nonexistent"]) == 8
    err = capsys.readouterr().err
    assert_no_traceback(err)
    assert "is not built" in err and len(err.splitlines()) == 1
