"""The oci backend with real buildah and debootstrap: cpu-minimal on a debootstrap base, labels,
the CA secret absent from every layer, and the torch layer kept when an extra is bumped."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from tests.build_fixtures import copy_example, git, git_package, make_lock
from tests.signing import write_key
from tests.stacks import CPU_FLAVOUR
from trainstack.attest.sbom import SBOM_LABEL, SBOM_PATH_IN_IMAGE, validate_sbom
from trainstack.builder.oci import BuildahBackend, ulimit_options
from trainstack.cli import main

SLUG = "cpu-debian12-py311-release"
TAG = f"registry.example.com/ml/trainstack/cpu-minimal:2026.12.0-{SLUG}"
BASE = "localhost/trainstack-base:bookworm"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (shutil.which("buildah") and shutil.which("debootstrap")), reason="needs buildah and debootstrap"),
]


@pytest.fixture(scope="module")
def storage(containers_store: Path) -> Path:
    """The session's containers store (tests/conftest.py): its debootstrap base and system layer
    are reused by the private-index image build."""
    return containers_store


def buildah(*args: str, check: bool = True) -> str:
    driver = BuildahBackend().driver
    if args and args[0] in ("from", "build"):  # RUN steps' limits this process may set
        args = (args[0], *ulimit_options(), *args[1:])
    result = subprocess.run(["buildah", "--storage-driver", driver, *args], capture_output=True, text=True)
    if check:
        assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def marker() -> str:
    return f"trainstack-ca-marker-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def built(storage: Path, marker: str) -> dict[str, object]:
    """cpu-minimal built once, then rebuilt after bumping one extra (hypothesis)."""
    root = storage.parent / "stack"
    root.mkdir()
    ca = root / "ca.pem"
    system_ca = os.environ.get("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt")
    ca.write_text(f"# {marker}\n" + Path(system_ca).read_text())
    stack = copy_example("cpu-minimal", root, {r"min_free_disk_gb = 1\n": f'min_free_disk_gb = 1\nca_bundle = "{ca}"\n'})
    make_lock(stack)
    build = root / "build"
    had_base = buildah("inspect", "--type", "image", BASE, check=False) != ""  # another OCI test of this worker may have made it
    assert main(["build", str(stack), "--backend", "oci", "--build-dir", str(build)]) == 0
    first = json.loads((build / f"{SLUG}.oci" / "build.json").read_text())
    stack.write_text(stack.read_text().replace('hypothesis = ">=6.100"', 'hypothesis = ">=6.100,<6.150"'))
    make_lock(stack)
    private = ed25519.Ed25519PrivateKey.generate()  # the second build's provenance signed
    key = write_key(root / "signing.pem", private)
    public = root / "signing.pub"
    public.write_bytes(private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    assert main(["build", str(stack), "--backend", "oci", "--build-dir", str(build), "--signing-key", str(key)]) == 0
    second = json.loads((build / f"{SLUG}.oci" / "build.json").read_text())
    return {"first": first, "second": second, "root": root, "had_base": had_base, "stack": stack, "public": public}


def test_image_on_a_debootstrap_base_runs_and_is_labelled(built: dict[str, object]) -> None:
    first = built["first"]
    names = [s["name"] for s in first["steps"]]
    assert first["image"] == TAG
    assert ("debootstrap-bookworm" in names) is not built["had_base"]  # made only when the store lacked it
    assert names[0] == ("image" if built["had_base"] else "debootstrap-bookworm")
    assert buildah("inspect", "--type", "image", BASE, check=False) != ""
    container = buildah("from", "--quiet", TAG).strip()
    try:
        out = buildah("run", "--isolation", "chroot", container, "--", "python", "-c", "import numpy, sys; print(numpy.__version__, sys.version_info[:2])")
    finally:
        buildah("rm", container)
    assert out.strip().endswith("(3, 11)")
    labels = json.loads(buildah("inspect", "--type", "image", TAG))["OCIv1"]["config"]["Labels"]
    assert labels["io.trainstack.stack"] == "cpu-minimal" and labels["io.trainstack.release"] == "2026.12.0"
    assert labels["io.trainstack.flavour"] == SLUG
    assert labels["io.trainstack.cache-key"] == built["second"]["cache_key"]
    assert labels["io.trainstack.lock-sha256"] == built["second"]["lock_sha256"]


def test_the_image_carries_its_sbom_at_a_fixed_path_with_its_digest_in_a_label(built: dict[str, object], tmp_path: Path) -> None:
    container = buildah("from", "--quiet", TAG).strip()
    try:
        mount = Path(buildah("mount", container).strip())
        data = (mount / SBOM_PATH_IN_IMAGE.lstrip("/")).read_bytes()
        listed = buildah("run", "--isolation", "chroot", container, "--", "python", "-m", "pip", "list", "--format", "json")
        # the image's dpkg database as the host's dpkg-query reads it (not trainstack's reader)
        debs = subprocess.run(["dpkg-query", f"--admindir={mount / 'var/lib/dpkg'}", "-W", "-f",
                               "${db:Status-Status} ${Package} ${Version} ${Architecture}\n"],
                              capture_output=True, text=True, check=True).stdout
    finally:
        buildah("umount", container, check=False)
        buildah("rm", container)
    labels = json.loads(buildah("inspect", "--type", "image", TAG))["OCIv1"]["config"]["Labels"]
    assert labels[SBOM_LABEL] == hashlib.sha256(data).hexdigest()
    assert validate_sbom(data.decode()) is None
    sbom = json.loads(data)
    pip = {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(listed)}
    libraries = [c for c in sbom["components"] if c["type"] == "library"]
    assert {c["name"]: c["version"] for c in libraries if c["purl"].startswith("pkg:pypi/")} == pip
    assert sbom["metadata"]["component"]["type"] == "container"
    assert [c["name"] for c in sbom["components"] if c["type"] == "container"] == ["debootstrap:bookworm"]
    # the image's Debian packages (the native libraries under its Python: libc6, libssl3, ...) and its OS
    installed = {tuple(line.split()[1:]) for line in debs.splitlines() if line.startswith("installed ")}
    listed_debs = {(c["name"], c["version"], c["purl"]) for c in libraries if c["purl"].startswith("pkg:deb/")}
    assert {(name, version) for name, version, _ in listed_debs} == {(name, version) for name, version, _ in installed}
    assert {"libc6", "ca-certificates", "python3.11"} <= {name for name, _, _ in listed_debs}
    libc = next(purl for name, _, purl in listed_debs if name == "libc6")
    assert libc.startswith("pkg:deb/debian/libc6@") and libc.endswith("?arch=amd64&distro=debian-12"), libc
    assert [(c["name"], c["version"]) for c in sbom["components"] if c["type"] == "operating-system"] == [("debian", "12")]


def test_ca_bundle_is_in_no_layer(built: dict[str, object], marker: str, tmp_path: Path) -> None:
    layout = tmp_path / "image"
    buildah("push", "--disable-compression", TAG, f"dir:{layout}")
    manifest = json.loads((layout / "manifest.json").read_text())
    layers = [layout / layer["digest"].split(":", 1)[1] for layer in manifest["layers"]]
    assert len(layers) == 7  # six of the Dockerfile's stages, the SBOM
    for blob in [*layers, layout / manifest["config"]["digest"].split(":", 1)[1]]:
        assert marker.encode() not in blob.read_bytes(), blob.name  # not the bundle's bytes, anywhere
    for layer in layers:
        with tarfile.open(layer) as tar:
            names = tar.getnames()
        assert not [n for n in names if n.lstrip("./").startswith("run/secrets/")], layer.name
    config = json.loads(buildah("inspect", "--type", "image", TAG))["OCIv1"]["config"]
    assert not any("secrets" in e or "CERT" in e.split("=")[0] for e in config.get("Env", []))


def test_bumping_an_extra_keeps_the_torch_layer(built: dict[str, object]) -> None:
    first, second = built["first"]["layers"], built["second"]["layers"]
    assert len(first) == len(second) == 7  # base, system, torch lock + install, extras lock + install, SBOM
    assert first[:4] == second[:4]
    assert first[4] != second[4] and first[5] != second[5] and first[6] != second[6]
    assert "debootstrap-bookworm" not in [s["name"] for s in built["second"]["steps"]]  # base reused


def test_the_images_provenance_verifies_and_another_image_under_its_tag_fails_naming_it(built: dict[str, object], capsys) -> None:
    stack, public = built["stack"], built["public"]
    envelope = built["root"] / "build" / f"{SLUG}.oci" / "provenance.intoto.json"
    check = ["verify", str(stack), "--flavour", SLUG, "--provenance", str(envelope), "--public-key", str(public)]
    assert main(check) == 0
    assert "provenance: signature, the image, the stack file, the lock as signed" in capsys.readouterr().out
    image_id = json.loads(buildah("inspect", "--type", "image", TAG))["FromImageID"]
    buildah("tag", BASE, TAG)  # another image under the tag the provenance names
    try:
        assert main(check) == 1
    finally:
        buildah("tag", image_id, TAG)
    [line] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    base_id = json.loads(buildah("inspect", "--type", "image", BASE))["FromImageID"]
    assert line == (f"error: {TAG}: is image {base_id[:16]} here, not the image {image_id[:16]} the provenance names "
                    "(rebuilt, changed or tagged again since the build)")
    assert main(check) == 0


SOURCE_STACK = """
[stack]
name = "cpu-src"
release = "2026.12.0"
image = "trainstack/cpu-src"

[components]
numpy = ">=2.2,<2.5"
tsdemo = {{ git = "{url}", commit = "{sha}", build_env = {{ TS_BUILD_FLAG = "on" }}, jobs = {{ divisor = 1, cap = 3 }} }}

""" + CPU_FLAVOUR + """\
system_packages = ["ca-certificates", "git"]
min_free_disk_gb = 1

[toolchain]
packages = ["setuptools", "wheel"]
nvcc = false
"""


@pytest.fixture()
def git_daemon(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The source repository served over git:// on loopback (chroot builds share the host's network)."""
    _, sha = git_package(tmp_path, "tsdemo")
    git(tmp_path / "tsdemo-repo", "config", "uploadpack.allowAnySHA1InWant", "true")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    daemon = subprocess.Popen(
        ["git", "daemon", "--export-all", f"--base-path={tmp_path}", f"--port={port}", "--listen=127.0.0.1", "--reuseaddr"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"git://127.0.0.1:{port}/tsdemo-repo"
    for _ in range(50):
        if subprocess.run(["git", "ls-remote", url], capture_output=True).returncode == 0:
            break
        time.sleep(0.1)
    yield url, sha
    daemon.terminate()
    daemon.wait()


def test_git_source_fetched_and_compiled_in_stages(built: dict[str, object], git_daemon: tuple[str, str], tmp_path: Path) -> None:
    url, sha = git_daemon
    stack = tmp_path / "cpu-src.toml"
    stack.write_text(SOURCE_STACK.format(url=url, sha=sha))
    make_lock(stack)
    assert main(["build", str(stack), "--backend", "oci", "--build-dir", str(tmp_path / "build")]) == 0
    record = json.loads((tmp_path / "build" / f"{SLUG}.oci" / "build.json").read_text())
    jobs = record["max_jobs"]["tsdemo"]
    container = buildah("from", "--quiet", record["image"]).strip()
    try:
        probe = "import os, tsdemo, tsdemo_buildinfo as b; print(tsdemo.VALUE, b.MAX_JOBS, b.BUILD_FLAG, os.path.exists('/src'))"
        out = buildah("run", "--isolation", "chroot", container, "--", "python", "-c", probe)
    finally:
        buildah("rm", container)
    assert out.split() == ["42", str(jobs), "on", "False"]  # built with its env and budget; no source left behind
