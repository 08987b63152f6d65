"""verify --provenance: the signed statement of a build checked against what is there now: its
signature with the public key given, the environment's files and SBOM it names, the stack file, the
flavour's lock and the flavour itself. The first that does not hold is one line naming it."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from trainstack.attest.files import SBOM_NAME, snapshot
from trainstack.attest.provenance import dependency, load_public_key, open_envelope, sha256_file, subjects
from trainstack.errors import ProvenanceError, UsageError
from trainstack.lock.manifest import lock_dir
from trainstack.verify.target import Target


class ProvenanceCheck(BaseModel):
    envelope: str
    public_key: str
    flavour: str | None
    checked: list[str]  # what was compared, in words


def check_provenance(envelope: Path, public_key: Path, target: Target, stack_path: Path | None,
                     flavour: str | None) -> ProvenanceCheck:
    found = open_envelope(envelope, load_public_key(public_key))
    named = subjects(found)
    checked = ["signature"]
    if "venv" not in named:
        raise UsageError(f"{envelope}: names {', '.join(sorted(named))[:200]}, not a venv: verify checks an environment",
                         hint="an image's provenance names its image id: compare it with 'buildah inspect'")
    if not target.is_venv:
        raise ProvenanceError(f"{envelope}: names a venv, and {target.python} is not one")
    digest = snapshot(target.prefix).digest()
    if digest != named["venv"]:
        raise ProvenanceError(f"{target.prefix}: the environment's files differ from those the provenance names "
                              f"(sha256 {digest[:16]} against {named['venv'][:16]}): changed since the build "
                              "(verify's files part names which)")
    checked.append("the environment's files")
    sbom = target.prefix / SBOM_NAME
    if SBOM_NAME in named:
        if not sbom.is_file() or sha256_file(sbom) != named[SBOM_NAME]:
            raise ProvenanceError(f"{sbom}: differs from the SBOM the provenance names, or is missing")
        checked.append("the SBOM")
    parameters = found.get("predicate", {}).get("buildDefinition", {}).get("externalParameters", {})
    signed_flavour = parameters.get("flavour") if isinstance(parameters, dict) else None
    if flavour is not None and signed_flavour != flavour:
        raise ProvenanceError(f"{envelope}: is the provenance of flavour {str(signed_flavour)[:100]}, not {flavour}")
    if stack_path is not None:
        _same(stack_path, dependency(found, "stack"), "the stack file")
        checked.append("the stack file")
        lock = dependency(found, "lock")
        if lock is not None:
            _same(lock_dir(stack_path) / "locks" / Path(lock[0]).name, lock, "the flavour's lock")
            checked.append("the lock")
    return ProvenanceCheck(envelope=str(envelope), public_key=str(public_key), flavour=signed_flavour, checked=checked)


def _same(path: Path, signed: tuple[str, str] | None, what: str) -> None:
    if signed is None:
        raise ProvenanceError(f"{path}: the provenance names no {what}")
    try:
        digest = sha256_file(path)
    except OSError as exc:
        raise ProvenanceError(f"{path}: {what} the provenance names cannot be read ({exc.strerror})") from None
    if digest != signed[1]:
        raise ProvenanceError(f"{path}: {what} differs from the one the provenance names "
                              f"(sha256 {digest[:16]} against {signed[1][:16]})")
