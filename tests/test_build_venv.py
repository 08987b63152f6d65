"""The venv backend with real uv and git: builds, source components, interruption, bad input."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.build_fixtures import copy_example, drop_commit, make_lock, source_stack
from tests.clirun import assert_no_traceback
from tests.mounts import tmpfs
from trainstack.builder.cpu import effective_cpus
from trainstack.cli import main

SLUG = "cpu-debian12-py311-release"


def error_lines(err: str) -> list[str]:
    assert_no_traceback(err)
    return [line for line in err.splitlines() if line.startswith("error:")]


def assert_no_build_but_failure_logs(build: Path) -> None:
    """A failed first build leaves no environment: only its lock and the kept logs of the failure."""
    assert sorted(p.name for p in build.iterdir()) == sorted([f".{SLUG}.lock", SLUG])
    assert [p.name for p in (build / SLUG).iterdir()] == ["logs"]
    kept = list((build / SLUG / "logs").iterdir())
    assert len(kept) == 1 and kept[0].name.startswith("failed-")


def run_python(venv: Path, code: str) -> str:
    return subprocess.run([venv / "bin" / "python", "-c", code], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def cpu_stack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    stack = copy_example("cpu-minimal", tmp_path_factory.mktemp("cpu"))
    make_lock(stack)
    return stack


@pytest.fixture()
def src_stack(tmp_path: Path) -> tuple[Path, str, str]:
    stack, url, sha = source_stack(tmp_path)
    make_lock(stack)
    return stack, url, sha


@pytest.mark.python("3.11")  # builds a py311 flavour
def test_cpu_minimal_venv_build(cpu_stack: Path, tmp_path: Path) -> None:
    build = tmp_path / "build"
    assert main(["build", str(cpu_stack), "--build-dir", str(build)]) == 0
    venv = build / SLUG / "venv"
    assert run_python(venv, "import numpy, hypothesis; print(numpy.linalg.det(numpy.eye(3)))") == "1.0"
    # entry points keep working after the staging directory was renamed into place
    assert subprocess.run([venv / "bin" / "pytest", "--version"], capture_output=True).returncode == 0
    record = json.loads((build / SLUG / "build.json").read_text())
    manifest = json.loads((cpu_stack.parent / "cpu-minimal.lock" / "stack.lock.json").read_text())
    locked = manifest["flavours"][SLUG]
    assert record["cache_key"] == locked["cache_key"] and record["lock_sha256"] == locked["lock_sha256"]
    assert [s["name"] for s in record["steps"]] == ["venv", "install", "check"]
    assert all(s["seconds"] >= 0 and (build / SLUG / s["log"]).is_file() for s in record["steps"])
    assert record["sizes"]["venv"] > 10_000_000 and record["tools"]["uv"]
    installed = run_python(venv, "import importlib.metadata as m; print(m.version('numpy'))")
    assert installed == locked["packages"]["numpy"]
    assert not [p.name for p in build.iterdir() if "staging" in p.name]


@pytest.mark.python("3.11")  # builds a py311 flavour
def test_unchanged_lock_is_up_to_date(cpu_stack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    build = tmp_path / "build"
    assert main(["build", str(cpu_stack), "--build-dir", str(build)]) == 0
    first = (build / SLUG / "build.json").read_text()
    assert main(["build", str(cpu_stack), "--build-dir", str(build)]) == 0
    assert "up to date" in capsys.readouterr().err
    assert (build / SLUG / "build.json").read_text() == first


@pytest.mark.python("3.11")  # builds a py311 flavour
def test_git_source_built_with_its_env_and_job_budget(src_stack: tuple[Path, str, str], tmp_path: Path) -> None:
    stack, url, sha = src_stack
    build = tmp_path / "build"
    assert main(["build", str(stack), "--build-dir", str(build)]) == 0
    venv = build / SLUG / "venv"
    seen = run_python(venv, "import tsdemo, tsdemo_buildinfo as b; print(tsdemo.VALUE, b.MAX_JOBS, b.BUILD_FLAG)")
    expected_jobs = max(1, min(3, int(effective_cpus())))
    assert seen == f"42 {expected_jobs} on"
    record = json.loads((build / SLUG / "build.json").read_text())
    compile_step = next(s for s in record["steps"] if s["name"] == "compile-tsdemo")
    assert compile_step["free_disk_gb"] > 0
    assert record["max_jobs"] == {"tsdemo": expected_jobs}
    assert "ninja" in run_python(venv, "import importlib.metadata as m; print(m.version('ninja') and 'ninja')")
    assert not (build / SLUG / "src").exists()
    # the SBOM names the compiled extension's source: the git commit, and the wheel trainstack built
    sbom = json.loads((venv / "sbom.cdx.json").read_text())
    tsdemo = next(c for c in sbom["components"] if c["name"] == "tsdemo")
    properties = {p["name"]: p["value"] for p in tsdemo["properties"]}
    assert properties["trainstack:built-from"] == f"git+{url}@{sha}"
    assert properties["trainstack:compiled-wheel"] == record["extensions"]["tsdemo"]["wheel"]


@pytest.mark.python("3.11")  # builds a py311 flavour
def test_skip_sources_is_recorded(src_stack: tuple[Path, str, str], tmp_path: Path) -> None:
    stack, _, _ = src_stack
    build = tmp_path / "build"
    assert main(["build", str(stack), "--build-dir", str(build), "--skip-sources"]) == 0
    record = json.loads((build / SLUG / "build.json").read_text())
    assert record["skipped_sources"] == ["tsdemo"]
    assert {"name": "compile-tsdemo", "status": "skipped"}.items() <= next(
        s for s in record["steps"] if s["name"] == "compile-tsdemo"
    ).items()
    assert subprocess.run([build / SLUG / "venv" / "bin" / "python", "-c", "import tsdemo"]).returncode != 0


@pytest.mark.python("3.11")  # builds a py311 flavour
def test_sigkill_midway_leaves_the_old_build_working(src_stack: tuple[Path, str, str], tmp_path: Path) -> None:
    stack, _, _ = src_stack
    build = tmp_path / "build"
    assert main(["build", str(stack), "--build-dir", str(build)]) == 0
    before = (build / SLUG / "build.json").read_text()
    shutil.rmtree(build / ".extensions")  # else the compiled-wheel cache skips the compile step this test interrupts
    staging = build / f".{SLUG}.staging"
    child = subprocess.Popen(
        [sys.executable, "-m", "trainstack.cli", "build", str(stack), "--build-dir", str(build), "--force"],
        env={**os.environ, "TS_BUILD_SLEEP": "60"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not list((staging / "logs").glob("*checkout-tsdemo.log")) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.5)  # now inside the compile step, which sleeps in setup.py
    assert (staging / "venv" / "bin" / "python").exists(), "the second build never reached its compile step"
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    assert (build / SLUG / "build.json").read_text() == before
    assert run_python(build / SLUG / "venv", "import tsdemo, numpy; print(tsdemo.VALUE)") == "42"
    # the next run clears what the killed one left and completes
    assert main(["build", str(stack), "--build-dir", str(build), "--force"]) == 0
    assert not staging.exists()
    assert (build / SLUG / "build.json").read_text() != before


def test_unknown_backend(cpu_stack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", str(cpu_stack), "--backend", "podman", "--build-dir", str(tmp_path / "b")]) == 2
    assert error_lines(capsys.readouterr().err) == ["error: --backend: unknown backend 'podman' (one of: venv, oci)"]
    assert not (tmp_path / "b").exists()


def test_flavour_not_in_stack(cpu_stack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", str(cpu_stack), "--flavour", "cpu-debian12-py312", "--build-dir", str(tmp_path / "b")]) == 2
    lines = error_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "perhaps you meant 'cpu-debian12-py311-release'" in lines[0]
    assert not (tmp_path / "b").exists()


def test_oci_without_buildah_or_docker(
    cpu_stack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("uv", "git"):
        os.symlink(subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip(), bin_dir / tool)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert main(["build", str(cpu_stack), "--backend", "oci", "--build-dir", str(tmp_path / "b")]) == 6
    lines = error_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "apt-get install buildah" in lines[0]


@pytest.mark.python("3.11")  # builds a py311 flavour
def test_below_min_free_disk_is_refused_with_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack, _, _ = source_stack(tmp_path, min_free=1_000_000)
    make_lock(stack)
    build = tmp_path / "build"
    assert main(["build", str(stack), "--build-dir", str(build)]) == 7
    lines = error_lines(capsys.readouterr().err)
    assert len(lines) == 1
    assert "compile-tsdemo: only" in lines[0] and "GiB free" in lines[0] and "min_free_disk_gb is 1e+06" in lines[0]
    assert_no_build_but_failure_logs(build)


@pytest.mark.python("3.11")  # builds a py311 flavour
def test_full_disk_fails_cleanly(cpu_stack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with tmpfs(tmp_path / "small", "size=4m") as small:
        code = main(["build", str(cpu_stack), "--build-dir", str(small / "build")])
        lines = error_lines(capsys.readouterr().err)
        assert code == 7 and len(lines) == 1 and "no space left on the device" in lines[0]
        assert_no_build_but_failure_logs(small / "build")


@pytest.mark.python("3.11")  # builds a py311 flavour
def test_git_commit_that_does_not_exist(src_stack: tuple[Path, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack, url, sha = src_stack
    drop_commit(url, sha)
    build = tmp_path / "build"
    assert main(["build", str(stack), "--build-dir", str(build)]) == 7
    lines = error_lines(capsys.readouterr().err)
    assert len(lines) == 1 and lines[0].startswith(
        f"error: components.tsdemo.commit: {sha} does not exist in {url} (pin 'commit' to a sha of that repository and re-lock; logs in {build / SLUG / 'logs' / 'failed-'}"
    )
    assert_no_build_but_failure_logs(build)


def test_stale_lock_stops_the_build(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack = copy_example("cpu-minimal", tmp_path)
    make_lock(stack)
    stack.write_text(stack.read_text().replace('pytest = ">=8"', 'pytest = ">=8.1"'))
    assert main(["build", str(stack), "--build-dir", str(tmp_path / "b")]) == 4
    lines = error_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "lock" in lines[0]
