"""Air-gapped use with real uv runs: a flavour whose Python is not installed is refused up front when
uv may not download one; a download that cannot reach its host is a network failure (5) naming
the host and what was fetched; `lock --offline` (or UV_OFFLINE) never asks the index."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from tests.clirun import assert_no_traceback
from tests.loopback import serve

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "stacks" / "cpu-minimal.toml"
CANDIDATES = ("3.12", "3.13", "3.10")  # Pythons the rules accept for a Debian 12 CPU flavour


def _absent_python() -> str:
    """A Python the rules accept that uv finds nowhere on this machine."""
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
    for version in CANDIDATES:
        found = subprocess.run(["uv", "python", "find", version], capture_output=True, text=True, env=env)
        if found.returncode != 0:
            return version
    pytest.skip(f"every candidate Python ({', '.join(CANDIDATES)}) is installed here")


def _stack(folder: Path, python: str, index: str | None = None) -> Path:
    text = EXAMPLE.read_text().replace('python = ["3.11"]', f'python = ["{python}"]')
    text = text.replace("[build]\n", "[build]\nretries = 2\n")
    if index is not None:
        text = text.replace("[components]\n", f'[index]\nurl = "{index}"\n\n[components]\n')
    path = folder / "stack.toml"
    path.write_text(text)
    return path


def trainstack(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trainstack.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=600)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens there once closed: connection refused


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A stack of a Python that is not installed, locked (a lock needs no interpreter)."""
    folder = tmp_path_factory.mktemp("offline")
    version = _absent_python()
    stack = _stack(folder, version)
    result = trainstack(["lock", stack.name], folder)
    assert result.returncode == 0, result.stderr
    return stack, version


def _one_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, (result.returncode, result.stderr)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert_no_traceback(result.stderr)
    assert len(errors) == 1, result.stderr
    return errors[0]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["UV_PYTHON_DOWNLOADS=never", "--offline", "UV_OFFLINE=1"])
def test_a_missing_python_is_refused_up_front_naming_it_and_how_to_provide_it(locked, how):
    stack, version = locked
    args, env = ["build", stack.name], {}
    if how.startswith("--"):
        args.append(how)
    else:
        name, value = how.split("=")
        env[name] = value
    line = _one_line(trainstack(args, stack.parent, **env), 6)
    slug = f"cpu-debian12-py{version.replace('.', '')}-release"
    assert line.startswith(f"error: flavour {slug} needs Python {version}: no Python {version} is installed here")
    assert ("UV_PYTHON_DOWNLOADS=never" if "DOWNLOADS" in how else "offline (--offline or UV_OFFLINE)") in line
    assert f"uv python install {version}" in line and f"python{version} package" in line
    assert "lookup address" not in line and "step venv" not in line
    assert not (stack.parent / "build" / slug / "venv").exists()


@pytest.mark.slow
def test_a_python_download_that_cannot_reach_its_host_is_a_network_failure_naming_both(locked, tmp_path):
    stack, version = locked
    port = _closed_port()
    result = trainstack(["build", stack.name], stack.parent, UV_PYTHON_INSTALL_MIRROR=f"http://127.0.0.1:{port}/python",
                        UV_PYTHON_INSTALL_DIR=str(tmp_path / "pythons"))
    line = _one_line(result, 5)
    assert f"fetching Python {version} (uv's standalone build) from host 127.0.0.1:{port}" in line
    assert f"last URL: http://127.0.0.1:{port}/python/" in line


@pytest.mark.slow
def test_a_python_download_whose_host_does_not_resolve_exits_5_not_7(locked, tmp_path):
    stack, version = locked
    result = trainstack(["build", stack.name], stack.parent, UV_PYTHON_INSTALL_MIRROR="http://nosuchhost.invalid/python",
                        UV_PYTHON_INSTALL_DIR=str(tmp_path / "pythons"))
    line = _one_line(result, 5)  # was: "step venv failed (exit 2): cause: failed to lookup address information", 7
    assert f"fetching Python {version} (uv's standalone build) from host nosuchhost.invalid" in line


class _Counting(BaseHTTPRequestHandler):
    requests: list[str] = []

    def do_GET(self) -> None:  # noqa: N802
        _Counting.requests.append(self.path)
        self.send_error(503)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.slow
@pytest.mark.parametrize("how", ["--offline", "UV_OFFLINE=1"])
def test_lock_offline_never_asks_the_index_and_names_what_the_cache_lacks(tmp_path, how):
    _Counting.requests = []
    with serve(_Counting) as index:
        stack = _stack(tmp_path, "3.11", index=index)
        args, env = ["lock", stack.name], {"UV_CACHE_DIR": str(tmp_path / "empty-cache")}
        if how == "--offline":
            args.append(how)
        else:
            env["UV_OFFLINE"] = "1"
        line = _one_line(trainstack(args, tmp_path, **env), 5)
    assert _Counting.requests == []  # uv asked nothing of the index
    assert line.startswith("error: offline (--offline or UV_OFFLINE), and uv's cache does not hold the index page of ")
    assert f"from {index}" in line and "lock once where the index is reachable" in line
    assert not (tmp_path / "stack.lock").exists()


@pytest.mark.python("3.11")  # builds a py311 flavour
@pytest.mark.slow
def test_build_offline_with_an_empty_cache_names_the_package_it_lacks(tmp_path):
    stack = _stack(tmp_path, "3.11")
    assert trainstack(["lock", stack.name], tmp_path).returncode == 0
    result = trainstack(["build", stack.name, "--offline"], tmp_path, UV_CACHE_DIR=str(tmp_path / "empty-cache"))
    line = _one_line(result, 5)  # was: "step install failed (exit 1): hint: Packages were unavailable ...", 7
    assert line.startswith("error: step install: offline (--offline or UV_OFFLINE), and uv's cache does not hold package ")
    assert "build once where the index is reachable" in line
    assert not (tmp_path / "build" / "cpu-debian12-py311-release" / "venv").exists()
