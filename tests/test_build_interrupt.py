"""Ctrl-C during a build: every child ends with trainstack, the staging folder is removed, the
step's line and the error say "interrupted" (not "failed"), and no failure log is filed.

Real: a venv build whose `uv pip sync` is downloading from a loopback index that holds the wheel
back; SIGINT to trainstack alone (as `kill -INT`: uv gets no signal of its own, the case that
left it running as an orphan) and to its whole process group (as a terminal's Ctrl-C)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.stalling_index import STACK, Stall, stalling_index  # noqa: F401 (stalling_index: a fixture)

REPO = Path(__file__).resolve().parent.parent
SLUG = "cpu-debian12-py311-release"


def session_processes(sid: int) -> list[str]:
    """The processes still in session ``sid`` (pid and command), read from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append(f"{entry.name} {command[:120]}")
        except (OSError, IndexError, ValueError):
            continue
    return found


def cli(project: Path, *args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "trainstack", *args], cwd=project, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


@pytest.mark.python("3.11")  # builds a py311 flavour
@pytest.mark.parametrize("whom", ["trainstack", "group"])
def test_ctrl_c_ends_every_child_and_removes_the_staging_folder(
    stalling_index: tuple[str, Stall], tmp_path: Path, whom: str
) -> None:
    url, stall = stalling_index
    project = tmp_path / "project"
    project.mkdir()
    (project / "stall.toml").write_text(STACK.format(index=url), encoding="utf-8")
    env = {**os.environ, "UV_CACHE_DIR": str(tmp_path / "lock-cache"), "COLUMNS": "300"}
    lock = cli(project, "lock", "stall.toml", env=env)
    assert lock.wait(120) == 0, lock.communicate()[1]
    stall.on.set()
    stall.asked.clear()
    try:
        build_env = {**env, "UV_CACHE_DIR": str(tmp_path / "build-cache")}  # nothing cached: uv must download
        build = cli(project, "build", "stall.toml", "--build-dir", "build", env=build_env)
        assert stall.asked.wait(90), "the build never asked for the wheel"
        time.sleep(0.5)  # uv is now waiting on the download
        staging = project / "build" / f".{SLUG}.staging"
        assert staging.is_dir()
        if whom == "group":
            os.killpg(build.pid, signal.SIGINT)
        else:
            os.kill(build.pid, signal.SIGINT)
        _, stderr = build.communicate(timeout=30)
    finally:
        stall.on.clear()
        stall.release.set()
    left = session_processes(build.pid)
    for line in left:  # never leave them running, whatever the assertions say
        os.kill(int(line.split()[0]), signal.SIGKILL)
    assert build.returncode == 130, stderr
    assert left == [], f"still running after trainstack ended: {left}"
    time.sleep(1.0)  # an orphan would have written into it by now
    assert not staging.exists(), "the staging folder was left behind"
    assert stderr.strip().splitlines()[-1] == "error: interrupted", stderr
    assert "✗ install" in stderr and "interrupted" in stderr.split("✗ install", 1)[1].splitlines()[0]
    assert not [line for line in stderr.splitlines() if line.startswith("✗") and line.endswith(" failed")], stderr
    assert not list((project / "build").rglob("failed-*")), "an interrupted build filed a failure log"
    stall.release.clear()
