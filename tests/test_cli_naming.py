"""Names and noise as a new user meets them: --flavor (the American spelling uv and pip users
type) and a slug written with the matrix's own dots select a flavour; a second build of a
flavour while one runs exits with a code of its own (11), having done nothing; lock shows its
uv command only with -v.

Real: the CLI as a process on the committed lock of an example, a real flock held by this test,
and a lock from a loopback index."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

from tests.stalling_index import STACK, stalling_index  # noqa: F401 (a fixture)
from trainstack.cli import main

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "stacks" / "deepspeed-cuda12-debian.toml"
SLUG = "cu124-debian13-py313-release"


def cli(*args: str, cwd: Path = REPO, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trainstack", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "300", **(env or {})})


def test_flavor_and_a_dotted_slug_select_the_flavour(capsys) -> None:
    assert main(["keys", str(EXAMPLE), "--flavour", SLUG]) == 0
    plain = capsys.readouterr().out
    assert SLUG in plain
    for args in (("--flavor", SLUG), ("--flavour", "cu124-debian13-py3.13-release"),
                 ("--flavor", "cu124-debian13-py3.13-release")):
        assert main(["keys", str(EXAMPLE), *args]) == 0, args
        assert capsys.readouterr().out == plain, args


def test_a_second_build_of_a_flavour_exits_11_and_does_nothing(tmp_path: Path) -> None:
    build_dir = tmp_path / "build"
    build_dir.mkdir()
    with (build_dir / f".{SLUG}.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as the first build holds it
        done = cli("build", str(EXAMPLE), "--backend", "venv", "--skip-sources", "--build-dir", str(build_dir))
    assert done.returncode == 11, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: {build_dir / SLUG}: another build of this flavour is running; nothing was done (wait for it to "
        "finish, or build into another --build-dir)")
    assert sorted(p.name for p in build_dir.iterdir()) == [f".{SLUG}.lock"]
    assert "11 another build of the flavour is running" in cli("build", "--help").stdout


def test_dry_runs_write_nothing_and_lock_shows_uv_only_with_verbose(stalling_index, tmp_path: Path) -> None:
    url, _ = stalling_index
    (tmp_path / "stall.toml").write_text(STACK.format(index=url), encoding="utf-8")
    env = {"UV_CACHE_DIR": str(tmp_path / "uv-cache")}
    done = cli("lock", "stall.toml", "--dry-run", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert "cpu-debian12-py311-release: tinypkg (none) -> 1.0" in done.stdout
    assert "dry run: nothing written" in done.stdout and not (tmp_path / "stall.lock").exists()
    assert "uv pip compile" not in done.stderr  # lock shows its uv commands only with -v
    loud = cli("lock", "stall.toml", "-v", cwd=tmp_path, env=env)
    assert loud.returncode == 0, loud.stderr
    assert "$ " in loud.stderr and "uv pip compile" in loud.stderr and (tmp_path / "stall.lock").is_dir()
    build_dir = tmp_path / "build"
    done = cli("build", str(EXAMPLE), "--backend", "venv", "--skip-sources", "--dry-run", "--build-dir", str(build_dir))
    assert done.returncode == 0, done.stderr
    assert f"{SLUG}: would build with venv into {build_dir / SLUG}: install " in done.stderr
    assert "left out (--skip-sources): deepspeed (MAX_JOBS " in done.stderr
    assert not build_dir.exists() or list(build_dir.iterdir()) == []
    refused = cli("build", str(EXAMPLE), "--backend", "venv", "--dry-run", "--build-dir", str(build_dir),
                  env={"CUDA_HOME": str(tmp_path)})
    assert refused.returncode == 6 and "--skip-sources" in refused.stderr  # the same refusals as a build
