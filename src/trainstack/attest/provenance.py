"""Build provenance: an in-toto Statement (v1) with a SLSA v1 provenance predicate per build,
signed in a DSSE envelope with the user's ed25519 key (securesystemslib; no network, no keyless
service), and its check: the signature, then every digest it names against the files as they are.

The private key is read from the file the user names, only when that file is readable by its owner
alone (as ssh requires), and is never written anywhere."""

from __future__ import annotations

import hashlib
import json
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainstack.errors import ProvenanceError, UsageError
from trainstack.extras import require
from trainstack.fsutil import loads_strict

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
BUILD_TYPE = "urn:trainstack:build:v1"
BUILDER_ID = "urn:trainstack:builder"
PROVENANCE_NAME = "provenance.intoto.json"  # beside build.json
MAX_ENVELOPE_BYTES = 4 * 1024 * 1024
MAX_KEY_BYTES = 64 * 1024


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class BuildFacts:
    """What a statement says of one build."""

    subjects: dict[str, str]  # name -> sha256: the environment (its files' digest) or the image, the SBOM
    stack_name: str  # the stack file's name
    stack_sha256: str
    lock_file: str  # the flavour's lock, relative to the lock folder
    lock_sha256: str
    manifest_sha256: str  # stack.lock.json
    flavour: str
    backend: str
    skip_sources: bool
    build_settings: dict[str, str]
    base_image: str
    tools: dict[str, str]
    started: str
    finished: str
    byproducts: dict[str, str]  # build.json, files.json -> sha256


def statement(facts: BuildFacts) -> dict[str, Any]:
    dependencies = [
        {"name": facts.stack_name, "digest": {"sha256": facts.stack_sha256}, "annotations": {"role": "stack"}},
        {"name": f"locks/{Path(facts.lock_file).name}", "digest": {"sha256": facts.lock_sha256}, "annotations": {"role": "lock"}},
        {"name": "stack.lock.json", "digest": {"sha256": facts.manifest_sha256}, "annotations": {"role": "lock manifest"}},
    ]
    if facts.base_image:
        dependencies.append({"name": facts.base_image, "annotations": {"role": "base image"}})
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": digest}} for name, digest in sorted(facts.subjects.items())],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {
                    "stack": facts.stack_name,
                    "flavour": facts.flavour,
                    "backend": facts.backend,
                    "skip_sources": facts.skip_sources,
                },
                "internalParameters": {"build_settings": facts.build_settings},
                "resolvedDependencies": dependencies,
            },
            "runDetails": {
                "builder": {"id": BUILDER_ID, "version": facts.tools},
                "metadata": {"startedOn": facts.started, "finishedOn": facts.finished},
                "byproducts": [{"name": n, "digest": {"sha256": d}} for n, d in sorted(facts.byproducts.items())],
            },
        },
    }


def _need_extra() -> None:
    require("securesystemslib", "signed provenance")
    require("cryptography", "signed provenance")


def load_signer(path: Path) -> Any:
    """A CryptoSigner over the ed25519 private key in ``path`` (PEM, unencrypted); UsageError in one
    line for a missing file, one readable by others, or anything but an ed25519 private key."""
    _need_extra()
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key
    from securesystemslib.signer import CryptoSigner

    data = _read_key(path, "--signing-key", private=True)
    try:
        key = load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise UsageError(
            f"{path}: --signing-key: not an unencrypted PEM private key ({_first(exc)})",
            hint="make one with: openssl genpkey -algorithm ed25519 -out KEY && chmod 600 KEY",
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise UsageError(f"{path}: --signing-key: a {type(key).__name__.removeprefix('_')} key; accepted: an ed25519 private key")
    return CryptoSigner(key)


def load_public_key(path: Path) -> Any:
    _need_extra()
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_pem_public_key
    from securesystemslib.signer import SSlibKey

    data = _read_key(path, "--public-key", private=False)
    try:
        key = load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise UsageError(
            f"{path}: --public-key: not a PEM public key ({_first(exc)})", hint="derive it with: openssl pkey -in KEY -pubout -out KEY.pub"
        ) from None
    if not isinstance(key, Ed25519PublicKey):
        raise UsageError(f"{path}: --public-key: not an ed25519 public key")
    return SSlibKey.from_crypto(key)


def _read_key(path: Path, option: str, *, private: bool) -> bytes:
    try:
        info = path.stat()
    except OSError as exc:
        raise UsageError(f"{path}: {option}: {exc.strerror.lower() if exc.strerror else exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{path}: {option}: not a regular file")
    if private and info.st_mode & 0o077:
        raise UsageError(
            f"{path}: {option}: permissions {stat.S_IMODE(info.st_mode):04o} are too open: a private key "
            f"must be readable by its owner alone",
            hint=f"chmod 600 {path}",
        )
    if info.st_size > MAX_KEY_BYTES:
        raise UsageError(f"{path}: {option}: larger than {MAX_KEY_BYTES // 1024} KiB: not a key")
    return path.read_bytes()


def sign(facts: BuildFacts, signer: Any) -> str:
    """The DSSE envelope (JSON) of the statement, signed."""
    from securesystemslib.dsse import Envelope

    payload = json.dumps(statement(facts), sort_keys=True, separators=(",", ":")).encode()
    envelope = Envelope(payload=payload, payload_type=PAYLOAD_TYPE, signatures={})
    envelope.sign(signer)
    return json.dumps(envelope.to_dict(), indent=2, sort_keys=True) + "\n"


def open_envelope(path: Path, key: Any) -> dict[str, Any]:
    """The statement of the envelope at ``path`` once its signature verifies with ``key``;
    ProvenanceError in one line naming what does not hold."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import VerificationError

    try:
        size = path.stat().st_size
    except OSError as exc:
        raise UsageError(f"{path}: --provenance: {exc.strerror.lower() if exc.strerror else exc}") from None
    if size > MAX_ENVELOPE_BYTES:
        raise ProvenanceError(f"{path}: larger than {MAX_ENVELOPE_BYTES // 2**20} MiB: not a provenance envelope")
    try:
        envelope = Envelope.from_dict(loads_strict(path.read_bytes()))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ProvenanceError(f"{path}: not a DSSE envelope ({_first(exc)})") from None
    if envelope.payload_type != PAYLOAD_TYPE:
        raise ProvenanceError(f"{path}: payloadType is '{envelope.payload_type[:80]}'; accepted: {PAYLOAD_TYPE}")
    try:
        envelope.verify([key], 1)
    except VerificationError:
        raise ProvenanceError(
            f"{path}: the signature does not verify with the public key given: the statement was "
            "changed after signing, or signed with another key"
        ) from None
    try:
        found = json.loads(envelope.payload)
    except ValueError:
        raise ProvenanceError(f"{path}: the signed payload is not JSON") from None
    if not isinstance(found, dict) or found.get("_type") != STATEMENT_TYPE or found.get("predicateType") != PREDICATE_TYPE:
        raise ProvenanceError(f"{path}: the payload is not an in-toto statement with a SLSA v1 provenance predicate")
    return found


def member(value: Any, *keys: str) -> Any:
    """value[k1][k2]...; {} where a level is missing or not an object (a statement is read as found)."""
    for key in keys:
        value = value.get(key, {}) if isinstance(value, dict) else {}
    return value


def subjects(found: dict[str, Any]) -> dict[str, str]:
    listed = found.get("subject", [])
    return {
        str(s.get("name", "")): str(member(s, "digest", "sha256") or "")
        for s in (listed if isinstance(listed, list) else [])
        if isinstance(s, dict)
    }


def dependency(found: dict[str, Any], role: str) -> tuple[str, str] | None:
    """(name, sha256) of the resolved dependency of that role."""
    listed = member(found, "predicate", "buildDefinition", "resolvedDependencies")
    for dep in listed if isinstance(listed, list) else []:
        if isinstance(dep, dict) and member(dep, "annotations", "role") == role:
            return str(dep.get("name", "")), str(member(dep, "digest", "sha256") or "")
    return None


def _first(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:120] or type(exc).__name__
