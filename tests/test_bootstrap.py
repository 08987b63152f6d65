"""bootstrap, the README's first command's first step, on machines where it cannot install what
is missing: one line saying what to run, a non-zero exit, nothing made. (Where it can, it
installs python3-venv with apt-get: benchmarks/fresh_debian.py runs the README's first command
in fresh Debian 12, Debian 13 and Ubuntu 24.04 roots; benchmarks/results/fresh_debian/.)

Real: the script runs under sh, as an unprivileged user without sudo, with a real python3 whose
ensurepip is taken away as Debian's python3 lacks it until python3-venv is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOBODY = 65534


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A folder another user may read (pytest's own are the owner's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="trainstack-bootstrap-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def planted(tmp_path: Path, python: str = sys.executable) -> tuple[Path, Path]:
    """A copy of bootstrap in its own folder, and a folder whose ensurepip fails to import."""
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(REPO / "bootstrap", project / "bootstrap")
    stub = tmp_path / "no-ensurepip" / "ensurepip"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError('ensurepip is not available')\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(python)
    for folder in (tmp_path, project, stub.parent, stub, bin_dir):
        folder.chmod(0o755)
    return project, bin_dir


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to run as another user")
@pytest.mark.skipif(not Path("/usr/bin/python3").exists() or shutil.which("apt-get") is None, reason="not a Debian-like machine")
def test_without_root_or_sudo_it_says_in_one_line_what_to_run(open_tmp: Path) -> None:
    project, bin_dir = planted(open_tmp, "/usr/bin/python3")  # the system's: another user may run it
    for tool in ("dirname", "id", "apt-get"):  # sudo left out: a user who may not use it
        (bin_dir / tool).symlink_to(shutil.which(tool))
    env = {"PATH": str(bin_dir), "PYTHONPATH": str(open_tmp / "no-ensurepip"), "HOME": str(open_tmp)}
    done = run([shutil.which("setpriv"), f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", shutil.which("sh"),
                str(project / "bootstrap")], env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: python3's venv module is missing; run as root: apt-get update && apt-get install -y python3 python3-venv"]
    assert not (project / ".venv").exists()


def test_without_apt_get_it_says_what_to_install(tmp_path: Path) -> None:
    project, bin_dir = planted(tmp_path)
    env = {"PATH": str(bin_dir), "PYTHONPATH": str(tmp_path / "no-ensurepip"), "HOME": str(tmp_path)}
    sh = shutil.which("sh")
    assert sh is not None
    for tool in ("dirname", "id"):  # what the script runs before it finds apt-get missing
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    done = run([sh, str(project / "bootstrap")], env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: python3 with its venv module is missing; install Python 3.10 or later with venv and ensurepip, "
        "then run: sh bootstrap"]
    assert not (project / ".venv").exists()
