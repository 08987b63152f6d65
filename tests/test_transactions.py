"""replace_tree, the one-step replacement of a directory of outputs: exact content, nothing
rewritten when unchanged, leftovers of killed writers cleaned, and the fallback for
filesystems without an exchanging rename killed at each of its writes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kill_harness import KILLER, REPO
from trainstack.fsutil import dump_json, loads_strict, read_tree, recover_tree, replace_tree

OLD = {"stack.lock.json": b'{"old": 1}\n', "locks/a.txt": b"a==1\n", "locks/gone.txt": b"x\n"}
NEW = {"stack.lock.json": b'{"new": 2}\n', "locks/a.txt": b"a==2\n", "locks/b.txt": b"b==1\n"}


def test_the_tree_holds_exactly_the_files_given(tmp_path: Path) -> None:
    final = tmp_path / "out"
    assert replace_tree(final, OLD) is True
    assert read_tree(final) == OLD
    assert replace_tree(final, NEW) is True
    assert read_tree(final) == NEW  # locks/gone.txt is gone with the old tree
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging or old tree left


def test_unchanged_content_writes_nothing(tmp_path: Path) -> None:
    final = tmp_path / "out"
    replace_tree(final, OLD)
    before = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in final.rglob("*")}
    assert replace_tree(final, dict(OLD)) is False
    assert {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in final.rglob("*")} == before


def test_modes_follow_the_umask_or_the_given_mode(tmp_path: Path) -> None:
    mask = os.umask(0o022)
    try:
        replace_tree(tmp_path / "a", OLD)
        replace_tree(tmp_path / "b", OLD, mode=0o640)
    finally:
        os.umask(mask)
    assert (tmp_path / "a" / "locks" / "a.txt").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "b" / "locks" / "a.txt").stat().st_mode & 0o777 == 0o640


def test_paths_outside_the_tree_are_refused(tmp_path: Path) -> None:
    for bad in ("../escape.txt", "/etc/passwd", ""):
        with pytest.raises(ValueError, match="not a path inside"):
            replace_tree(tmp_path / "out", {bad: b"x"})
    assert not (tmp_path / "escape.txt").exists()


def test_leftovers_of_killed_writers_are_cleaned_and_a_moved_aside_tree_put_back(tmp_path: Path) -> None:
    final = tmp_path / "out"
    replace_tree(final, OLD)
    (tmp_path / ".out.staging-dead").mkdir()
    (tmp_path / ".out.staging-dead" / "half").write_bytes(b"x")
    os.replace(final, tmp_path / ".out.old")  # killed between the two renames of the fallback swap
    recover_tree(final)
    assert read_tree(final) == OLD
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_json_outputs_refuse_nan_and_inputs_refuse_it_too() -> None:
    with pytest.raises(ValueError):
        dump_json({"tokens_per_s": float("nan")})
    for text in ("NaN", '{"a": Infinity}', "[-Infinity]"):
        with pytest.raises(ValueError, match="not a number JSON allows"):
            loads_strict(text)


CHILD = r"""
import json, sys
from pathlib import Path
from trainstack import fsutil
fsutil.exchange_dirs = lambda a, b: False  # as on a filesystem without RENAME_EXCHANGE
files = {k: v.encode() for k, v in json.loads(Path(sys.argv[5]).read_text()).items()}
fsutil.replace_tree(Path(sys.argv[4]), files)
"""


def _fallback_run(root: Path, final: Path, files: dict[str, bytes], kill_at: int) -> tuple[int, int | None]:
    spec = root.parent / "files.json"
    spec.write_text(json.dumps({k: v.decode() for k, v in files.items()}))
    count = root.parent / "count"
    count.unlink(missing_ok=True)
    # the kill tests' own hook, with replace_tree in place of the CLI
    script = KILLER.replace("from trainstack.cli import main\n", "").replace(
        "code = main(sys.argv[4:])", "exec(os.environ['CHILD']); code = 0"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "CHILD": CHILD}
    done = subprocess.run([sys.executable, "-c", script, str(root), str(kill_at), str(count), str(final), str(spec)],
                          env=env, capture_output=True, text=True, timeout=60)
    total = int(count.read_text().split()[0]) if count.exists() else None
    assert done.returncode in (0, -signal.SIGKILL), done.stderr
    return done.returncode, total


def test_fallback_swap_killed_at_every_write_recovers_whole(tmp_path: Path) -> None:
    """Without an exchanging rename the old tree is moved aside before the new one moves in: a
    kill between leaves no tree at the name, and the next writer (recover_tree) puts the old
    one back. After recovery every kill leaves the old tree or the new one."""
    root = tmp_path / "proj"
    root.mkdir()
    final = root / "out"
    replace_tree(final, OLD)
    code, total = _fallback_run(root, final, NEW, 0)
    assert code == 0 and total and read_tree(final) == NEW
    seen = set()
    for kill_at in range(1, total + 1):
        replace_tree(final, OLD)
        code, _ = _fallback_run(root, final, NEW, kill_at)
        assert code == -signal.SIGKILL
        if not final.exists():
            seen.add("moved aside")
        recover_tree(final)
        state = read_tree(final)
        assert state in (OLD, NEW), f"write {kill_at} of {total}: {state}"
        seen.add("old" if state == OLD else "new")
        assert [p.name for p in root.iterdir()] == ["out"]
    assert seen == {"old", "new", "moved aside"}


def test_render_output_may_hold_a_flavours_nested_source_locks(tmp_path: Path) -> None:
    from trainstack.errors import UsageError
    from trainstack.render.api import _rendered

    out = tmp_path / "render"
    replace_tree(out, {"docker-bake.hcl": b"x", "cu130-ubuntu2404-py312-release/sources/apex.txt": b"git+x\n"})
    assert _rendered(out) == read_tree(out)
    (out / "notes.txt").write_text("mine\n")
    with pytest.raises(UsageError, match="notes.txt is not a file render writes"):
        _rendered(out)
