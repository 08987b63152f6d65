"""Real stacks, locks (trainstack.lock.lock_stack) and local git repositories for the render and build tests."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.stacks import CPU_FLAVOUR
from trainstack.lock import Manifest, lock_stack

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "stacks"


def copy_example(name: str, dest: Path, replace: dict[str, str] | None = None) -> Path:
    """Copy an example stack, replacing each regular expression of ``replace`` (exactly one match each)."""
    text = (EXAMPLES / f"{name}.toml").read_text(encoding="utf-8")
    for pattern, new in (replace or {}).items():
        text, count = re.subn(pattern, lambda _: new, text)
        assert count == 1, pattern
    path = dest / f"{name}.toml"
    path.write_text(text, encoding="utf-8")
    return path


def make_lock(stack_path: Path, flavour: str | None = None) -> Manifest:
    return lock_stack(stack_path, flavour=flavour)


SETUP_PY = '''\
import os
from setuptools import setup

import time

# Records what the build saw, so tests can check build_env and MAX_JOBS reached the compile step.
time.sleep(float(os.environ.get("TS_BUILD_SLEEP", "0")))  # lets a test interrupt a build midway
with open("{name}_buildinfo.py", "w") as fh:
    fh.write("MAX_JOBS = %r\\nBUILD_FLAG = %r\\n" % (os.environ.get("MAX_JOBS"), os.environ.get("TS_BUILD_FLAG")))
setup(name="{name}", version="0.1.0", py_modules=["{name}", "{name}_buildinfo"])
'''


GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "PATH": "/usr/bin:/bin"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True, env=GIT_ENV).stdout.strip()


def git_package(root: Path, name: str) -> tuple[str, str]:
    """A real git repository holding a setuptools package; returns (file:// URL, commit sha)."""
    repo = root / f"{name}-repo"
    repo.mkdir(parents=True)
    (repo / "setup.py").write_text(SETUP_PY.format(name=name), encoding="utf-8")
    (repo / f"{name}.py").write_text("VALUE = 42\n", encoding="utf-8")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "v0.1.0")
    return f"file://{repo}", git(repo, "rev-parse", "HEAD")


def drop_commit(url: str, sha: str) -> None:
    """Rewrite the repository so that ``sha`` no longer exists in it (a force-push upstream)."""
    repo = Path(url.removeprefix("file://"))
    git(repo, "commit", "-q", "--amend", "-m", "rewritten")
    git(repo, "reflog", "expire", "--expire=now", "--all")
    git(repo, "gc", "-q", "--prune=now")
    assert subprocess.run(["git", "cat-file", "-e", sha], cwd=repo, env=GIT_ENV).returncode != 0


CPU_WITH_SOURCE = """
[stack]
name = "cpu-src"
release = "2026.12.0"
image = "trainstack/cpu-src"

[components]
numpy = ">=2.2,<2.5"
pytest = ">=8"
tsdemo = {{ git = "{url}", commit = "{sha}", build_env = {{ TS_BUILD_FLAG = "on" }}, jobs = {{ divisor = 1, cap = 3 }} }}

""" + CPU_FLAVOUR + """\
min_free_disk_gb = {min_free}
compiler_cache = {{ kind = "ccache", dir = "ccache-dir", max_size = "1G" }}

[toolchain]
packages = ["ninja", "setuptools", "wheel"]
nvcc = false
"""


def source_stack(root: Path, min_free: float = 1) -> tuple[Path, str, str]:
    """A small stack with one git source component (a local repository); returns (stack, url, sha)."""
    url, sha = git_package(root, "tsdemo")
    path = root / "cpu-src.toml"
    path.write_text(CPU_WITH_SOURCE.format(url=url, sha=sha, min_free=min_free), encoding="utf-8")
    return path, url, sha


def hadolint_errors(dockerfile: Path) -> list[str]:
    """hadolint's findings at its default threshold (every level); DL3008 is ignored inline, see README."""
    result = subprocess.run(["hadolint", "--no-color", str(dockerfile)], capture_output=True, text=True)
    return result.stdout.splitlines() + ([result.stderr] if result.returncode not in (0, 1) else [])
