"""The real CLI in a child process, SIGKILLed at its N-th write under the project (a Python audit
hook counts the writes), and the small project it runs on: a stack over a loopback PEP 503 index
of tiny real wheels, locked once a module with an older lock beside it."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.loopback import serve

REPO = Path(__file__).resolve().parent.parent


# Runs in the child: argv = ROOT KILL_AT COUNT_FILE verb args...; KILL_AT 0 counts without killing.
KILLER = r"""
import os, signal, sys
root, kill_at, count_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
PATH_EVENTS = {"os.rename": 2, "os.replace": 2, "os.remove": 1, "os.rmdir": 1, "os.mkdir": 1, "os.chmod": 1,
               "shutil.rmtree": 1, "os.link": 2, "os.symlink": 2, "os.truncate": 1, "os.utime": 1}
state = {"count": 0, "on": True, "swaps": []}

def under_root(path, dir_fd=None):
    if isinstance(path, int):
        return False
    path = os.fsdecode(os.fspath(path))
    if not os.path.isabs(path):
        if dir_fd is not None:
            return True  # relative to a descriptor: rmtree removing inside a tree it was given
        path = os.path.join(os.getcwd(), path)
    path = os.path.normpath(path)
    return path == root or path.startswith(root + os.sep)

def writes(event, args):
    if event == "open":
        path, mode, flags = args
        if isinstance(mode, str):
            return any(c in mode for c in "wax+") and under_root(path)
        return bool((flags or 0) & WRITE_FLAGS) and under_root(path)
    if event in PATH_EVENTS:
        dir_fd = args[-1] if event in ("os.remove", "os.rmdir", "os.mkdir", "shutil.rmtree") else None
        return any(under_root(a, dir_fd) for a in args[:PATH_EVENTS[event]] if a is not None)
    if event == "trainstack.exchange_dirs":  # renameat2 through ctypes, which raises no event itself
        return under_root(args[0]) or under_root(args[1])
    return False

def hook(event, args):
    if not state["on"] or not writes(event, args):
        return
    state["count"] += 1
    if event == "trainstack.exchange_dirs":
        state["swaps"].append(state["count"])
    if state["count"] == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)

sys.addaudithook(hook)
from trainstack.cli import main
try:
    code = main(sys.argv[4:])
finally:
    state["on"] = False
    with open(count_file, "w") as fh:
        fh.write(f'{state["count"]} {" ".join(map(str, state["swaps"]))}')
sys.exit(code)
"""


def run_cli(
    project: Path, args: list[str], kill_at: int = 0, timeout: float = 120, count_file: str = "write-count"
) -> tuple[int, list[int] | None, str]:
    """(return code, stderr) of `trainstack ARGS` in ``project``, and when it was not killed: the
    number of write events followed by the numbers of the exchange events among them."""
    count_file = project.parent / count_file
    count_file.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLER, str(project.resolve()), str(kill_at), str(count_file), *args],
        cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        _, err = proc.communicate(timeout=timeout)
    finally:
        _kill_group(proc.pid)  # what the killed CLI started (uv, its own children) goes with it
    counts = [int(n) for n in count_file.read_text().split()] if count_file.exists() else None
    return proc.returncode, counts, err


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root``; a lock manifest without its timestamp (the one field that is the time)."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            if path.name == "stack.lock.json":
                manifest = json.loads(data)
                manifest.pop("generated_at")
                data = json.dumps(manifest, sort_keys=True).encode()
            found[str(path.relative_to(root))] = data
    return found


def leftovers(project: Path) -> list[str]:
    """Hidden staging or moved-aside trees an interrupted writer may leave beside its output."""
    return sorted(str(p.relative_to(project)) for p in project.rglob(".*") if ".staging-" in p.name or p.name.endswith(".old"))


def restore(pristine: Path, project: Path) -> None:
    shutil.rmtree(project)
    shutil.copytree(pristine, project, symlinks=True)


def wheel(directory: Path, name: str, version: str) -> Path:
    """A real, installable pure-Python wheel of ``name`` ``version`` (one module that knows its version)."""
    files = {
        f"{name}/__init__.py": f'__version__ = "{version}"\n',
        f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{name}-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = f"{name}-{version}.dist-info/RECORD"
    lines = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        lines.append(f"{path},sha256={digest},{len(text.encode())}")
    files[record] = "\n".join([*lines, f"{record},,"]) + "\n"
    path = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
    return path


PACKAGES = {"tinypkg": ("1.0", "2.0"), "tinyother": ("1.0", "2.0"), "tinytool": ("1.0",)}


def index_handler(wheels: Path) -> type[http.server.BaseHTTPRequestHandler]:
    """A PEP 503 simple index of the wheels in ``wheels``: /simple/<name>/ and /files/<wheel>."""

    class Index(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:  # noqa: N802 (http.server's name); no ranges: uv then fetches whole wheels
            self.do_GET(head=True)

        def do_GET(self, head: bool = False) -> None:  # noqa: N802
            self.head = head
            parts = [p for p in self.path.split("/") if p]
            if len(parts) == 2 and parts[0] == "simple":
                links = "".join(
                    f'<a href="/files/{w.name}#sha256={hashlib.sha256(w.read_bytes()).hexdigest()}">{w.name}</a>\n'
                    for w in sorted(wheels.glob(f"{parts[1]}-*.whl"))
                )
                return self._send(f"<html><body>\n{links}</body></html>\n".encode(), "text/html") if links else self.send_error(404)
            if len(parts) == 2 and parts[0] == "files" and (wheels / parts[1]).is_file():
                return self._send((wheels / parts[1]).read_bytes(), "application/octet-stream")
            self.send_error(404)

        def _send(self, body: bytes, kind: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            if not self.head:
                self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    return Index


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Iterator[str]:
    wheels = tmp_path_factory.mktemp("wheels")
    for name, versions in PACKAGES.items():
        for version in versions:
            wheel(wheels, name, version)
    with serve(index_handler(wheels)) as url:
        yield url


STACK = """\
[stack]
name = "small"
release = "{release}"
image = "trainstack/small"

[index]
url = "{index}"

[components]
{components}

[matrix]
cuda = ["cpu"]
os = ["debian12"]
python = ["3.11", "3.12"]

[toolchain]
packages = ["tinytool"]

[build]
retries = 2
base = {{ debian12 = "debootstrap:bookworm" }}
"""
PY311 = "cpu-debian12-py311-release"
PY312 = "cpu-debian12-py312-release"


def write_stack(project: Path, index: str, components: str, release: str = "2") -> Path:
    path = project / "small.toml"
    path.write_text(STACK.format(index=index, components=components, release=release), encoding="utf-8")
    return path


def cli_ok(project: Path, *args: str) -> str:
    code, _, err = run_cli(project, list(args))
    assert code == 0, err
    return err


def pins(project: Path, slug: str = PY311) -> dict[str, str]:
    return json.loads((project / "small.lock" / "stack.lock.json").read_text())["flavours"][slug]["packages"]


@pytest.fixture(scope="module")
def old_lock(tmp_path_factory, index: str) -> Path:
    """A project whose lock pins 1.0 of tinypkg and tinyother while the stack allows 2.0: `-P NAME` moves one."""
    project = tmp_path_factory.mktemp("old") / "proj"
    project.mkdir()
    write_stack(project, index, 'tinypkg = ">=1,<2"\ntinyother = ">=1,<2"', release="1")
    cli_ok(project, "lock", "small.toml")
    shutil.copy(project / "small.lock" / "stack.lock.json", project / "previous.json")  # release 1, for release
    write_stack(project, index, 'tinypkg = ">=1"\ntinyother = ">=1"')
    cli_ok(project, "lock", "small.toml")  # the wider range alone moves nothing: the old lock is uv's preference
    assert pins(project) == {"tinypkg": "1.0", "tinyother": "1.0"}
    return project
