"""The corpus of hostile suites and bounds (tests/corpus/suites_*, bounds_*), each case driven
through the real verbs as a process (`trainstack verify`, `check`, `bench --compare`), each run
asserting: no traceback, a bound on time and peak memory, no planted token in any output or
file, nothing written outside, no process of the case left.

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
from dataclasses import dataclass
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parent / "corpus"
STACK = ('[stack]\nname = "s"\nrelease = "1"\nimage = "s"\n[components]\npytest = ">=8"\n'
         '[matrix]\ncuda = ["cpu"]\nos = ["debian12"]\npython = ["3.11"]\n[verify]\nsmoke = []\n')
SKIP = "report,ops,linkcheck,smoke"
MIB = 1024  # ru_maxrss is in KiB


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str
    seconds: float
    peak_mib: float

    @property
    def text(self) -> str:
        return self.stdout + self.stderr


def _verb(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 120,
          during=None) -> Ran:
    """`trainstack ARGS` as a process: its exit status, output, wall time and peak memory
    (its own, from wait4). ``during(process)`` runs while it does (to signal it)."""
    import threading

    start = time.monotonic()
    child = subprocess.Popen([sys.executable, "-m", "trainstack.cli", *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env={**os.environ, **(env or {})}, cwd=cwd)
    streams: dict[str, bytes] = {}
    readers = [threading.Thread(target=lambda k=k, f=f: streams.__setitem__(k, f.read()), daemon=True)
               for k, f in (("out", child.stdout), ("err", child.stderr))]
    for reader in readers:
        reader.start()
    killer = threading.Timer(timeout, lambda: (os.kill(child.pid, signal.SIGKILL), os.kill(child.pid, signal.SIGCONT)))
    killer.start()
    try:
        if during is not None:
            during(child)
        _, status, usage = os.wait4(child.pid, 0)
    finally:
        killer.cancel()
    child.returncode = os.waitstatus_to_exitcode(status)
    for reader in readers:
        reader.join(10)
    seconds = time.monotonic() - start
    assert seconds < timeout, f"still running after {timeout} s: killed"
    return Ran(child.returncode, streams.get("out", b"").decode(errors="replace"),
               streams.get("err", b"").decode(errors="replace"), seconds, usage.ru_maxrss / MIB)


def _holds(ran: Ran, *, seconds: float, peak_mib: float = 600) -> None:
    assert "Traceback" not in ran.text, ran.text[-3000:]
    assert ran.seconds < seconds, f"{ran.seconds:.1f} s"
    assert ran.peak_mib < peak_mib, f"{ran.peak_mib:.0f} MiB"


def _marked(mark: str) -> list[int]:
    """Live processes whose environment holds ``mark``."""
    found = []
    needle = f"CORPUS_MARK={mark}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if needle not in Path("/proc", entry, "environ").read_bytes().split(b"\0"):
                continue
            state = Path("/proc", entry, "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            found.append(int(entry))
    return found


def _gone(mark: str, within: float = 5.0) -> list[int]:
    deadline = time.monotonic() + within
    while (left := _marked(mark)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.fixture()
def case(tmp_path: Path):
    """A stack folder (its suites' files copied from the corpus), a file outside it, a mark in the
    environment of everything the case starts; afterwards: nothing outside changed, nothing left."""
    mark = uuid.uuid4().hex
    folder = tmp_path / "stack"
    folder.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("intact\n")
    shm_before = set(os.listdir("/dev/shm"))
    env = {"CORPUS_MARK": mark, "CORPUS_VICTIM": str(victim), "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    yield Case(folder, env, mark, victim)
    left = _marked(mark)
    for pid in left:  # never kept running past the test, whatever it asserted
        os.kill(pid, signal.SIGKILL)
    assert left == [], "processes of the case outlived it"
    assert victim.read_text() == "intact\n" and sorted(p.name for p in outside.iterdir()) == ["victim.txt"]
    assert not [name for name in set(os.listdir("/dev/shm")) - shm_before if mark in name]


@dataclass
class Case:
    folder: Path
    env: dict[str, str]
    mark: str
    victim: Path

    def stack(self, source: str, *, name: str = "corpus", timeout: float = 60, known: str | None = None,
              extra: str = "") -> Path:
        """A stack whose one suite runs the corpus file ``source`` (copied beside it)."""
        shutil.copy(CORPUS / source, self.folder / source)
        text = STACK + (f'known_issues = "{known}"\n' if known else "")
        if known:
            shutil.copy(CORPUS / known, self.folder / known)
        text += (f'[[verify.suite]]\nname = "{name}"\ntimeout = {timeout}\n'
                 f'command = "python -m pytest -q -p no:cacheprovider {source}"\n{extra}')
        path = self.folder / "stack.toml"
        path.write_text(text)
        self.env["CORPUS_SUITE"] = name
        return path

    def verify(self, stack: Path, *more: str, timeout: float = 120, during=None) -> Ran:
        return _verb("verify", str(stack), "--python", sys.executable, "--skip", SKIP, "-o",
                     str(self.folder / "verify.json"), *more, env=self.env, cwd=self.folder, timeout=timeout,
                     during=during)


def _sandboxed() -> bool:
    from trainstack.verify.suites.runner import Isolation

    return Isolation.probe().sandboxed


needs_sandbox = pytest.mark.skipif(os.geteuid() != 0, reason="the suite sandbox needs root (namespaces)")


def _suite(case: Case) -> dict:
    return json.loads((case.folder / "verify.json").read_text())["gate"]["suites"][0]


# --- class 3: suites escape or outlive verify ------------------------------------------------


@needs_sandbox
def test_a_suite_that_stops_verify_still_times_out_even_while_verify_is_stopped(case: Case) -> None:
    stack = case.stack("suites_stop_verify.py", timeout=6)

    def stop_verify_while_the_suite_runs(child: subprocess.Popen) -> None:
        deadline = time.monotonic() + 30
        while not [p for p in _marked(case.mark) if b"pytest" in Path(f"/proc/{p}/cmdline").read_bytes()]:
            assert time.monotonic() < deadline, "the suite never started"
            time.sleep(0.1)
        os.kill(child.pid, signal.SIGSTOP)  # verify stopped from outside: its own timer stands still
        try:
            time.sleep(6 + 3)
            assert [p for p in _marked(case.mark) if p != child.pid] == [], "the suite outlived its timeout"
        finally:
            os.kill(child.pid, signal.SIGCONT)

    ran = case.verify(stack, during=stop_verify_while_the_suite_runs, timeout=90)
    _holds(ran, seconds=60)
    assert ran.code == 1, ran.text[-2000:]
    suite = _suite(case)
    assert suite["status"] == "timeout" and "timed out after 6 s" in suite["reason"], suite["reason"]
    assert "suites isolation: mount namespace and PID namespace" in ran.text


@needs_sandbox
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_the_suite_and_its_daemon_die_with_verify_whatever_the_signal(case: Case, signum: int) -> None:
    stack = case.stack("suites_daemon.py", timeout=120)

    def end_verify_once_the_daemon_runs(child: subprocess.Popen) -> None:
        deadline = time.monotonic() + 30
        while not [p for p in _marked(case.mark) if b"corpus-daemon" in Path(f"/proc/{p}/cmdline").read_bytes()]:
            assert time.monotonic() < deadline, "the daemon never started"
            time.sleep(0.1)
        os.kill(child.pid, signum)

    ran = case.verify(stack, during=end_verify_once_the_daemon_runs, timeout=60)
    assert ran.seconds < 40
    assert _gone(case.mark) == [], f"left after verify got {signum.name}"
    if signum != signal.SIGKILL:
        assert "Traceback" not in ran.text, ran.text[-2000:]
        assert ran.code != 0


@needs_sandbox
def test_dev_shm_is_private_and_proc_sys_read_only_in_the_sandbox(case: Case) -> None:
    ran = case.verify(case.stack("suites_shm_procsys.py"))
    _holds(ran, seconds=60)
    suite = _suite(case)
    assert ran.code == 0 and suite["status"] == "passed" and suite["ran"] == 3, (suite["reason"], ran.text[-2000:])
    assert not Path("/dev/shm", f"corpus-{case.mark}").exists()


@needs_sandbox
def test_a_log_replaced_by_a_link_is_never_written_through(case: Case) -> None:
    ran = case.verify(case.stack("suites_log_link.py"))
    _holds(ran, seconds=60)
    assert ran.code == 1, ran.text[-2000:]
    suite = _suite(case)
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
    ran = case.verify(stack)
    _holds(ran, seconds=60)
    as_json = case.verify(stack, "--json")
    assert ran.code == 1 and as_json.code == 1, ran.text[-2000:]
    for text in (ran.stdout, ran.stderr, as_json.stdout, as_json.stderr):
        assert token not in text
    assert "test_x[***]" in ran.text  # reported, masked, not dropped
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files and not [p for p in files if token.encode() in p.read_bytes()]
    suite = _suite(case)
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


# --- class 5: bounds and tracebacks ----------------------------------------------------------


def test_a_known_issues_file_nested_50000_deep_is_one_error_line(case: Case) -> None:
    stack = case.stack("suites_shm_procsys.py", known="bounds_known_deep.toml")
    ran = case.verify(stack, timeout=30)
    _holds(ran, seconds=20, peak_mib=300)
    lines = ran.stderr.strip().splitlines()
    assert ran.code == 2 and len(lines) == 1 and lines[0].startswith("error: "), ran.stderr[-2000:]
    assert "bounds_known_deep.toml" in lines[0] and "nested" in lines[0]


def test_markup_in_a_known_issue_is_printed_as_written(case: Case) -> None:
    stack = case.stack("bounds_known_markup.py", known="bounds_known_markup.toml")
    ran = case.verify(stack)
    _holds(ran, seconds=60)
    assert ran.code == 0, ran.text[-2000:]
    assert "https://example.org/issue/[/]x" in ran.stdout and "[bold red]styled?[/] reason" in ran.stdout


def test_a_full_tmpdir_during_a_suite_is_one_error_line(case: Case, tmp_path: Path) -> None:
    from tests.mounts import tmpfs

    with tmpfs(tmp_path / "small", "size=4m") as small:
        case.env["TMPDIR"] = str(small)
        ran = case.verify(case.stack("bounds_tmpdir_full.py"))
        left = _gone(case.mark)
    _holds(ran, seconds=60)
    lines = ran.stderr.strip().splitlines()
    assert ran.code == 8, ran.text[-2000:]
    assert lines[-1].startswith("error: ") and "No space left on device" in lines[-1], lines[-3:]
    assert sum(line.startswith("error: ") for line in lines) == 1
    assert left == []


@pytest.mark.parametrize("field", ["batch", "seq", "steps", "warmup", "preset", "modes"])
def test_a_bench_field_of_another_type_is_refused(field: str) -> None:
    ran = _verb("check", str(CORPUS / f"bounds_bench_{field}.toml"))
    _holds(ran, seconds=20)
    lines = ran.stderr.strip().splitlines()
    assert ran.code == 2 and lines and lines[0].startswith("error: "), ran.text
    assert f"bench.{field}" in lines[0] and f"bounds_bench_{field}.toml" in lines[0], lines[0]


def test_bench_compare_of_200000_rows_is_bounded(tmp_path: Path) -> None:
    spec = json.loads((CORPUS / "bounds_compare_rows.json").read_text())
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        from compare_rows import results_file
    finally:
        sys.path.pop(0)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    results_file(a, spec["rows"], 1000.0)
    results_file(b, spec["rows"], 1100.0)
    ran = _verb("bench", "--compare", str(a), str(b), timeout=spec["seconds_at_most"] * 2)
    _holds(ran, seconds=spec["seconds_at_most"], peak_mib=spec["peak_mib_at_most"])
    assert ran.code == 0, ran.stderr[-2000:]
