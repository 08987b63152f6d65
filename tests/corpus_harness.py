"""How the corpus cases of suites and bounds (tests/corpus/suites_*, bounds_*) are driven:
through the real verbs as processes (`trainstack verify`, `check`, `bench --compare`), each run
measured (exit status, output, wall time, peak memory) and each case checked after: nothing
written outside its folder, nothing planted in /dev/shm, no process carrying its mark left."""

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

from tests.clirun import assert_no_traceback

CORPUS = Path(__file__).resolve().parent / "corpus"
STACK = ('[stack]\nname = "s"\nrelease = "1"\nimage = "s"\n[components]\npytest = ">=8"\n'
         '[matrix]\ncuda = ["cpu"]\nos = ["debian12"]\npython = ["3.11"]\n[verify]\nsmoke = []\n')
SKIP = "report,ops,linkcheck,smoke"
MIB = 1024  # VmHWM is in KiB


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


def verb(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 120,
         during=None) -> Ran:
    """`trainstack ARGS` as a process: its exit status, output, wall time and peak memory
    (its own, from wait4). ``during(process)`` runs while it does (to signal it)."""
    return measured([sys.executable, "-m", "trainstack.cli", *args], env=env, cwd=cwd, timeout=timeout, during=during)


def measured(argv: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 120,
             during=None) -> Ran:
    """``argv`` as a process, measured as ``verb`` says."""
    import threading

    start = time.monotonic()
    child = subprocess.Popen(argv, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env={**os.environ, **(env or {})}, cwd=cwd)
    streams: dict[str, bytes] = {}
    readers = [threading.Thread(target=lambda k=k, f=f: streams.__setitem__(k, f.read()), daemon=True)
               for k, f in (("out", child.stdout), ("err", child.stderr))]
    for reader in readers:
        reader.start()
    killer = threading.Timer(timeout, lambda: (os.kill(child.pid, signal.SIGKILL), os.kill(child.pid, signal.SIGCONT)))
    killer.start()
    peak = _PeakWatch(child.pid)
    try:
        if during is not None:
            during(child)
        _, status, _ = os.wait4(child.pid, 0)
    finally:
        killer.cancel()
        peak.stop()
    child.returncode = os.waitstatus_to_exitcode(status)
    for reader in readers:
        reader.join(10)
    seconds = time.monotonic() - start
    assert seconds < timeout, f"still running after {timeout} s: killed"
    return Ran(child.returncode, streams.get("out", b"").decode(errors="replace"),
               streams.get("err", b"").decode(errors="replace"), seconds, peak.kib / MIB)


class _PeakWatch:
    """The process's own peak resident memory (VmHWM of its memory map since its exec), read every
    20 ms while it runs. Not wait4's ru_maxrss: Linux carries the spawning process's high-water
    mark into the child across fork and exec, so a child of a large pytest worker would report
    the worker's memory as its own."""

    def __init__(self, pid: int) -> None:
        import threading

        self.kib = 0
        self._status = Path(f"/proc/{pid}/status")
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.is_set():
            self._read()
            self._done.wait(0.02)

    def _read(self) -> None:
        try:
            text = self._status.read_text()
        except OSError:
            return
        for line in text.splitlines():
            if line.startswith("VmHWM:"):
                self.kib = max(self.kib, int(line.split()[1]))

    def stop(self) -> None:
        self._done.set()
        self._thread.join(5)


def holds(ran: Ran, *, seconds: float, peak_mib: float = 600) -> None:
    assert_no_traceback(ran.text)
    assert ran.seconds < seconds, f"{ran.seconds:.1f} s"
    assert ran.peak_mib < peak_mib, f"{ran.peak_mib:.0f} MiB"


def marked(mark: str) -> list[int]:
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


def running(mark: str, word: bytes) -> list[int]:
    """Live processes carrying ``mark`` whose command line holds ``word``."""
    found = []
    for pid in marked(mark):
        try:
            if word in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue  # ended meanwhile
    return found


def gone(mark: str, within: float = 5.0) -> list[int]:
    deadline = time.monotonic() + within
    while (left := marked(mark)) and time.monotonic() < deadline:
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
    left = marked(mark)
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
        return verb("verify", str(stack), "--python", sys.executable, "--skip", SKIP, "-o",
                     str(self.folder / "verify.json"), *more, env=self.env, cwd=self.folder, timeout=timeout,
                     during=during)


needs_sandbox = pytest.mark.skipif(os.geteuid() != 0, reason="the suite sandbox needs root (namespaces)")


def first_suite(case: Case) -> dict:
    return json.loads((case.folder / "verify.json").read_text())["gate"]["suites"][0]
