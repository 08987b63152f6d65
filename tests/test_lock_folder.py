"""A committed lock folder arrives in pull requests like its stack: render and build check every
line of it before use. One real lock of cpu-minimal, then one hostile edit at a time (with the
manifest's hash updated, as an attacker would): render refuses each with exit 2 and one located
line, and writes nothing."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.build_fixtures import copy_example, make_lock
from tests.clirun import assert_no_traceback
from trainstack.cli import main

SLUG = "cpu-debian12-py311-release"


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("locked")
    stack = copy_example("cpu-minimal", root)
    make_lock(stack)
    return root


def _copy(locked: Path, dest: Path) -> tuple[Path, Path]:
    shutil.copytree(locked, dest)
    return dest / "cpu-minimal.toml", dest / "cpu-minimal.lock"


def _edit_lock(folder: Path, edit: Callable[[str], str]) -> None:
    """Edit the flavour's lock file and give the manifest its new hash."""
    manifest_path = folder / "stack.lock.json"
    manifest = json.loads(manifest_path.read_text())
    entry = manifest["flavours"][SLUG]
    lock = folder / entry["lock_file"]
    lock.write_text(edit(lock.read_text()))
    entry["lock_sha256"] = hashlib.sha256(lock.read_bytes()).hexdigest()
    manifest_path.write_text(json.dumps(manifest, indent=2))


def _edit_manifest(folder: Path, edit: Callable[[dict], None]) -> None:
    path = folder / "stack.lock.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest, indent=2))


def _first_pin(text: str) -> str:
    return next(line for line in text.splitlines() if "==" in line and not line.startswith((" ", "#", "-")))


HOSTILE_LINES: dict[str, Callable[[str], str]] = {
    "an editable path": lambda t: t + "-e ../../outside\n",
    "a direct file reference": lambda t: t + "evil @ file:///tmp/evil\n",
    "a git reference for a package from the index": lambda t: t.replace(_first_pin(t), "numpy @ git+https://example.com/numpy@" + "a" * 40, 1),
    "an index with credentials": lambda t: "--index-url https://user:TOKEN@pypi.example.com/simple\n" + t,
    "an option uv never writes": lambda t: "--trusted-host example.com\n" + t,
    "a range instead of a pin": lambda t: t.replace(_first_pin(t), _first_pin(t).split("==")[0] + ">=0", 1),
    "a hash line that is not a hash": lambda t: t.replace("    --hash=sha256:", "    --config-settings=x --hash=sha256:", 1),
}


def _pins(text: str) -> dict[str, set[str]]:
    """name==version -> its sha256 hashes, for each pin of a requirements text as uv writes it."""
    found: dict[str, set[str]] = {}
    current = None
    for line in text.splitlines():
        if pin := re.match(r"([A-Za-z0-9_.\-\[\]]+)==(\S+)", line):
            current = f"{pin.group(1).lower()}=={pin.group(2)}"
            found[current] = set()
        elif current and (digest := re.search(r"--hash=(sha256:[0-9a-f]{64})", line)):
            found[current].add(digest.group(1))
        elif not line.startswith(" "):
            current = None
    return found


def test_the_real_lock_renders(locked: Path, tmp_path: Path) -> None:
    """What render writes is the lock folder's content: each pin of the flavour's lock, with
    every one of its hashes, in exactly one of torch.txt and extras.txt, the toolchain's pins in
    toolchain.txt, and a Dockerfile installing both with --require-hashes."""
    stack, folder = _copy(locked, tmp_path / "clean")
    assert main(["render", str(stack), "--out", str(tmp_path / "out")]) == 0
    rendered = tmp_path / "out" / SLUG
    entry = json.loads((folder / "stack.lock.json").read_text())["flavours"][SLUG]
    lock = _pins((folder / entry["lock_file"]).read_text())
    torch_pins, extras = _pins((rendered / "torch.txt").read_text()), _pins((rendered / "extras.txt").read_text())
    assert len(lock) >= 2 and all(lock.values()), lock  # numpy and pytest's packages, each with hashes
    assert torch_pins.keys().isdisjoint(extras.keys())
    assert torch_pins | extras == lock
    assert {f"{name}=={version}" for name, version in entry["packages"].items()} == set(lock)
    toolchain = _pins((folder / entry["layers"]["toolchain"]).read_text())
    assert toolchain and _pins((rendered / "toolchain.txt").read_text()) == toolchain
    dockerfile = (rendered / "Dockerfile").read_text()
    for name in ("torch.txt", "extras.txt"):
        assert f"COPY {name} /opt/trainstack/locks/{name}" in dockerfile
        assert f"--require-hashes --no-cache --python /opt/venv/bin/python -r /opt/trainstack/locks/{name}" in dockerfile


@pytest.mark.parametrize("what", list(HOSTILE_LINES))
def test_a_hostile_lock_line_is_refused_with_its_line(what: str, locked: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack, folder = _copy(locked, tmp_path / "stack")
    _edit_lock(folder, HOSTILE_LINES[what])
    out = tmp_path / "out"
    assert main(["render", str(stack), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert any(f"locks/{SLUG}.txt:" in line and ": lock line: " in line for line in lines), err
    assert_no_traceback(err)
    assert "TOKEN" not in err
    assert not out.exists()


def test_a_manifest_naming_a_file_outside_the_folder_is_refused_at_its_line(locked: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack, folder = _copy(locked, tmp_path / "stack")
    _edit_manifest(folder, lambda m: m["flavours"][SLUG].update(lock_file="locks/../../../etc/passwd.txt"))
    assert main(["render", str(stack), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "stack.lock.json:" in err and f"flavours.{SLUG}.lock_file" in err and "a lock file of the folder" in err
    text = (folder / "stack.lock.json").read_text().splitlines()
    line = int(err.split("stack.lock.json:", 1)[1].split(":", 1)[0])
    assert '"lock_file"' in text[line - 1]  # the line named is the field's


def test_a_lock_file_that_is_a_link_out_of_the_folder_is_refused(locked: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack, folder = _copy(locked, tmp_path / "stack")
    outside = tmp_path / "elsewhere.txt"
    lock = folder / "locks" / f"{SLUG}.txt"
    outside.write_text(lock.read_text())
    lock.unlink()
    lock.symlink_to(outside)
    assert main(["render", str(stack), "--out", str(tmp_path / "out")]) == 2
    assert "leads out of the lock folder" in capsys.readouterr().err


def test_build_refuses_a_hostile_lock_before_it_runs_anything(locked: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack, folder = _copy(locked, tmp_path / "stack")
    _edit_lock(folder, HOSTILE_LINES["an editable path"])
    build = tmp_path / "build"
    assert main(["build", str(stack), "--build-dir", str(build)]) == 2
    assert ": lock line: '-e ../../outside'" in capsys.readouterr().err
    assert not (build / SLUG / "venv").exists()
