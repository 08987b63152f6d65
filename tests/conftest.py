"""Shared fixtures: example stacks copied into a temporary directory; what is costly to make (real
locks, venvs) made once per test session for every pytest-xdist worker (tests/session_cache.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.session_cache import made_once

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "stacks"

# A shell that starts this suite in the background without job control (`bash .ci/run &` in a
# script, nohup) hands it SIGINT ignored, and every program the tests start would inherit that: the
# tests that press Ctrl-C on trainstack would see nothing happen. Handled here, it is the default again
# in each program they start.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# pytest-xdist's workers get COLUMNS=80 and LINES=24 from execnet: trainstack honours an explicit
# COLUMNS, so the suite would see wrapped tables under -n that it never sees run serially or in CI logs
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _name in ("COLUMNS", "LINES"):
        os.environ.pop(_name, None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked gpu run GPU code: without a CUDA GPU they are skipped, and say so. Under
    pytest-xdist the hang guards (timeout marks) stretch by the number of workers sharing the
    machine's cores, so a test slowed by its neighbours is not taken for a hung one."""
    gpu = [item for item in items if item.get_closest_marker("gpu") is not None]
    if gpu and not _cuda_available():
        for item in gpu:
            item.add_marker(pytest.mark.skip(reason="skip: no GPU"))
    lacking: dict[str, str | None] = {}
    for item in items:
        mark = item.get_closest_marker("python")
        if mark is None:
            continue
        version = mark.args[0]
        if version not in lacking:
            lacking[version] = _python_missing(version)
        if lacking[version]:
            item.add_marker(pytest.mark.skip(reason=f"skip: {lacking[version]}"))
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if workers > 1:
        # files with slow tests first, so that the longest files start at once and the workers end together
        slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
        items.sort(key=lambda item: item.path not in slow_files)
        for item in items:
            mark = item.get_closest_marker("timeout")
            if mark is not None and mark.args and isinstance(mark.args[0], (int, float)):
                item.add_marker(pytest.mark.timeout(mark.args[0] * workers), append=False)


def _python_missing(version: str) -> str | None:
    """Why a venv of Python ``version`` cannot be built here (None when it can): the machine has
    no such Python and uv cannot fetch its own build (a machine that does not reach the host uv
    downloads from, as a Debian 13 or Ubuntu 24.04 without Python 3.11 may be)."""
    if subprocess.run(["uv", "python", "find", "--no-python-downloads", version], capture_output=True).returncode == 0:
        return None
    done = subprocess.run(["uv", "python", "install", version], capture_output=True, text=True, timeout=600)
    if done.returncode == 0:
        return None
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    return f"no Python {version} on this machine and uv could not fetch one ({lines[-1][:200] if lines else f'exit {done.returncode}'})"


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.fixture
def example_stack(tmp_path: Path):
    """Copy examples/stacks/<name>.toml into tmp_path and return the copy's path."""

    def copy(name: str) -> Path:
        target = tmp_path / f"{name}.toml"
        shutil.copyfile(EXAMPLES / f"{name}.toml", target)
        return target

    return copy


@pytest.fixture
def write_stack(tmp_path: Path):
    """Write stack text to tmp_path/<name>.toml and return its path."""

    def write(text: str, name: str = "stack") -> Path:
        path = tmp_path / f"{name}.toml"
        path.write_text(text, encoding="utf-8")
        return path

    return write


@pytest.fixture(scope="session")
def containers_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One containers store for every OCI build of the session, apart from the machine's own images:
    the debootstrap base and the layers that equal Dockerfile stages share are built once, by the
    first test that needs them, and reused by the others (buildah's layer cache)."""
    from trainstack.builder.oci import BuildahBackend

    root = tmp_path_factory.mktemp("containers")
    conf = root / "storage.conf"
    conf.write_text(f'[storage]\ndriver = ""\ngraphroot = "{root}/graph"\nrunroot = "{root}/run"\n')
    old = os.environ.get("CONTAINERS_STORAGE_CONF")
    os.environ["CONTAINERS_STORAGE_CONF"] = str(conf)
    yield root
    buildah = ["buildah", "--storage-driver", BuildahBackend().driver]
    subprocess.run([*buildah, "rmi", "--all", "--force"], capture_output=True)
    subprocess.run([*buildah, "unshare", "true"], capture_output=True)
    if old is None:
        del os.environ["CONTAINERS_STORAGE_CONF"]
    else:
        os.environ["CONTAINERS_STORAGE_CONF"] = old


@pytest.fixture(scope="session")
def locked_pair(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with examples/stacks/cpu-minimal.toml and a previous release of it, both locked by
    uv once for the session (tests/release_pair.py); a test copies it before changing anything."""
    from tests.release_pair import lock_pair

    return made_once(tmp_path_factory, "locked-pair", lock_pair)


@pytest.fixture
def project(locked_pair: Path, tmp_path: Path) -> Path:
    """The locked pair in tmp_path, plus fragments and a verify result of the current flavour
    (tests/release_pair.py); a module may define a project of its own."""
    from tests.release_pair import make_project

    return make_project(locked_pair, tmp_path)


@pytest.fixture(scope="session")
def torch_extensions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for the session's JIT builds (DeepSpeed's ops through torch's cpp_extension): the
    one TORCH_EXTENSIONS_DIR names (a cache kept between runs), else one shared by every
    pytest-xdist worker. torch's own file lock in each op's folder lets one process build an op
    while the others (another rank, another test) wait for it and load what it built."""
    named = os.environ.get("TORCH_EXTENSIONS_DIR")
    return Path(named) if named else made_once(tmp_path_factory, "torch-extensions", lambda folder: None)


@pytest.fixture(scope="session")
def one_process_bench(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """bench's row of the tiny preset trained eagerly by one process on the global batches the
    distributed tests split over 2 ranks (tests/benchrun.py): the loss they must reach, run once
    for the session."""
    from tests.benchrun import bench

    def make(folder: Path) -> None:
        (row,) = bench(folder, "--batch", "4", "--modes", "eager")
        (folder / "row.json").write_text(json.dumps(row), encoding="utf-8")

    return json.loads((made_once(tmp_path_factory, "bench-one-process", make) / "row.json").read_text(encoding="utf-8"))
