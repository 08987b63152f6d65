"""Kills timed at every write of lock, render, release and build leave the old state or the new one.

The write points are found, not guessed: the real CLI runs in a child process under a Python
audit hook that counts every event that changes the file system under the project directory
(opening for writing, rename, replace, remove, rmdir, mkdir, chmod, rmtree, and the renameat2
exchange that trainstack.fsutil announces with an audit event of its own) and SIGKILLs the
process at the N-th. A first run without a kill counts them; then one run is killed at each of
them in turn, and after each the outputs must be exactly the old ones or exactly the new ones.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.kill_harness import PY311, PY312, cli_ok, index, leftovers, old_lock, pins, restore, run_cli, tree  # noqa: F401 (index, old_lock: fixtures)
from trainstack.lock import check_lock_current

pytestmark = pytest.mark.slow


def every_write(total: int, swaps: list[int]) -> list[int]:
    return list(range(1, total + 1))


def kill_everywhere(
    project: Path, args: list[str], check: Callable[[], None], points: Callable[[int, list[int]], list[int]] = every_write
) -> int:
    """Count the writes of `trainstack ARGS`, then kill one run at each of ``points(total, swaps)``
    (default: every one); ``check()`` after the complete run and after every kill. Returns the
    number of write events."""
    pristine = project.parent / "pristine"
    shutil.copytree(project, pristine, symlinks=True)
    code, counts, err = run_cli(project, args)
    assert code == 0 and counts, err
    total, *swaps = counts
    assert swaps, "the outputs were not swapped in"
    check()
    chosen = points(total, swaps)
    for kill_at in chosen:
        restore(pristine, project)
        code, _, err = run_cli(project, args, kill_at=kill_at)
        assert code == -signal.SIGKILL, f"write {kill_at} of {total}: not killed ({code}): {err}"
        check()
    print(f"trainstack {' '.join(args)}: {total} write events, swap at {swaps}, killed at {len(chosen)}: all whole")
    # after the last kill the next run finishes the job and clears what the killed one left
    code, _, err = run_cli(project, args)
    assert code == 0, err
    assert leftovers(project) == []
    return total


class States:
    """The old state and the first complete new one; every later state must be one of the two."""

    def __init__(self, old: dict[str, bytes]) -> None:
        self.old = old
        self.new: dict[str, bytes] | None = None
        self.seen = {"old": 0, "new": 0}

    def assert_whole(self, now: dict[str, bytes]) -> None:
        if self.new is None:
            assert now != self.old, "the complete run changed nothing"
            self.new = now
        assert now in (self.old, self.new), f"mixed state: {sorted(now)}"
        self.seen["old" if now == self.old else "new"] += 1


@pytest.mark.timeout(300)
@pytest.mark.parametrize("only", [None, PY312])
def test_kill_at_every_write_of_lock(old_lock: Path, tmp_path: Path, only: str | None) -> None:
    project = tmp_path / "proj"
    shutil.copytree(old_lock, project)
    lock = project / "small.lock"
    states = States(tree(lock))
    args = ["lock", "small.toml", "--upgrade-package", "tinypkg"] + (["--flavour", only] if only else [])

    def check() -> None:
        states.assert_whole(tree(lock))
        check_lock_current(project / "small.toml")  # what `trainstack keys` checks: raises when rejected

    total = kill_everywhere(project, args, check)
    assert states.seen["old"] >= 1 and states.seen["new"] >= 2 and sum(states.seen.values()) == total + 1
    new = json.loads(states.new["stack.lock.json"])["flavours"]
    old = json.loads(states.old["stack.lock.json"])["flavours"]
    for slug in [PY312] if only else [PY311, PY312]:
        assert new[slug]["packages"] == {"tinypkg": "2.0", "tinyother": "1.0"}
    if only:  # the other flavour's entry and files are carried over as they were
        assert new[PY311] == old[PY311]
        for name in (f"locks/{PY311}.txt", f"locks/{PY311}.toolchain.txt"):
            assert states.new[name] == states.old[name]


@pytest.fixture
def project_copy(old_lock: Path, tmp_path: Path) -> Path:
    """A copy of the project locked to the old pins."""
    project = tmp_path / "proj"
    shutil.copytree(old_lock, project)
    return project


def _relock(project: Path) -> None:
    cli_ok(project, "lock", "small.toml", "--upgrade-package", "tinypkg")


@pytest.mark.timeout(300)
def test_kill_at_every_write_of_render(project_copy: Path) -> None:
    project = project_copy
    cli_ok(project, "render", "small.toml", "--out", "out")
    states = States(tree(project / "out"))
    _relock(project)
    total = kill_everywhere(project, ["render", "small.toml", "--out", "out"], lambda: states.assert_whole(tree(project / "out")))
    assert states.seen["old"] >= 1 and states.seen["new"] >= 2 and sum(states.seen.values()) == total + 1


@pytest.mark.timeout(300)
def test_kill_at_every_write_of_release(project_copy: Path) -> None:
    project = project_copy
    args = ["release", "small.toml", "--previous", "previous.json", "--results", "results", "--out", "out"]
    (project / "results").mkdir()
    cli_ok(project, *args)
    states = States(tree(project / "out"))
    _relock(project)  # the notes now name tinypkg's new version

    def check() -> None:
        now = tree(project / "out")
        assert sorted(now) == ["RELEASE.md", "release.html", "release.json", "stack.lock.json"]
        states.assert_whole(now)

    total = kill_everywhere(project, args, check)
    assert states.seen["old"] >= 1 and states.seen["new"] >= 2 and sum(states.seen.values()) == total + 1
    assert all(states.new[name] != states.old[name] for name in states.old)


@pytest.mark.python("3.11")  # builds a py311 flavour
@pytest.mark.timeout(300)
def test_kill_at_every_write_of_build(project_copy: Path) -> None:
    project = project_copy
    args = ["build", "small.toml", "--flavour", PY311, "--build-dir", "build"]
    cli_ok(project, *args)
    final = project / "build" / PY311
    _relock(project)
    seen: set[str] = set()

    def check() -> None:
        record = json.loads((final / "build.json").read_text())
        python = final / "venv" / "bin" / "python"
        version = subprocess.run([python, "-c", "import tinypkg; print(tinypkg.__version__)"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        assert f"tinypkg=={version}" in (final / "locks" / "install.txt").read_text()
        seen.add(f"{record['lock_sha256']} {version}")  # the venv is the one its record describes

    kill_everywhere(project, args, check, points=up_to_the_swap_then_sampled)
    assert len(seen) == 2  # the old build and the new one, each whole


def up_to_the_swap_then_sampled(total: int, swaps: list[int]) -> list[int]:
    """Every write up to the one after the swap; then, in the removal of the replaced venv (one
    event per file of a tree no name leads to any more), every 8th and the last: each kill costs
    a whole build, and those removals are all alike."""
    edge = swaps[0] + 1
    return sorted({*range(1, edge + 1), *range(edge, total + 1, 8), total})


@pytest.mark.timeout(300)
def test_concurrent_locks_take_turns(project_copy: Path) -> None:
    """Two locks at once that each move another package: the second starts from the first's
    result, so both moves survive whichever runs first."""
    project = project_copy
    results: list[tuple[int, int | None, str]] = []
    runs = [
        threading.Thread(target=lambda name=name: results.append(run_cli(project, ["lock", "small.toml", "-P", name], count_file=name)))
        for name in ("tinypkg", "tinyother")
    ]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    assert [r[0] for r in results] == [0, 0], [r[2] for r in results]
    assert any("waiting for another lock" in r[2] for r in results)  # they did overlap
    assert pins(project) == {"tinypkg": "2.0", "tinyother": "2.0"}
    check_lock_current(project / "small.toml")
