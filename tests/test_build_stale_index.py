"""`uv pip sync` of a lock against a real index on loopback whose page for a package is stale.

PyPI's CDN and caching proxies sometimes serve a package's index page from before its newest
release; uv then keeps that page in its HTTP cache for the page's max-age. The lock pinned the
release, so the build asks uv to revalidate the page and tries again.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from trainstack.builder.steps import Steps
from trainstack.builder.venv import refresh_missing_pins
from trainstack.errors import NetworkError

from tests.loopback import serve
from tests.wheels import demo_wheel

PAGE = "/simple/demo-pkg/"


WHEELS = dict(demo_wheel(v) for v in ("0.9", "1.0"))
NEW = "demo_pkg-1.0-py3-none-any.whl"


class StaleIndex(BaseHTTPRequestHandler):
    """A PEP 503 index whose page for demo-pkg omits 1.0 for its first ``stale`` answers."""

    stale = 0
    page_requests = 0

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path == PAGE:
            type(self).page_requests += 1
            listed = [w for w in WHEELS if w != NEW or self.page_requests > self.stale]
            links = "".join(
                f'<a href="/files/{w}#sha256={hashlib.sha256(WHEELS[w]).hexdigest()}">{w}</a>\n' for w in listed
            )
            self._send(f"<html><body>\n{links}</body></html>\n".encode(), "text/html", cache=True)
        elif self.path.startswith("/files/") and self.path[len("/files/") :] in WHEELS:
            self._send(WHEELS[self.path[len("/files/") :]], "application/octet-stream", cache=False)
        else:
            self.send_error(404)

    def _send(self, body: bytes, kind: str, *, cache: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        if cache:
            self.send_header("Cache-Control", "max-age=600, public")  # what PyPI sends for a page
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def index(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    StaleIndex.stale, StaleIndex.page_requests = 0, 0
    with serve(StaleIndex) as url:
        yield url


def _sync_argv(index: str, tmp_path: Path) -> list[str | Path]:
    venv = tmp_path / "venv"
    subprocess.run(["uv", "venv", "--quiet", "--python", sys.executable, venv], check=True)
    lock = tmp_path / "install.txt"
    digest = hashlib.sha256(WHEELS[NEW]).hexdigest()
    lock.write_text(f"--index-url {index}\ndemo-pkg==1.0 \\\n    --hash=sha256:{digest}\n", encoding="utf-8")
    return ["uv", "pip", "sync", "--python", venv / "bin" / "python", "--require-hashes", lock]


def _installed_version(tmp_path: Path) -> str:
    probe = [tmp_path / "venv" / "bin" / "python", "-c", "import demo_pkg; print(demo_pkg.VERSION)"]
    return subprocess.run(probe, check=True, capture_output=True, text=True).stdout.strip()


def test_uv_keeps_a_stale_page_without_refresh(index: str, tmp_path: Path) -> None:
    """Why a plain retry is not enough: uv answers the second attempt from its own cache."""
    StaleIndex.stale = 10
    argv = [str(a) for a in _sync_argv(index, tmp_path)]
    for _ in range(2):
        result = subprocess.run(argv, capture_output=True, text=True)
        assert result.returncode != 0 and "there is no version of demo-pkg==1.0" in result.stderr
    assert StaleIndex.page_requests == 1


def test_sync_revalidates_the_page_and_installs_the_pin(index: str, tmp_path: Path) -> None:
    StaleIndex.stale = 2
    steps = Steps(tmp_path / "build", retries=4, retry_wait=0.05)
    steps.run("install", _sync_argv(index, tmp_path), network=True, recover=refresh_missing_pins)
    assert _installed_version(tmp_path) == "1.0"
    assert StaleIndex.page_requests == 3  # stale, stale after revalidation, then fresh
    log = (tmp_path / "build" / steps.records[0].log).read_text(encoding="utf-8")
    assert log.count("--refresh-package=demo-pkg") == 2  # added once, kept by the third attempt


def test_a_pin_the_index_never_lists_gives_one_clear_error(index: str, tmp_path: Path) -> None:
    StaleIndex.stale = 100
    steps = Steps(tmp_path / "build", retries=3, retry_wait=0.05)
    expected = (
        r"step install failed after 3 attempts: the index lists no demo-pkg==1\.0, which the lock pins: "
        r"a stale index page, or the version was removed from the index "
        r"\(then `trainstack lock --upgrade-package demo-pkg` pins another\)"
    )
    with pytest.raises(NetworkError, match=expected):
        steps.run("install", _sync_argv(index, tmp_path), network=True, recover=refresh_missing_pins)
    assert StaleIndex.page_requests == 3


def test_other_failures_are_not_retried(index: str, tmp_path: Path) -> None:
    assert refresh_missing_pins("error: Hash mismatch for `demo-pkg==1.0`", ["uv"]) is None
    assert refresh_missing_pins("demo-pkg==1.0 has no wheels with a matching platform tag", ["uv"]) is None
