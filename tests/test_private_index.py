"""A private index that requires HTTP basic auth, on loopback: a stack whose credentials are only in
the environment (uv's UV_INDEX_<NAME>_USERNAME/PASSWORD) locks, renders and builds a venv; afterwards
the password is in no file under the stack's folder, lock, rendered files or build, in no log and
in no output. Without the credentials the lock fails in one line.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from tests.clirun import assert_no_traceback
from tests.loopback import WheelIndex, serve
from tests.private_index import PASSWORD, USER, authorized, credentials_env, leaks
from tests.stacks import demo_stack
from tests.wheels import demo_wheel
from trainstack.builder.download import Fetcher, download_sdist, index_auth
from trainstack.builder.oci import BuildahBackend, ulimit_options
from trainstack.cli import main
from trainstack.errors import BuildError

WHEELS = dict([demo_wheel("1.0")])  # demo-pkg 1.0: one module, one real wheel

pytestmark = pytest.mark.timeout(900)  # the OCI build takes minutes when it builds its own base; the others seconds


class AuthIndex(WheelIndex):
    """A PEP 503 index that answers 401 to any request without the right basic credentials."""

    project = "demo-pkg"
    wheels = WHEELS
    authorized = 0
    refused = 0

    def admit(self) -> bool:
        return authorized(self)


@pytest.fixture()
def index(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    for var in ("UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL", "UV_INDEX"):
        monkeypatch.delenv(var, raising=False)
    AuthIndex.authorized, AuthIndex.refused = 0, 0
    with serve(AuthIndex) as url:
        yield url


def test_without_credentials_the_lock_fails_in_one_line(index: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack = tmp_path / "private.toml"
    stack.write_text(demo_stack("private", index), encoding="utf-8")
    assert main(["lock", str(stack)]) != 0
    err = capsys.readouterr().err
    assert_no_traceback(err)
    assert AuthIndex.refused >= 1 and AuthIndex.authorized == 0
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and all(line.startswith(("$ ", "error:", "locking ")) for line in err.splitlines()), err
    assert "asks for credentials: set UV_INDEX_127_0_0_1_USERNAME and UV_INDEX_127_0_0_1_PASSWORD" in err


@pytest.mark.python("3.11")  # builds a py311 flavour
def test_credentials_from_the_environment_lock_render_and_build(
    index: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for key, value in credentials_env(index).items():
        monkeypatch.setenv(key, value)
    stack = tmp_path / "private.toml"
    stack.write_text(demo_stack("private", index), encoding="utf-8")
    assert main(["lock", str(stack)]) == 0
    assert main(["render", str(stack), "--out", str(tmp_path / "render")]) == 0
    locked = AuthIndex.authorized
    shutil.rmtree(tmp_path / "uv-cache")  # the build fetches from the index again
    build = tmp_path / "build"
    assert main(["build", str(stack), "--backend", "venv", "--build-dir", str(build)]) == 0
    assert AuthIndex.authorized > locked > 0
    slug = "cpu-debian12-py311-release"
    site = list((build / slug / "venv").glob("lib/python3.11/site-packages/demo_pkg.py"))
    assert len(site) == 1 and "1.0" in site[0].read_text()
    assert f"--index-url {index}" in (build / slug / "locks" / "install.txt").read_text()
    assert f"--index-url {index}" in (tmp_path / "render" / slug / "torch.txt").read_text()
    assert AuthIndex.authorized >= 2
    captured = capsys.readouterr()
    assert leaks(tmp_path, captured.out, captured.err) == []
    probe = tmp_path / "build" / "probe"  # the search finds what it looks for
    probe.write_text(f"x{PASSWORD}x")
    assert leaks(tmp_path) == [str(probe)]


def test_credentials_in_uv_index_url_are_used_but_never_written(
    index: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The older way (user:password inside UV_INDEX_URL): the lock holds the URL alone."""
    with_creds = index.replace("http://", f"http://{USER}:{PASSWORD}@")
    monkeypatch.setenv("UV_INDEX_URL", with_creds)
    stack = tmp_path / "private.toml"
    stack.write_text(demo_stack("private", index).replace(f'url = "{index}"', ""), encoding="utf-8")
    assert main(["lock", str(stack)]) == 0
    lock = (tmp_path / "private.lock" / "locks" / "cpu-debian12-py311-release.txt").read_text()
    assert f"--index-url {index}" in lock
    captured = capsys.readouterr()
    assert leaks(tmp_path, captured.out, captured.err) == []


def image_leaks(layout: Path) -> list[str]:
    """The blobs of an uncompressed image layout (every layer tarball, the config) that hold the
    password, and the layers' netrc or secrets files that are not empty."""
    secrets = [PASSWORD.encode(), base64.b64encode(f"{USER}:{PASSWORD}".encode())]
    manifest = json.loads((layout / "manifest.json").read_text())
    blobs = [layout / item["digest"].split(":", 1)[1] for item in [*manifest["layers"], manifest["config"]]]
    found = [blob.name for blob in blobs if any(s in blob.read_bytes() for s in secrets)]
    for item in manifest["layers"]:
        with tarfile.open(layout / item["digest"].split(":", 1)[1]) as tar:
            kept = [m.name for m in tar.getmembers() if m.name.lstrip("./").startswith(("root/.netrc", "run/secrets/")) and m.size]
        found += kept  # at most the empty mount point
    return found


@pytest.mark.slow
@pytest.mark.skipif(not (shutil.which("buildah") and shutil.which("debootstrap")), reason="needs buildah and debootstrap")
def test_oci_image_gets_the_credentials_as_a_build_secret_only(
    index: str, containers_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """buildah (chroot isolation shares loopback) installs from the private index through uv, which
    reads the netrc build secret; no layer, no config, no log holds the password. The session's
    containers store (tests/conftest.py) gives the debootstrap base and, since the system packages
    equal cpu-minimal's, the system layer that tests/test_build_oci.py built: only the torch, extras
    and final stages are built here."""
    for key, value in credentials_env(index).items():
        monkeypatch.setenv(key, value)
    stack = tmp_path / "private.toml"
    text = demo_stack("private", index).replace('demo-pkg = "==1.0"', 'demo-pkg = { version = "==1.0", group = "torch" }')
    text = text.replace("min_free_disk_gb = 0", 'system_packages = ["ca-certificates"]\nmin_free_disk_gb = 0')
    stack.write_text(text.replace("min_free_disk_gb = 0", 'min_free_disk_gb = 0\nca_bundle = "/etc/ssl/certs/ca-certificates.crt"'))
    assert main(["lock", str(stack)]) == 0
    tag = "trainstack/private:2026.12.0-cpu-debian12-py311-release"
    buildah = ["buildah", "--storage-driver", BuildahBackend().driver]
    try:
        assert main(["build", str(stack), "--backend", "oci", "--build-dir", str(tmp_path / "build")]) == 0
        container = subprocess.run([*buildah, "from", "--quiet", *ulimit_options(), tag], capture_output=True, text=True, check=True).stdout.strip()
        probe = [*buildah, "run", "--isolation", "chroot", container, "--", "python", "-c", "import demo_pkg; print(demo_pkg.VERSION)"]
        assert subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip() == "1.0"
        subprocess.run([*buildah, "rm", container], capture_output=True, check=True)
        assert AuthIndex.authorized >= 2  # the lock's page, then the image build's page and wheel
        layout = tmp_path / "image"
        subprocess.run([*buildah, "push", "--disable-compression", tag, f"dir:{layout}"], capture_output=True, check=True)
        assert image_leaks(layout) == []
        planted = layout / json.loads((layout / "manifest.json").read_text())["config"]["digest"].split(":", 1)[1]
        logs = list((tmp_path / "build").rglob("*.log"))
        assert logs and any("uv pip install" in log.read_text() for log in logs)  # the build logs, searched below
        captured = capsys.readouterr()
        assert leaks(tmp_path, captured.out, captured.err) == []  # layers, build folder, logs, lock, outputs
        planted.write_bytes(planted.read_bytes() + PASSWORD.encode())  # the searches find what they look for
        assert image_leaks(layout) == [planted.name]
    finally:
        subprocess.run([*buildah, "rmi", "--force", tag], capture_output=True)


SDIST = b"the bytes of demo_pkg-1.0.tar.gz"


class SdistIndex(BaseHTTPRequestHandler):
    """A JSON simple-API index behind basic auth whose file URL redirects to another host."""

    authorized = 0
    refused = 0
    file_host = ""  # where /files/... redirects

    def do_GET(self) -> None:  # noqa: N802
        if not authorized(self):
            return
        if self.path == "/simple/demo-pkg/":
            item = {"filename": "demo_pkg-1.0.tar.gz", "url": "../../files/demo_pkg-1.0.tar.gz", "hashes": {"sha256": hashlib.sha256(SDIST).hexdigest()}}
            body = json.dumps({"files": [item]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_response(302)
            self.send_header("Location", self.file_host + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


class FileHost(BaseHTTPRequestHandler):
    """Serves the sdist to anyone and records the Authorization header of every request."""

    seen: list[str | None] = []

    def do_GET(self) -> None:  # noqa: N802
        type(self).seen.append(self.headers.get("Authorization"))
        self.send_response(200)
        self.send_header("Content-Length", str(len(SDIST)))
        self.end_headers()
        self.wfile.write(SDIST)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def sdist_index() -> Iterator[str]:
    SdistIndex.authorized, SdistIndex.refused, FileHost.seen = 0, 0, []
    with serve(FileHost, "") as files, serve(SdistIndex) as url:
        SdistIndex.file_host = files
        yield url


def test_sdist_download_sends_the_credentials_to_the_index_host_only(sdist_index: str, tmp_path: Path) -> None:
    """build/download.py (sdists of source builds in venv builds): the index's credentials from the
    environment reach its host, not the host its file URL redirects to; the Fetcher's repr hides them."""
    fetcher = Fetcher(initial_wait=0.05, auth=index_auth([sdist_index], credentials_env(sdist_index)))
    digest = hashlib.sha256(SDIST).hexdigest()
    path = download_sdist(fetcher, sdist_index, "demo-pkg", "1.0", [digest], tmp_path)
    assert path.read_bytes() == SDIST and path.name == "demo_pkg-1.0.tar.gz"
    assert SdistIndex.authorized == 2 and SdistIndex.refused == 0  # the page and the file URL
    assert FileHost.seen == [None]  # the redirect's target got no credentials
    assert PASSWORD not in repr(fetcher) and leaks(tmp_path) == []


@pytest.mark.parametrize("password", [None, "wrong-password"])
def test_sdist_download_without_the_right_credentials_fails_in_one_line(
    sdist_index: str, tmp_path: Path, password: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {} if password is None else {**credentials_env(sdist_index), "UV_INDEX_127_0_0_1_PASSWORD": password}
    fetcher = Fetcher(initial_wait=0.05, auth=index_auth([sdist_index], env))
    with_userinfo = sdist_index.replace("http://", f"http://{USER}:{PASSWORD}@")  # never sent, never shown
    with pytest.raises(BuildError) as caught:
        download_sdist(fetcher, with_userinfo, "demo-pkg", "1.0", ["0" * 64], tmp_path)
    text = str(caught.value)
    assert "HTTP 401" in text and PASSWORD not in text and "\n" not in text and USER not in text
    if password is None:
        assert "asks for credentials: set UV_INDEX_127_0_0_1_USERNAME and UV_INDEX_127_0_0_1_PASSWORD" in text
    else:
        assert "refused the credentials of UV_INDEX_127_0_0_1_USERNAME and UV_INDEX_127_0_0_1_PASSWORD" in text
    assert SdistIndex.authorized == 0 and SdistIndex.refused == 1 and list(tmp_path.iterdir()) == []


def test_echo_log_and_errors_mask_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """proc.run's echoed command and its log, with a URL's user info and a credential variable's value."""
    from trainstack import proc
    from trainstack.redact import redact, strip_userinfo

    monkeypatch.setenv("UV_INDEX_PYPI_EXAMPLE_COM_PASSWORD", PASSWORD)
    log = tmp_path / "step.log"
    result = proc.run(["echo", f"https://{USER}:{PASSWORD}@pypi.example.com/simple", PASSWORD], log=log)
    assert result.ok
    echoed = capsys.readouterr().err
    assert "https://***@pypi.example.com/simple" in echoed and PASSWORD not in echoed
    assert PASSWORD not in log.read_text() and "***" in log.read_text()
    assert strip_userinfo(f"--index-url https://{USER}:{PASSWORD}@h/simple") == "--index-url https://h/simple"
    assert redact(f"git+ssh://git@h/r token={PASSWORD}") == "git+ssh://***@h/r token=***"
