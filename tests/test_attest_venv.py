"""The evidence a venv build leaves, on a real build of examples/stacks/cpu-minimal.toml (real uv):
its CycloneDX SBOM (the library's own validator, every distribution pip lists), verify's file part
(a distribution replaced and one installed after the build, a file edited), and the build's
provenance signed with an ed25519 key (a changed byte in the statement, the stack or the target)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

from tests.build_fixtures import copy_example, make_lock
from tests.clirun import assert_no_traceback
from tests.signing import write_key
from trainstack.attest.sbom import make_sbom, validate_sbom
from trainstack.cli import main

SLUG = "cpu-debian12-py311-release"
ONLY_FILES = ["--skip", "report,advisories,ops,linkcheck,smoke,suites"]
NOTHING = ["--skip", "report,files,advisories,ops,linkcheck,smoke,suites"]




pytestmark = pytest.mark.python("3.11")  # every test builds a py311 flavour


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(stack, build folder, public key): the example locked and built once, its provenance signed."""
    root = tmp_path_factory.mktemp("attest")
    stack = copy_example("cpu-minimal", root)
    make_lock(stack)
    private = ed25519.Ed25519PrivateKey.generate()
    key = write_key(root / "signing.pem", private)
    public = root / "signing.pub"
    public.write_bytes(private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    assert main(["build", str(stack), "--build-dir", str(root / "build"), "--signing-key", str(key), "-q"]) == 0
    return stack, root / "build", public


@pytest.fixture()
def copy(built: tuple[Path, Path, Path], tmp_path: Path) -> tuple[Path, Path, Path]:
    """The stack and its build copied, for a test that changes them (the venv is relocatable)."""
    stack, build, public = built
    shutil.copytree(stack.parent, tmp_path / "s", symlinks=True, ignore=shutil.ignore_patterns("build"))
    shutil.copytree(build / SLUG, tmp_path / "s" / "build" / SLUG, symlinks=True)
    return tmp_path / "s" / stack.name, tmp_path / "s" / "build", public


def errors(text: str) -> list[str]:
    assert_no_traceback(text)
    return [line for line in text.splitlines() if line.startswith("error:")]


def test_the_sbom_validates_and_lists_every_distribution_pip_lists(built: tuple[Path, Path, Path]) -> None:
    _, build, _ = built
    venv = build / SLUG / "venv"
    text = (venv / "sbom.cdx.json").read_text()
    assert validate_sbom(text) is None
    sbom = json.loads(text)
    listed = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "list", "--format", "json"],
                            check=True, capture_output=True, text=True).stdout
    pip = {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(listed)}
    libraries = {c["name"]: c for c in sbom["components"] if c["type"] == "library"}
    assert {name: c["version"] for name, c in libraries.items()} == pip
    numpy = libraries["numpy"]
    assert numpy["purl"] == f"pkg:pypi/numpy@{pip['numpy']}" and numpy["hashes"][0]["alg"] == "SHA-256"
    # what the wheels link to outside the venv (numpy's C extensions: the C library at least), with hashes
    native = [c for c in sbom["components"] if c["type"] == "file"]
    assert any(Path(c["name"]).name.startswith("libc.so") for c in native) and all(len(c["hashes"][0]["content"]) == 64 for c in native)
    assert sbom["metadata"]["component"]["name"] == f"cpu-minimal/{SLUG}"
    # an SBOM that breaks the schema is named by the validator
    broken = text.replace('"type": "library"', '"type": "liberry"', 1)
    assert "liberry" in (validate_sbom(broken) or "")


def test_verify_passes_an_unchanged_build_and_names_what_was_replaced_or_added_after_it(copy, capsys) -> None:
    stack, build, _ = copy
    result = build / SLUG / "verify.partial.json"
    assert main(["verify", str(stack), "--build-dir", str(build), *ONLY_FILES]) == 0
    assert json.loads(result.read_text())["files"]["distributions"] == []
    venv = build / SLUG / "venv"
    locked = json.loads(result.read_text())
    python = str(venv / "bin" / "python")
    numpy = subprocess.run([python, "-c", "import numpy; print(numpy.__version__)"], capture_output=True, text=True, check=True).stdout.strip()
    other = "2.2.6" if numpy != "2.2.6" else "2.3.0"
    for requirement in ("six==1.17.0", f"numpy=={other}"):  # a later pip install: an undeclared package, numpy replaced
        subprocess.run(["uv", "pip", "install", "-q", "--python", python, requirement], check=True, timeout=300)
    (venv / "lib" / "python3.11" / "site-packages" / "pytest" / "__init__.py").write_text("# changed\n", encoding="utf-8")
    (venv / "bin" / "planted.sh").write_text("#!/bin/sh\n", encoding="utf-8")  # a file of no distribution
    capsys.readouterr()
    assert main(["verify", str(stack), "--build-dir", str(build), *ONLY_FILES]) == 1
    shown = capsys.readouterr().out
    found = json.loads(result.read_text())
    changes = {d["name"]: (d["change"], d["built"], d["installed"]) for d in found["files"]["distributions"]}
    assert changes == {"numpy": ("replaced", numpy, other), "six": ("added", None, "1.17.0"),
                       "pytest": ("modified", changes["pytest"][1], changes["pytest"][1])}
    assert f"files: numpy {numpy} was replaced by {other} after the build" in found["reasons"]
    assert "files: six 1.17.0 was installed after the build (not in the build)" in found["reasons"]
    assert "files: 1 file(s) of no distribution added since the build: bin/planted.sh" in found["reasons"]
    assert "numpy" in shown and "six" in shown and locked["verdict"] == "pass"


def test_without_a_build_record_each_wheels_record_is_the_basis(copy, capsys) -> None:
    stack, build, _ = copy
    (build / SLUG / "files.json").unlink()
    venv = build / SLUG / "venv"
    target = venv / "lib" / "python3.11" / "site-packages" / "numpy" / "version.py"
    target.write_text(target.read_text() + "# changed\n")
    out = build / "v.json"
    assert main(["verify", "--python", str(venv / "bin" / "python"), *ONLY_FILES, "-o", str(out)]) == 1
    files = json.loads(out.read_text())["files"]
    assert files["basis"] == "RECORD"
    [numpy] = files["distributions"]
    assert numpy["name"] == "numpy" and numpy["change"] == "modified" and numpy["example"].endswith("numpy/version.py")


def provenance_check(stack: Path, build: Path, public: Path, envelope: Path | None = None) -> int:
    envelope = envelope or build / SLUG / "provenance.intoto.json"
    return main(["verify", str(stack), "--build-dir", str(build), *NOTHING, "--provenance", str(envelope), "--public-key", str(public)])


def test_signed_provenance_verifies_and_a_changed_byte_fails_naming_what(copy, capsys) -> None:
    stack, build, public = copy
    envelope = build / SLUG / "provenance.intoto.json"
    assert provenance_check(stack, build, public) == 0
    assert "provenance: signature, the environment's files, the SBOM, the stack file, the lock as signed" in capsys.readouterr().out
    statement = json.loads(base64.b64decode(json.loads(envelope.read_text())["payload"]))
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    assert {d["annotations"]["role"] for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"]} == {"stack", "lock", "lock manifest"}
    assert b"PRIVATE" not in envelope.read_bytes()

    data = json.loads(envelope.read_text())  # one byte of the statement
    payload = bytearray(base64.b64decode(data["payload"]))
    payload[payload.index(b"cpu-minimal")] ^= 1
    data["payload"] = base64.b64encode(bytes(payload)).decode()
    changed = build / "changed.json"
    changed.write_text(json.dumps(data))
    assert provenance_check(stack, build, public, changed) == 1
    [line] = errors(capsys.readouterr().err)
    assert line.startswith(f"error: {changed}: the signature does not verify")

    original = stack.read_bytes()  # one byte of the stack file
    stack.write_bytes(original + b"\n")
    assert provenance_check(stack, build, public) == 1
    [line] = errors(capsys.readouterr().err)
    assert line.startswith(f"error: {stack}: the stack file differs from the one the provenance names")
    stack.write_bytes(original)

    numpy = build / SLUG / "venv" / "lib" / "python3.11" / "site-packages" / "numpy" / "__init__.py"  # one byte of the target
    numpy.write_bytes(numpy.read_bytes() + b" ")
    assert provenance_check(stack, build, public) == 1
    [line] = errors(capsys.readouterr().err)
    assert line.startswith(f"error: {build / SLUG / 'venv'}: the environment's files differ from those the provenance names")


def test_a_signing_key_readable_by_others_or_not_ed25519_is_refused_before_any_work(built, tmp_path, capsys) -> None:
    stack, _, _ = built
    key = write_key(tmp_path / "open.pem", ed25519.Ed25519PrivateKey.generate())
    key.chmod(0o644)
    build = tmp_path / "build"
    assert main(["build", str(stack), "--build-dir", str(build), "--signing-key", str(key)]) == 2
    [line] = errors(capsys.readouterr().err)
    assert line == f"error: {key}: --signing-key: permissions 0644 are too open: a private key must be readable by its owner alone (chmod 600 {key})"
    rsa_key = write_key(tmp_path / "rsa.pem", rsa.generate_private_key(public_exponent=65537, key_size=2048))
    assert main(["build", str(stack), "--build-dir", str(build), "--signing-key", str(rsa_key)]) == 2
    [line] = errors(capsys.readouterr().err)
    assert "accepted: an ed25519 private key" in line
    assert not build.exists() or not (build / SLUG).exists()
    assert os.access(key, os.R_OK)


def test_an_up_to_date_build_is_signed_without_building_again(copy, tmp_path, capsys) -> None:
    stack, build, public = copy
    (build / SLUG / "provenance.intoto.json").unlink()
    record = (build / SLUG / "build.json").read_bytes()
    private = ed25519.Ed25519PrivateKey.generate()
    key = write_key(tmp_path / "other.pem", private)
    other = tmp_path / "other.pub"
    other.write_bytes(private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    assert main(["build", str(stack), "--build-dir", str(build), "--signing-key", str(key)]) == 0
    assert "up to date" in capsys.readouterr().err
    assert (build / SLUG / "build.json").read_bytes() == record
    assert provenance_check(stack, build, other) == 0
    assert provenance_check(stack, build, public) == 1  # signed with the other key
    [line] = errors(capsys.readouterr().err)
    assert "the signature does not verify with the public key given" in line


def test_an_image_sbom_names_its_cuda_toolkit_route_base_image_and_sdist_hashes() -> None:
    """The CUDA example as an image: nvcc from Debian 13's package (the rules' route for its base),
    its base image, and DeepSpeed built from the sdist whose hash the lock holds."""
    from trainstack.builder.backend import BuildJob
    from trainstack.builder.evidence import sbom_inputs
    from trainstack.lock.lockfile import hashes
    from trainstack.lock.inputs import load_inputs

    example = Path(__file__).resolve().parent.parent / "examples" / "stacks" / "deepspeed-cuda12-debian.toml"
    inputs = load_inputs(example)
    [layers] = inputs.layers
    job = BuildJob(inputs, layers, Path("staging"), Path("final"), skip_sources=False, ca_bundle=None, cpus=1.0)
    installed = {e.name: e.version for e in layers.full.entries}
    text = make_sbom(sbom_inputs(job, "oci", installed, {}))
    assert validate_sbom(text) is None
    parts = {c["bom-ref"]: c for c in json.loads(text)["components"]}
    cuda = parts["cuda-toolkit"]
    properties = {p["name"]: p["value"] for p in cuda["properties"]}
    assert cuda["version"] == "12.4" and properties["trainstack:cuda-route"] == "debian"
    assert "nvidia-cuda-toolkit=12.4.131" in properties["trainstack:cuda-source"]
    assert parts["base-image"]["name"] == "docker.io/library/debian:trixie"
    deepspeed = next(c for c in parts.values() if c["name"] == "deepspeed")
    built_from = {p["name"]: p["value"] for p in deepspeed["properties"]}["trainstack:built-from"]
    [sha] = hashes(layers.full.get("deepspeed"))
    assert built_from == f"sdist deepspeed=={installed['deepspeed']} (sha256 one of: {sha})"


@pytest.mark.skipif(shutil.which("buildah") is None, reason="needs buildah")
def test_an_image_provenance_naming_an_image_not_here_or_no_image_is_one_line(built, tmp_path, capsys) -> None:
    from trainstack.attest.provenance import BuildFacts, load_signer, sha256_file, sign
    from trainstack.builder.oci import BuildahBackend

    stack, _, public = built
    signer = load_signer(public.with_name("signing.pem"))
    envelope = tmp_path / "provenance.intoto.json"
    facts = dict(stack_name=stack.name, stack_sha256=sha256_file(stack), lock_file=f"locks/{SLUG}.txt", lock_sha256="0" * 64,
                 manifest_sha256="0" * 64, flavour=SLUG, backend="oci", skip_sources=False, build_settings={},
                 base_image="debootstrap:bookworm", started="", finished="", byproducts={},
                 tools={"trainstack": "0", "buildah": "1", "storage-driver": BuildahBackend().driver})
    for subject, message in (("localhost/trainstack-tests/absent:1", "localhost/trainstack-tests/absent:1: no such image on "
                              f"this machine; the provenance names image id {'ab' * 8} (pull or load that image, then verify again)"),
                             ("--rm", f"{envelope}: its subject '--rm' is not an image reference")):
        envelope.write_text(sign(BuildFacts(subjects={subject: "ab" * 32}, **facts), signer))
        assert main(["verify", str(stack), "--provenance", str(envelope), "--public-key", str(public)]) == 1
        assert errors(capsys.readouterr().err) == [f"error: {message}"]
    # a signed statement of the right types whose fields are not what they should be: one line, never a traceback
    from securesystemslib.dsse import Envelope

    from trainstack.attest.provenance import PAYLOAD_TYPE, PREDICATE_TYPE, STATEMENT_TYPE

    odd = {"_type": STATEMENT_TYPE, "predicateType": PREDICATE_TYPE, "subject": [{"name": "venv", "digest": "x"}], "predicate": []}
    signed = Envelope(payload=json.dumps(odd).encode(), payload_type=PAYLOAD_TYPE, signatures={})
    signed.sign(signer)
    envelope.write_text(json.dumps(signed.to_dict()))
    assert provenance_check(stack, built[1], public, envelope) == 1
    [line] = errors(capsys.readouterr().err)
    assert "the environment's files differ from those the provenance names" in line
