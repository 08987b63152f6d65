"""The stack's [env] in a real venv's bin/activate (python -m venv and uv), sourced by real
shells: set on activation, given back by deactivate (an earlier value restored, a variable that
was not set unset again), the block written once however often a build runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trainstack.builder.activation import CALL, write_activation_env
from trainstack.errors import BuildError

ENV = {"NCCL_SOCKET_IFNAME": "ib0", "TRAINSTACK_TEST_QUOTED": "it's \"$HOME\" `id`"}
SHELLS = [shell for shell in ("bash", "dash", "zsh") if shutil.which(shell)]
SHOW = 'printf "%s|%s|%s\\n" "${NCCL_SOCKET_IFNAME-unset}" "${TRAINSTACK_TEST_QUOTED-unset}" "$(command -v _trainstack_env_restore || echo none)"'


def _venv(kind: str, where: Path) -> Path:
    if kind == "uv":
        subprocess.run(["uv", "venv", "-q", "--python", sys.executable, str(where)], check=True, timeout=120)
    else:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    return where


def _in_shell(shell: str, script: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("NCCL_SOCKET_IFNAME", "TRAINSTACK_TEST_QUOTED", "VIRTUAL_ENV")}
    return subprocess.run([shell, "-c", script], capture_output=True, text=True, check=True, env=env, timeout=60).stdout


@pytest.mark.parametrize("kind", ["venv", "uv"])
@pytest.mark.parametrize("shell", SHELLS)
def test_deactivate_gives_the_stacks_env_back(kind: str, shell: str, tmp_path: Path) -> None:
    venv = _venv(kind, tmp_path / "venv")
    for _ in range(2):  # a rebuild writes the block (and the call in deactivate) once
        write_activation_env(venv, ENV)
    script = (venv / "bin" / "activate").read_text()
    assert script.count(CALL) == 1 and script.count("# trainstack: end of [env]") == 1
    activate = venv / "bin" / "activate"
    out = _in_shell(shell, f'NCCL_SOCKET_IFNAME=eth9; export NCCL_SOCKET_IFNAME; . "{activate}"; {SHOW}; '
                           f'. "{activate}"; {SHOW}; deactivate; {SHOW}')
    active = f"ib0|{ENV['TRAINSTACK_TEST_QUOTED']}|_trainstack_env_restore"
    assert out.splitlines() == [active, active, "eth9|unset|none"]  # activated twice, then back to before


def test_an_activation_script_without_deactivate_is_refused(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "activate").write_text("export PATH=/nowhere:$PATH\n")
    with pytest.raises(BuildError, match="no 'deactivate \\(\\) \\{' line"):
        write_activation_env(tmp_path, ENV)
    assert (tmp_path / "bin" / "activate").read_text() == "export PATH=/nowhere:$PATH\n"
