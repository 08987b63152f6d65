"""Hand-edited lock folders as a hostile contributor commits them: tests/data/corpus/lockdirs.

Each recipe there edits one real lock of cpu-minimal (made once by uv) the way an attacker would,
giving the manifest the edited file's new hash: an index option the stack does not declare, a
control character that hides a second line inside one, a manifest value with a newline or a key
given twice. keys and render (and build, once) refuse each with exit 2 and one error line naming
the file and its line, write nothing, and run nothing: the planted wheel's .pth and a planted
setup.py leave a marker file if any Python process ever imports them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import zipfile
from pathlib import Path

import pytest
import tomllib

from tests.build_fixtures import copy_example, make_lock
from tests.clirun import assert_no_traceback
from trainstack.cli import main

CORPUS = Path(__file__).resolve().parent / "data" / "corpus" / "lockdirs"
RECIPES = sorted(CORPUS.glob("*.toml"))
SLUG = "cpu-debian12-py311-release"
TOKEN = "SECRET-CORPUS-TOKEN"
FILES = {"full": f"locks/{SLUG}.txt", "toolchain": f"locks/{SLUG}.toolchain.txt"}
pytestmark = pytest.mark.timeout(300)


def test_every_recipe_says_what_it_attacks() -> None:
    assert len(RECIPES) >= 25
    for path in RECIPES:
        text = path.read_text(encoding="utf-8")
        assert text.startswith("# attacks: ") and len(text) < 2000, path.name
        recipe = tomllib.loads(text)
        assert set(recipe) <= {"file", "prepend", "append", "sub", "manifest_sub", "expect", "where"}, path.name
        assert recipe.get("expect"), path.name


def planted_wheel(folder: Path, marker: Path) -> tuple[Path, str]:
    """A wheel whose .pth writes ``marker`` at the start of any Python that installs it; its sha256."""
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / "planted-1.0-py3-none-any.whl"
    files = {
        "planted.pth": f"import pathlib; pathlib.Path({str(marker)!r}).write_text('ran')\n",
        "planted-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: planted\nVersion: 1.0\n",
        "planted-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: corpus\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    files["planted-1.0.dist-info/RECORD"] = "\n".join([*record, "planted-1.0.dist-info/RECORD,,"]) + "\n"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return wheel, hashlib.sha256(wheel.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("locked")
    make_lock(copy_example("cpu-minimal", root))
    return root


def apply(recipe: dict, folder: Path, wheels: Path, wheel_hash: str) -> None:
    """Edit the lock folder as ``recipe`` says, then give the manifest the edited file's hash."""
    values = {"wheels": wheels.as_uri(), "hash": wheel_hash, "token": TOKEN}

    def fill(text: str) -> str:
        for key, value in values.items():
            text = text.replace(f"{{{key}}}", value)
        return text

    manifest_path = folder / "stack.lock.json"
    manifest = json.loads(manifest_path.read_text())
    entry = manifest["flavours"][SLUG]
    lock = folder / FILES[recipe.get("file", "full")]
    text = lock.read_bytes().decode()
    text = fill(recipe.get("prepend", "")) + text + fill(recipe.get("append", ""))
    if "sub" in recipe:
        pattern, new = recipe["sub"]
        text, count = re.subn(pattern, lambda _: fill(new), text, count=1, flags=re.MULTILINE)
        assert count == 1, recipe["sub"]
    lock.write_bytes(text.encode())
    if lock.name == f"{SLUG}.txt":
        entry["lock_sha256"] = hashlib.sha256(text.encode()).hexdigest()
    raw = json.dumps(manifest, indent=2)
    if "manifest_sub" in recipe:
        pattern, new = recipe["manifest_sub"]
        raw, count = re.subn(pattern, lambda m: m.expand(fill(new)), raw, count=1)
        assert count == 1, recipe["manifest_sub"]
    manifest_path.write_text(raw)


def _one_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, err
    assert_no_traceback(err)
    assert TOKEN not in err, err
    return errors[0]


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_keys_and_render_refuse_a_hand_edited_lock(
    path: Path, locked: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = tomllib.loads(path.read_text(encoding="utf-8"))
    marker = tmp_path / "marker"
    wheels = tmp_path / "wheels"
    _, wheel_hash = planted_wheel(wheels, marker)
    shutil.copytree(locked, tmp_path / "stack")
    stack, folder = tmp_path / "stack" / "cpu-minimal.toml", tmp_path / "stack" / "cpu-minimal.lock"
    apply(recipe, folder, wheels, wheel_hash)
    where = folder / ("stack.lock.json" if recipe.get("where") == "manifest" else FILES[recipe.get("file", "full")])
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    for verb in (["keys"], ["render", "--out", str(tmp_path / "out")]):
        assert main([*verb, str(stack)]) == 2, verb
        line = _one_error(capsys.readouterr().err)
        assert re.search(rf"{re.escape(str(where))}(:\d+)?: ", line), (verb, line)
        assert recipe["expect"] in line, (verb, line)
    assert not (tmp_path / "out").exists() and not marker.exists()
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_build_refuses_a_planted_find_links_before_anything_runs(
    locked: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The case of the report: a --find-links to a planted wheel with its hash; build stops at
    the lock line, so no venv is made and the wheel's .pth never runs."""
    recipe = tomllib.loads((CORPUS / "find-links-planted-wheel.toml").read_text(encoding="utf-8"))
    marker = tmp_path / "marker"
    wheels = tmp_path / "wheels"
    _, wheel_hash = planted_wheel(wheels, marker)
    shutil.copytree(locked, tmp_path / "stack")
    stack = tmp_path / "stack" / "cpu-minimal.toml"
    apply(recipe, tmp_path / "stack" / "cpu-minimal.lock", wheels, wheel_hash)
    build = tmp_path / "build"
    assert main(["build", str(stack), "--backend", "venv", "--build-dir", str(build)]) == 2
    line = _one_error(capsys.readouterr().err)
    assert f"locks/{SLUG}.txt:4: lock line: '--find-links {wheels.as_uri()}'" in line, line
    assert "index.find_links" in line
    assert not (build / SLUG / "venv").exists() and not marker.exists()


def test_the_planted_wheel_would_run(tmp_path: Path) -> None:
    """The marker does mean code ran: installing the planted wheel and starting Python writes it."""
    import subprocess
    import sys

    marker = tmp_path / "marker"
    wheel, _ = planted_wheel(tmp_path / "wheels", marker)
    target = tmp_path / "site"
    subprocess.run(["uv", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(wheel)], check=True)
    subprocess.run([sys.executable, "-c", f"import site; site.addsitedir({str(target)!r})"], check=True)
    assert marker.read_text() == "ran"


def test_a_declared_find_links_and_extra_index_are_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Options the stack declares pass: the tie refuses only what the stack does not name."""
    from trainstack.lock.manifest import DeclaredIndexes, check_lock_text

    declared = DeclaredIndexes.of(None, ["https://extra.example/simple"], ["https://wheels.example/"], None)
    text = (
        "--index-url https://pypi.org/simple/\n--extra-index-url https://extra.example/simple\n"
        "--find-links https://wheels.example\n\nnumpy==2.2.6 \\\n    --hash=sha256:" + "a" * 64 + "\n"
    )
    check_lock_text(text, tmp_path / "x.txt", (), declared)
    with pytest.raises(Exception, match=r"x.txt:2: lock line: .*index.extra"):
        check_lock_text(text.replace("extra.example", "other.example"), tmp_path / "x.txt", (), declared)


@pytest.fixture(scope="module")
def two_flavours(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("two")
    make_lock(copy_example("cpu-minimal", root, {r'python = \["3.11"\]': 'python = ["3.11", "3.12"]'}))
    return root


def test_lock_of_one_flavour_never_carries_a_planted_link(
    two_flavours: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """'lock --flavour A' carries flavour B's files over: a link planted at one of them would have
    copied the file it names (a private key) into the lock folder as a regular file."""
    shutil.copytree(two_flavours, tmp_path / "stack")
    stack, folder = tmp_path / "stack" / "cpu-minimal.toml", tmp_path / "stack" / "cpu-minimal.lock"
    secret = tmp_path / "id_rsa"
    secret.write_text(f"{TOKEN}\n")
    planted = folder / "locks" / "cpu-debian12-py312-release.toolchain.txt"
    planted.unlink()
    planted.symlink_to(secret)
    assert main(["lock", str(stack), "--flavour", SLUG]) == 2
    err = capsys.readouterr().err
    line = _one_error(err)
    assert str(planted) in line and "leads out of the lock folder" in line, line
    assert "uv pip compile" not in err  # refused before any resolution
    assert planted.is_symlink() and not any(TOKEN in p.read_text() for p in folder.rglob("*.txt") if not p.is_symlink())


def test_a_planted_link_at_a_relocked_file_is_not_handed_to_uv(
    two_flavours: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The flavour being locked again starts from its previous file only when that reads as a
    lock file of the folder; a link out is resolved afresh and replaced by a regular file."""
    shutil.copytree(two_flavours, tmp_path / "stack")
    stack, folder = tmp_path / "stack" / "cpu-minimal.toml", tmp_path / "stack" / "cpu-minimal.lock"
    secret = tmp_path / "id_rsa"
    secret.write_text(f"{TOKEN}\n")
    planted = folder / FILES["full"]
    planted.unlink()
    planted.symlink_to(secret)
    assert main(["lock", str(stack), "--flavour", SLUG]) == 0
    captured = capsys.readouterr()
    assert TOKEN not in captured.out + captured.err
    assert not planted.is_symlink() and "numpy==" in planted.read_text()
    assert not any(TOKEN in p.read_text() for p in folder.rglob("*") if p.is_file())
    assert main(["render", str(stack), "--out", str(tmp_path / "out")]) == 0
