"""PyTorch's variant indexes are declarable: `[index] pytorch = URL` locks a CPU torch from an
internal mirror of https://download.pytorch.org/whl (its /cpu index), and `pytorch = false`
from the stack's own find_links alone, PyTorch's index never asked.

Real: uv locks from loopback servers (a PEP 503 index, a mirror laid out as PyTorch's) and a
local wheel folder; the torch wheel is a small installable one named as the CPU build."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kill_harness import index_handler, wheel
from tests.loopback import serve

STACK = """\
[stack]
name = "mirror"
release = "1"
image = "trainstack/mirror"

[index]
url = "{index}"
{extra}

[components]
torch = "==2.13.0"

[matrix]
cuda = ["cpu"]
os = ["debian12"]
python = ["3.11"]

[toolchain]
packages = ["tinytool"]
"""
SLUG = "cpu-debian12-py311-release"


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path, list[str]]]:
    """(the index, the mirror's base URL, the local wheel folder, the mirror's requested paths)."""
    plain = tmp_path_factory.mktemp("plain")
    wheel(plain, "tinytool", "1.0")
    local = tmp_path_factory.mktemp("local")
    wheel(local, "torch", "2.13.0+cpu")
    asked: list[str] = []
    base = index_handler(local)

    class Mirror(base):  # type: ignore[misc, valid-type]
        """PyTorch's layout: /whl/cpu/<name>/ lists the wheels, served from /files/."""

        def do_GET(self, head: bool = False) -> None:  # noqa: N802 (http.server's name)
            asked.append(self.path)
            if self.path.startswith("/whl/cpu/"):
                self.path = "/simple/" + self.path.removeprefix("/whl/cpu/")
            super().do_GET(head)

    with serve(index_handler(plain)) as index, serve(Mirror, "/whl") as mirror:
        yield index, mirror, local, asked


def lock(tmp_path: Path, index: str, extra: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    project = tmp_path / "project"
    project.mkdir()
    (project / "mirror.toml").write_text(STACK.format(index=index, extra=extra), encoding="utf-8")
    env = {**os.environ, "UV_CACHE_DIR": str(tmp_path / "uv-cache"), "COLUMNS": "300"}
    done = subprocess.run([sys.executable, "-m", "trainstack", "lock", "mirror.toml"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=300)
    return done, project / "mirror.lock"


def test_an_internal_mirror_of_pytorchs_indexes_serves_the_cpu_torch(servers, tmp_path: Path) -> None:
    index, mirror, _, asked = servers
    done, folder = lock(tmp_path, index, f'pytorch = "{mirror}"')
    assert done.returncode == 0, done.stderr
    manifest = json.loads((folder / "stack.lock.json").read_text())
    assert manifest["flavours"][SLUG]["packages"]["torch"] == "2.13.0+cpu"
    assert manifest["flavours"][SLUG]["index"] == f"{mirror}/cpu"
    assert any(path.startswith("/whl/cpu/torch") for path in asked)
    assert "download.pytorch.org" not in "".join(p.read_text() for p in folder.rglob("*") if p.is_file())


def test_no_variant_index_takes_torch_from_the_stacks_find_links(servers, tmp_path: Path) -> None:
    index, _, local, _ = servers
    done, folder = lock(tmp_path, index, f'find_links = ["{local.as_uri()}"]\npytorch = false')
    assert done.returncode == 0, done.stderr
    manifest = json.loads((folder / "stack.lock.json").read_text())
    assert manifest["flavours"][SLUG]["packages"]["torch"] == "2.13.0+cpu"
    assert manifest["flavours"][SLUG]["index"] is None
    assert "download.pytorch.org" not in "".join(p.read_text() for p in folder.rglob("*") if p.is_file())
