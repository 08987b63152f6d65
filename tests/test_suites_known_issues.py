"""The known-issues file: matching, and malformed files named by file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.clirun import assert_no_traceback
from trainstack.cli import main
from trainstack.errors import SpecError
from trainstack.verify.suites.known_issues import load_known_issues

GOOD = '''
[[known]]
test = "*test_linalg.py::TestEigh::*"
suite = "numpy-linalg"
targets = ["cu128-*", "cpu-*"]
reason = "rounding"
link = "https://github.com/numpy/numpy/issues/1"
'''


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "known.toml"
    path.write_text(text)
    return path


def test_matching_by_suite_target_and_test(tmp_path: Path) -> None:
    known = load_known_issues(write(tmp_path, GOOD))
    ids = ["numpy/linalg/tests/test_linalg.py::TestEigh::test_big"]
    assert known.find("numpy-linalg", "cpu-debian12-py311-release", ids) is not None
    assert known.find("other", "cpu-debian12-py311-release", ids) is None
    assert known.find("numpy-linalg", "cu130-ubuntu2404-py312-release", ids) is None
    assert known.find("numpy-linalg", "cpu-x", ["test_other.py::test_x"]) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (GOOD + '\n[[known]]\ntest = "x"\nreason = "r"\nlink = "not a url"\n', "known.toml:12: known.1.link: must be an http(s) URL"),
        (GOOD + '\n[[known]]\ntest = "x"\nlink = "https://e.org/1"\n', "known.toml:9: known.1.reason: required field is missing"),
        ('[[known]]\ntest = "x"\nreason = "r"\nlink = "https://e.org/1"\ntarget = "cpu"\n', "known.toml:5: known.0.target: unknown field"),
        ('[[known]]\ntest = "x\nreason = "r"\n', "known.toml:2: TOML syntax error"),
    ],
)
def test_malformed_file_names_file_and_line(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(SpecError) as info:
        load_known_issues(write(tmp_path, text))
    assert expected in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such known-issues file"):
        load_known_issues(tmp_path / "nope.toml")


def test_malformed_file_through_verify_is_exit_2_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    write(tmp_path, '[[known]]\ntest = "x"\nreason = "r"\nlink = "ftp://x"\n')
    stack = tmp_path / "stack.toml"
    stack.write_text(
        '[stack]\nname = "s"\nrelease = "1"\nimage = "s"\n[components]\npytest = ">=8"\n'
        '[matrix]\ncuda = ["cpu"]\nos = ["debian12"]\npython = ["3.11"]\n'
        '[verify]\nsmoke = []\nknown_issues = "known.toml"\n'
        '[[verify.suite]]\nname = "t"\ncommand = "python -m pytest --version"\n'
    )
    code = main(["verify", str(stack), "--python", sys.executable, "--skip", "report", "--skip", "ops", "--skip", "linkcheck"])
    err = capsys.readouterr().err
    assert_no_traceback(err)
    assert code == 2 and "known.toml:4: known.0.link" in err


def test_the_readme_example_is_a_known_issues_file_the_reader_takes(tmp_path: Path) -> None:
    """The README states the format; its example is parsed by the reader verify uses and matches
    the test, suite and flavour it names."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("Failures a release accepts live in the stack's known-issues file"):]
    example = section[section.index("```toml\n") + len("```toml\n"):section.index("```", section.index("```toml\n") + 7)]
    assert example.startswith("[[known]]")
    known = load_known_issues(write(tmp_path, example))
    [issue] = known.known
    assert (issue.suite, issue.reason, issue.link) == (
        "numpy-linalg", "LAPACK rounding on this CPU", "https://github.com/numpy/numpy/issues/12345")
    ids = ["numpy/linalg/tests/test_linalg.py::TestEigh::test_big_4"]
    assert known.find("numpy-linalg", "cu121-ubuntu2204-py311-release", ids) is issue
    assert known.find("numpy-linalg", "cpu-debian12-py311-release", ids) is None
    for field in ("test", "suite", "targets", "reason", "link"):  # every field the reader takes is stated
        assert f"`{field}`" in section[:section.index("```toml")]
    with pytest.raises(SpecError, match=r"known.toml:7: known.0.severity: unknown field"):
        load_known_issues(write(tmp_path, example + 'severity = "low"\n'))


C10D_LIKE = '''
def test_allreduce():
    pass

def test_broadcast_on_one_gpu():
    assert False, "the failure the release accepts"

def test_new_regression():
    assert False, "a second failure nobody listed"
'''


def test_a_count_per_module_lets_one_more_failure_fail_the_gate(tmp_path: Path) -> None:
    """EESSI accepted '1 failed' in test_c10d_nccl: a pattern over the module with count = 1
    accepts one failure of a real pytest run there, and a second one fails the gate."""
    import sys

    from trainstack.stackfile.schema import Suite
    from trainstack.verify.suites.gate import run_gate
    from trainstack.verify.target import open_target

    (tmp_path / "distributed").mkdir()
    (tmp_path / "distributed" / "test_c10d_nccl.py").write_text(C10D_LIKE)
    entry = ('[[known]]\ntest = "*distributed/test_c10d_nccl*"\nreason = "one c10d NCCL test fails on one GPU"\n'
             'link = "https://github.com/EESSI/software-layer/pull/825"\n')
    suite = Suite(name="c10d", command="python -m pytest -p no:cacheprovider distributed", rerun_failed=False)

    def gate(known_text: str):
        known = load_known_issues(write(tmp_path, known_text))
        return run_gate(open_target(Path(sys.executable)), [suite], max_failed_tests=0, known=known,
                        target_name="cu121-ubuntu2204-py311-release", cwd=tmp_path, writable=(tmp_path,))

    counted = gate(entry + "count = 1\n")
    [result] = counted.suites
    assert [hit.test for hit in result.known] == ["distributed/test_c10d_nccl.py::test_broadcast_on_one_gpu"]
    assert result.failed == ["distributed/test_c10d_nccl.py::test_new_regression"]
    assert not counted.passed and result.status == "failed"
    # without a count the pattern accepts every failure it matches, the unlisted regression too
    both = load_known_issues(write(tmp_path, entry)).accept("c10d", "cu121-ubuntu2204-py311-release",
                                                            [[t] for t in (*[h.test for h in result.known], *result.failed)])
    assert all(issue is not None for issue in both)
    with pytest.raises(SpecError, match=r"known.toml:5: known.0.count: Input should be greater than or equal to 1"):
        load_known_issues(write(tmp_path, entry + "count = 0\n"))


def test_the_eessi_seed_allows_one_failure_in_test_c10d_nccl() -> None:
    seeds = Path(__file__).resolve().parents[1] / "examples" / "seeds"
    known = load_known_issues(seeds / "eessi-known-issues.toml", seeds)
    two = [["distributed/test_c10d_nccl.py::test_a"], ["distributed/test_c10d_nccl.py::test_b"]]
    first, second = known.accept("pytorch", "cu121-ubuntu2204-py311-release", two)
    assert first is not None and first.count == 1 and second is None
