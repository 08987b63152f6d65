"""The hostile corpus of the surfaces beyond the stack file: crafted ELF files (tests/corpus/elf),
JUnit XML (tests/corpus/junit), test suites (tests/corpus/suites) and the run hook's variables
(tests/corpus/hook_env). Each case goes through the real verb or the real hook under a hard
timeout: no traceback, no hang, no process left running, no write outside its folder.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainstack.verify.linkcheck.check import check_paths
from trainstack.verify.linkcheck.elf import read_elf

CORPUS = Path(__file__).resolve().parent / "corpus"
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
    assert "Traceback" not in result.stderr + result.stdout
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
