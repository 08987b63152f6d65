"""Network steps against a real HTTP server on loopback that fails twice, then serves."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from trainstack.builder.download import Fetcher, download_sdist
from trainstack.builder.steps import Steps, looks_transient
from trainstack.errors import BuildError, NetworkError

from tests.loopback import serve

SDIST = b"not really a tarball, but bytes with a known hash"
DIGEST = hashlib.sha256(SDIST).hexdigest()


class FlakyIndex(BaseHTTPRequestHandler):
    """A JSON simple-API index whose every path answers 503 twice before it serves."""

    failures: dict[str, int] = {}
    requests: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.requests.append(self.path)
        seen = self.failures.get(self.path, 0)
        if seen < 2:
            self.failures[self.path] = seen + 1
            self.send_error(503, "try again")
            return
        if self.path == "/simple/demo-pkg/":
            files = [{"filename": "demo_pkg-1.0.tar.gz", "url": "../../files/demo_pkg-1.0.tar.gz", "hashes": {"sha256": DIGEST}}]
            body = json.dumps({"files": files}).encode()
        elif self.path == "/files/demo_pkg-1.0.tar.gz":
            body = SDIST
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def index() -> Iterator[str]:
    FlakyIndex.failures = {}
    FlakyIndex.requests = []
    with serve(FlakyIndex) as url:
        yield url


def test_download_succeeds_after_two_failures(index: str, tmp_path: Path) -> None:
    fetcher = Fetcher(attempts=4, initial_wait=0.05)
    path = download_sdist(fetcher, index, "Demo_Pkg", "1.0", [DIGEST], tmp_path)
    assert path.read_bytes() == SDIST
    assert FlakyIndex.requests.count("/simple/demo-pkg/") == 3
    assert FlakyIndex.requests.count("/files/demo_pkg-1.0.tar.gz") == 3


def test_gives_up_with_one_clear_error(index: str, tmp_path: Path) -> None:
    fetcher = Fetcher(attempts=2, initial_wait=0.05)
    with pytest.raises(NetworkError, match=r"GET http://127\.0\.0\.1:\d+/simple/demo-pkg/ failed after 2 attempts: HTTP 503"):
        download_sdist(fetcher, index, "demo-pkg", "1.0", [DIGEST], tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_hash_not_in_lock_is_refused(index: str, tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="no sdist of demo-pkg==1.0 with a hash from the lock"):
        download_sdist(Fetcher(initial_wait=0.05), index, "demo-pkg", "1.0", ["0" * 64], tmp_path)


def test_command_step_retried_against_the_same_server(index: str, tmp_path: Path) -> None:
    """A separate program fetching over the network as a build step: retried while the server answers 503."""
    steps = Steps(tmp_path, retries=4, retry_wait=0.05)
    url = index.replace("/simple", "/files/demo_pkg-1.0.tar.gz")
    fetch = f"import urllib.request; urllib.request.urlretrieve({url!r}, {str(tmp_path / 'out')!r})"
    steps.run("fetch", [sys.executable, "-c", fetch], network=True)
    assert (tmp_path / "out").read_bytes() == SDIST
    assert FlakyIndex.requests.count("/files/demo_pkg-1.0.tar.gz") == 3
    assert "fetch" in steps.records[0].name and (tmp_path / steps.records[0].log).is_file()


def test_transient_classification() -> None:
    assert looks_transient("error: Failed to fetch: `https://x/simple/numpy/`\n  Caused by: operation timed out")
    assert looks_transient("curl: (22) The requested URL returned error: 503")
    assert not looks_transient("error: Hash mismatch for `numpy==2.2.0`")
    assert not looks_transient("fatal: repository 'file:///nope' does not exist")
