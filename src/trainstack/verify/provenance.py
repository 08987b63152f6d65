"""verify --provenance: the signed statement of a build checked against what is there now: its
signature with the public key given, the environment's files and SBOM it names (or, for an image, the
image its tag names here, read with the buildah or docker that built it), the stack file, the
flavour's lock and the flavour itself. The first that does not hold is one line naming it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from trainstack import proc
from trainstack.attest.files import SBOM_NAME, snapshot
from trainstack.attest.provenance import dependency, load_public_key, member, open_envelope, sha256_file, subjects
from trainstack.errors import ProvenanceError, UsageError
from trainstack.grammar import OCI_REFERENCE, shown
from trainstack.lock.manifest import lock_dir
from trainstack.verify.target import Target


class ProvenanceCheck(BaseModel):
    envelope: str
    public_key: str
    flavour: str | None
    checked: list[str]  # what was compared, in words


SHA256_HEX = re.compile(r"^[0-9a-f]{64}\Z")
STORAGE_DRIVERS = ("overlay", "vfs")  # buildah's, as build records them
NOT_FOUND = ("image not known", "no such image")  # what buildah and docker say of a tag they do not have


def open_signed(envelope: Path, public_key: Path) -> dict[str, Any]:
    """The statement once its signature verifies with ``public_key``."""
    return open_envelope(envelope, load_public_key(public_key))


def names_image(found: dict[str, Any]) -> bool:
    """Whether the statement is an image build's (its subject an image, not a venv)."""
    return _parameters(found).get("backend") == "oci" and "venv" not in subjects(found)


def check_provenance(
    envelope: Path, public_key: Path, target: Target, stack_path: Path | None, flavour: str | None, found: dict[str, Any] | None = None
) -> ProvenanceCheck:
    found = found if found is not None else open_signed(envelope, public_key)
    named = subjects(found)
    checked = ["signature"]
    if "venv" not in named:
        raise UsageError(
            f"{envelope}: names {', '.join(sorted(named))[:200]}, not a venv: verify checks an environment",
            hint="a venv build's provenance (BUILD_DIR/<flavour>/provenance.intoto.json)",
        )
    if not target.is_venv:
        raise ProvenanceError(f"{envelope}: names a venv, and {target.python} is not one")
    digest = snapshot(target.prefix).digest()
    if digest != named["venv"]:
        raise ProvenanceError(
            f"{target.prefix}: the environment's files differ from those the provenance names "
            f"(sha256 {digest[:16]} against {named['venv'][:16]}): changed since the build "
            "(verify's files part names which)"
        )
    checked.append("the environment's files")
    sbom = target.prefix / SBOM_NAME
    if SBOM_NAME in named:
        if not sbom.is_file() or sha256_file(sbom) != named[SBOM_NAME]:
            raise ProvenanceError(f"{sbom}: differs from the SBOM the provenance names, or is missing")
        checked.append("the SBOM")
    return _inputs(found, envelope, public_key, stack_path, flavour, checked)


def check_image_provenance(
    found: dict[str, Any], envelope: Path, public_key: Path, stack_path: Path | None, flavour: str | None
) -> ProvenanceCheck:
    """An image build's statement (signature already checked): the image its tag names on this
    machine is the image it names (by image id, which covers every layer and the config with its
    labels), then the stack file and the lock."""
    named = subjects(found)
    if len(named) != 1:
        raise ProvenanceError(f"{envelope}: names {len(named)} subjects; an image build's provenance names its one image")
    [(tag, digest)] = named.items()
    if len(tag) > 300 or not OCI_REFERENCE.fullmatch(tag):
        raise ProvenanceError(f"{envelope}: its subject '{shown(tag)}' is not an image reference")
    if not SHA256_HEX.fullmatch(digest):
        raise ProvenanceError(f"{envelope}: the image id it names for {tag} is not a sha256 ('{shown(digest)}')")
    tools = member(found, "predicate", "runDetails", "builder", "version")
    current = _image_id(tag, tools if isinstance(tools, dict) else {})
    if current is None:
        raise ProvenanceError(
            f"{tag}: no such image on this machine; the provenance names image id {digest[:16]} "
            "(pull or load that image, then verify again)"
        )
    if current != digest:
        raise ProvenanceError(
            f"{tag}: is image {current[:16]} here, not the image {digest[:16]} the provenance names "
            "(rebuilt, changed or tagged again since the build)"
        )
    return _inputs(found, envelope, public_key, stack_path, flavour, ["signature", "the image"])


def _image_id(tag: str, tools: dict[str, Any]) -> str | None:
    """The image id (hex) of ``tag`` as the tool that built it reads it here; None where it has no such image."""
    if "docker-buildx" in tools:
        argv, key = ["docker", "image", "inspect", tag], "Id"
    else:
        driver = tools.get("storage-driver")
        argv = ["buildah", *(["--storage-driver", driver] if driver in STORAGE_DRIVERS else []), "inspect", "--type", "image", tag]
        key = "FromImageID"
    result = proc.run(argv, echo=False, timeout=120)
    if not result.ok:
        said = " ".join(result.stderr.split())
        if any(words in said.lower() for words in NOT_FOUND):
            return None
        raise ProvenanceError(f"{tag}: '{argv[0]} inspect' could not read the image: {shown(said, 200) or f'exit {result.returncode}'}")
    try:
        data = json.loads(result.stdout)
        value = (data[0] if isinstance(data, list) else data)[key]
    except (ValueError, LookupError, TypeError):
        raise ProvenanceError(f"{tag}: '{argv[0]} inspect' gave no image id") from None
    return str(value).removeprefix("sha256:")


def _parameters(found: dict[str, Any]) -> dict[str, Any]:
    parameters = member(found, "predicate", "buildDefinition", "externalParameters")
    return parameters if isinstance(parameters, dict) else {}


def _inputs(
    found: dict[str, Any], envelope: Path, public_key: Path, stack_path: Path | None, flavour: str | None, checked: list[str]
) -> ProvenanceCheck:
    """The flavour, the stack file and the flavour's lock the statement names, against those here."""
    signed_flavour = _parameters(found).get("flavour")
    if flavour is not None and signed_flavour != flavour:
        raise ProvenanceError(f"{envelope}: is the provenance of flavour {str(signed_flavour)[:100]}, not {flavour}")
    if stack_path is not None:
        _same(stack_path, dependency(found, "stack"), "the stack file")
        checked.append("the stack file")
        lock = dependency(found, "lock")
        if lock is not None:
            _same(lock_dir(stack_path) / "locks" / Path(lock[0]).name, lock, "the flavour's lock")
            checked.append("the lock")
    return ProvenanceCheck(
        envelope=str(envelope),
        public_key=str(public_key),
        flavour=signed_flavour if isinstance(signed_flavour, str) else None,
        checked=checked,
    )


def _same(path: Path, signed: tuple[str, str] | None, what: str) -> None:
    if signed is None:
        raise ProvenanceError(f"{path}: the provenance names no {what}")
    try:
        digest = sha256_file(path)
    except OSError as exc:
        raise ProvenanceError(f"{path}: {what} the provenance names cannot be read ({exc.strerror})") from None
    if digest != signed[1]:
        raise ProvenanceError(f"{path}: {what} differs from the one the provenance names (sha256 {digest[:16]} against {signed[1][:16]})")
