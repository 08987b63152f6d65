"""A stack with an [env] table over a loopback PEP 503 index of one real wheel (demo-pkg 1.0):
the index fixture and the stack's text, for the tests of [env], tags and cluster rendering."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.loopback import WheelIndex, serve
from tests.stacks import demo_stack
from tests.wheels import demo_wheel

WHEELS = dict([demo_wheel("1.0")])

ENV = """[env]
NCCL_SOCKET_IFNAME = "{ifname}"
CUDA_MODULE_LOADING = "LAZY"
TRAINSTACK_TEST_QUOTING = "it's \\"$HOME\\" \\\\ $(id) `id`"
"""


class Index(WheelIndex):
    """A PEP 503 simple index of WHEELS on loopback."""

    project = "demo-pkg"
    wheels = WHEELS


@pytest.fixture()
def index(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    for var in ("UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL", "UV_INDEX"):
        monkeypatch.delenv(var, raising=False)
    with serve(Index) as url:
        yield url


def stack_text(url: str = "http://127.0.0.1:1/simple", *, release: str = "1.0", env: str = ENV.format(ifname="eth0"),
               build_extra: str = "") -> str:
    return demo_stack("envs", url, release=release, build_extra=build_extra, tail=f"\n[verify]\nsmoke = []\n\n{env}")
