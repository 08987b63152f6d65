"""A loopback index that holds a wheel's download back while a test asks it to, and the one-flavour
stack over it: a build caught mid-download, for the interrupt tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tests.kill_harness import index_handler, wheel
from tests.loopback import serve

STACK = """\
[stack]
name = "stall"
release = "1"
image = "trainstack/stall"

[index]
url = "{index}"

[components]
tinypkg = "==1.0"

[matrix]
cuda = ["cpu"]
os = ["debian12"]
python = ["3.11"]

[toolchain]
packages = ["tinytool"]

[build]
retries = 1
"""


class Stall:
    """While ``on``, a wheel's download is held back (its request seen, its answer delayed)."""

    def __init__(self) -> None:
        self.on = threading.Event()
        self.asked = threading.Event()
        self.release = threading.Event()


@pytest.fixture(scope="module")
def stalling_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Stall]]:
    wheels = tmp_path_factory.mktemp("wheels")
    wheel(wheels, "tinypkg", "1.0")
    wheel(wheels, "tinytool", "1.0")
    stall = Stall()
    base = index_handler(wheels)

    class Held(base):  # type: ignore[misc, valid-type]
        def do_GET(self, head: bool = False) -> None:  # noqa: N802 (http.server's name)
            if stall.on.is_set() and self.path.startswith("/files/"):
                stall.asked.set()
                stall.release.wait(60)
            try:
                super().do_GET(head)
            except (BrokenPipeError, ConnectionResetError):
                pass  # uv was killed while waiting for it

    with serve(Held) as url:
        yield url, stall
    stall.release.set()
