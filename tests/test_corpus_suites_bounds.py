"""The corpus of hostile suites (tests/corpus/suites_*): suites that escape or outlive verify,
each driven through `trainstack verify` as a process and asserting no traceback, a bound on time
and memory, no planted token in any output or file, nothing written outside, no process left.
Each case's `.attacks` note says what it attacks and what must hold."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.clirun import assert_no_traceback
from tests.corpus_harness import CORPUS, Case, case, first_suite, gone, holds, marked, needs_sandbox, running  # noqa: F401 (case: a fixture)


# --- class 3: suites escape or outlive verify ------------------------------------------------


@needs_sandbox
def test_a_suite_that_stops_verify_still_times_out_even_while_verify_is_stopped(case: Case) -> None:
    stack = case.stack("suites_stop_verify.py", timeout=4)

    def stop_verify_while_the_suite_runs(child: subprocess.Popen) -> None:
        deadline = time.monotonic() + 30
        while not running(case.mark, b"pytest"):
            assert time.monotonic() < deadline, "the suite never started"
            time.sleep(0.1)
        os.kill(child.pid, signal.SIGSTOP)  # verify stopped from outside: its own timer stands still
        try:
            time.sleep(4 + 2)
            assert [p for p in marked(case.mark) if p != child.pid] == [], "the suite outlived its timeout"
        finally:
            os.kill(child.pid, signal.SIGCONT)

    ran = case.verify(stack, during=stop_verify_while_the_suite_runs, timeout=90)
    holds(ran, seconds=60)
    assert ran.code == 1, ran.text[-2000:]
    suite = first_suite(case)
    assert suite["status"] == "timeout" and "timed out after 4 s" in suite["reason"], suite["reason"]
    assert "suites isolation: mount namespace and PID namespace" in ran.text


@needs_sandbox
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_the_suite_and_its_daemon_die_with_verify_whatever_the_signal(case: Case, signum: int) -> None:
    stack = case.stack("suites_daemon.py", timeout=80)

    def end_verify_once_the_daemon_runs(child: subprocess.Popen) -> None:
        deadline = time.monotonic() + 30
        while not running(case.mark, b"corpus-daemon"):
            assert time.monotonic() < deadline, "the daemon never started"
            time.sleep(0.1)
        os.kill(child.pid, signum)

    ran = case.verify(stack, during=end_verify_once_the_daemon_runs, timeout=60)
    assert ran.seconds < 40
    assert gone(case.mark) == [], f"left after verify got {signum.name}"
    if signum != signal.SIGKILL:
        assert_no_traceback(ran.text)
        assert ran.code != 0


@needs_sandbox
def test_dev_shm_is_private_and_proc_sys_read_only_in_the_sandbox(case: Case) -> None:
    ran = case.verify(case.stack("suites_shm_procsys.py"))
    holds(ran, seconds=60)
    suite = first_suite(case)
    assert ran.code == 0 and suite["status"] == "passed" and suite["ran"] == 3, (suite["reason"], ran.text[-2000:])
    assert not Path("/dev/shm", f"corpus-{case.mark}").exists()


@needs_sandbox
def test_the_suite_keeps_no_capability_that_reaches_the_machine(case: Case) -> None:
    case.env["CORPUS_HOST_IPC"] = os.readlink("/proc/self/ns/ipc")
    ran = case.verify(case.stack("suites_capabilities.py"))
    holds(ran, seconds=60)
    suite = first_suite(case)
    assert ran.code == 0 and suite["status"] == "passed" and suite["ran"] == 6, (suite["reason"], ran.text[-2000:])
    assert "capabilities kept: CAP_CHOWN" in ran.text and "CAP_NET_ADMIN" not in ran.text
    assert "(every other one is /dev/null)" in ran.text


@needs_sandbox
def test_planted_progress_events_neither_hang_verify_nor_fill_its_memory(case: Case) -> None:
    ran = case.verify(case.stack("suites_progress_planted.py", timeout=8), timeout=90)
    holds(ran, seconds=60, peak_mib=300)
    assert ran.code == 1, ran.text[-2000:]
    suite = first_suite(case)
    assert suite["status"] == "timeout" and "timed out after 8 s" in suite["reason"], suite["reason"]


@needs_sandbox
def test_a_log_replaced_by_a_link_is_never_written_through(case: Case) -> None:
    ran = case.verify(case.stack("suites_log_link.py"))
    holds(ran, seconds=60)
    assert ran.code == 1, ran.text[-2000:]
    suite = first_suite(case)
    assert suite["status"] == "failed" and suite["failed"] == ["suites_log_link.py::test_replaces_its_log_with_a_link"]
    assert "planted log line" not in case.victim.read_text()


def test_without_the_sandbox_a_log_link_stops_verify_with_one_line(case: Case, tmp_path: Path) -> None:
    """The second wall, where no namespace keeps the suite from the log's folder: O_NOFOLLOW."""
    from trainstack.errors import VerifyError
    from trainstack.stackfile.schema import Suite
    from trainstack.verify.suites.gate import run_gate
    from trainstack.verify.suites.known_issues import KnownIssues
    from trainstack.verify.target import open_target

    shutil.copy(CORPUS / "suites_log_link.py", case.folder)
    suite = Suite(name="corpus", command="python -m pytest -q -p no:cacheprovider suites_log_link.py")
    os.environ.update({k: v for k, v in case.env.items() if k != "TMPDIR"} | {"CORPUS_SUITE": "corpus"})
    try:
        with pytest.raises(VerifyError) as info:
            run_gate(open_target(Path(sys.executable)), [suite], max_failed_tests=0, known=KnownIssues(),
                     target_name="local", cwd=case.folder, isolate=False, workdir=tmp_path / "work")
    finally:
        for key in ("CORPUS_MARK", "CORPUS_VICTIM", "CORPUS_SUITE"):
            os.environ.pop(key, None)
    assert "corpus.log" in str(info.value) and "symbolic links" in str(info.value) and "\n" not in str(info.value)


def test_a_token_in_test_ids_messages_and_logs_reaches_no_output_and_no_file(case: Case, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    token = f"tok-{uuid.uuid4().hex}"
    case.env["CORPUS_SECRET_TOKEN"] = token
    stack = case.stack("suites_secret_id.py")
    ran = case.verify(stack, "--json")  # the JSON on stdout, the progress and failures on stderr, verify.json written
    holds(ran, seconds=60)
    assert ran.code == 1, ran.text[-2000:]
    assert token not in ran.stdout and token not in ran.stderr
    assert "test_x[***]" in ran.stderr and "test_x[***]" in ran.stdout  # reported, masked, not dropped
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files and not [p for p in files if token.encode() in p.read_bytes()]
    suite = first_suite(case)
    assert "suites_secret_id.py::test_x[***]" in suite["failed"], suite["failed"]
    monkeypatch.setenv("CORPUS_SECRET_TOKEN", token)  # the release runs where the credential is set too
    notes = _release_test_section(case, tmp_path, token)
    assert token not in notes and "***" in notes


def _release_test_section(case: Case, tmp_path: Path, token: str) -> str:
    """The release notes' test section (Markdown) from a verify.json that carries the token
    unmasked in its reasons, a failing id and an excluded test (as a hostile results folder brings it)."""
    from types import SimpleNamespace

    from trainstack.release.markdown import verification_lines
    from trainstack.release.results import parse_verify

    document = json.loads((case.folder / "verify.json").read_text())
    document["reasons"].append(f"suite corpus: failed: suites_secret_id.py::test_x[{token}]")
    document["gate"]["suites"][0]["failed"].append(f"suites_secret_id.py::test_x[{token}_more]")
    document["gate"]["suites"][0]["excluded"] = [{"test": f"test_z[{token}]", "reason": f"because {token}"}]
    raw = tmp_path / "hostile-verify.json"
    raw.write_text(json.dumps(document))
    verification = parse_verify(raw.read_text(), "cpu", raw, "cpu/verify.json")
    raw.unlink()
    return "\n".join(verification_lines(SimpleNamespace(verification=[verification])))
