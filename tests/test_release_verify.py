"""The Verification section from a real `trainstack build` + `trainstack verify` of cpu-minimal."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.release_pair import EXAMPLE, PREVIOUS, STACK, previous_stack_text
from trainstack.cli import main
from trainstack.lock.manifest import manifest_path
from trainstack.release.publish import make_release

# one module of numpy's linalg tests: the gate runs for seconds, not the whole suite's half-minute
SUITE = "python -m pytest --pyargs numpy.linalg.tests.test_regression -q -p no:cacheprovider"


@pytest.mark.python("3.11")  # builds a py311 flavour
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_verification_comes_from_the_verify_json_that_verify_writes(tmp_path, monkeypatch):
    from trainstack.lock import lock_stack

    text = EXAMPLE.read_text()
    assert "--pyargs numpy.linalg -q" in text
    (tmp_path / STACK).write_text(text.replace("python -m pytest --pyargs numpy.linalg -q -p no:cacheprovider", SUITE))
    (tmp_path / PREVIOUS).parent.mkdir()
    (tmp_path / PREVIOUS).write_text(previous_stack_text(text))
    lock_stack(tmp_path / PREVIOUS)
    current = lock_stack(tmp_path / STACK)
    (slug,) = current.flavours
    monkeypatch.chdir(tmp_path)

    assert main(["build", STACK, "--build-dir", "build"]) == 0
    assert main(["verify", STACK, "--build-dir", "build"]) == 0
    written = json.loads((tmp_path / "build" / slug / "verify.json").read_text())
    tests = sum(suite["tests"] for suite in written["gate"]["suites"])
    assert tests > 0

    outcome = make_release(tmp_path / STACK, manifest_path(tmp_path / PREVIOUS), results=tmp_path / "build",
                           out=tmp_path / "out", drivers=lambda cuda: None)
    (verification,) = outcome.notes.verification
    assert (verification.verdict, verification.tests_run, verification.tests_failed, verification.tests_allowed) == (
        "pass", tests, 0, 0)
    assert f"| {slug} | pass | {tests} | 0 | 0 |" in (tmp_path / "out" / "RELEASE.md").read_text()
    shutil.rmtree(tmp_path / "build")  # a venv: do not leave it in the test's temp tree
