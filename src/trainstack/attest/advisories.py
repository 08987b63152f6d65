"""OSV advisories (the format osv.dev publishes per ecosystem, one JSON file per advisory) read
offline from a folder, and the ones that affect a lock's pinned PyPI packages.

Every file is untrusted input: a regular file of at most MAX_FILE_BYTES (no link followed), JSON
nested at most MAX_DEPTH deep, every field this module reads validated; a malformed one is one
error line naming the file and the field."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

from trainstack.errors import SpecError
from trainstack.fsutil import read_regular

MAX_FILE_BYTES = 1024 * 1024
MAX_FILES = 100_000
MAX_DEPTH = 16
SEVERITIES = ("low", "medium", "high", "critical")
Severity = Literal["unknown", "low", "medium", "high", "critical"]
# GitHub's words (database_specific.severity) -> ours
_WORDS = {"LOW": "low", "MODERATE": "medium", "MEDIUM": "medium", "HIGH": "high", "CRITICAL": "critical"}

Text = Annotated[str, StringConstraints(max_length=1000)]
Id = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$")]


class _Open(BaseModel):
    model_config = ConfigDict(extra="ignore")  # OSV has fields this module does not read


class Event(_Open):
    introduced: Annotated[str, StringConstraints(max_length=100)] | None = None
    fixed: Annotated[str, StringConstraints(max_length=100)] | None = None
    last_affected: Annotated[str, StringConstraints(max_length=100)] | None = None
    limit: Annotated[str, StringConstraints(max_length=100)] | None = None


class Range(_Open):
    type: Literal["ECOSYSTEM", "SEMVER", "GIT"]
    events: Annotated[list[Event], Field(max_length=1000)]


class Package(_Open):
    ecosystem: Annotated[str, StringConstraints(max_length=100)]
    name: Annotated[str, StringConstraints(max_length=200)]


class Affected(_Open):
    package: Package | None = None
    ranges: Annotated[list[Range], Field(max_length=100)] = []
    versions: Annotated[list[Annotated[str, StringConstraints(max_length=100)]], Field(max_length=10000)] = []


class SeverityScore(_Open):
    type: Annotated[str, StringConstraints(max_length=50)]
    score: Annotated[str, StringConstraints(max_length=200)]


class Advisory(_Open):
    id: Id
    modified: Annotated[str, StringConstraints(max_length=50)]
    withdrawn: Annotated[str, StringConstraints(max_length=50)] | None = None
    aliases: Annotated[list[Id], Field(max_length=100)] = []
    summary: Text = ""
    severity: Annotated[list[SeverityScore], Field(max_length=20)] = []
    affected: Annotated[list[Affected], Field(max_length=1000)] = []
    database_specific: dict[str, object] | None = None

    @field_validator("summary")
    @classmethod
    def _one_line(cls, value: str) -> str:
        return " ".join(value.split())

    @property
    def level(self) -> Severity:
        """The advisory's severity as its database words it (GitHub's database_specific.severity);
        'unknown' where the record gives none."""
        word = (self.database_specific or {}).get("severity")
        return _WORDS.get(word.upper(), "unknown") if isinstance(word, str) else "unknown"  # type: ignore[return-value]  # _WORDS maps to SEVERITIES' words only


class Finding(BaseModel):
    """One advisory that affects one locked package of one flavour."""

    id: str
    aliases: list[str]
    package: str
    version: str
    severity: Severity
    summary: str
    fixed: list[str]  # the versions its ranges name as fixed


def load_advisories(folder: Path) -> list[Advisory]:
    """Every *.json advisory of ``folder`` (recursively; links are not followed), validated."""
    if not folder.is_dir():
        raise SpecError(f"{folder}: not a folder of OSV advisories", hint="unpack osv.dev's PyPI export (all.zip) into a folder")
    found: list[Advisory] = []
    count = 0
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not (Path(root) / d).is_symlink())
        for name in sorted(names):
            if not name.endswith(".json"):
                continue
            count += 1
            if count > MAX_FILES:
                raise SpecError(f"{folder}: more than {MAX_FILES} advisory files")
            advisory = load_advisory(Path(root) / name, folder)
            if advisory.withdrawn is None:
                found.append(advisory)
    return found


def load_advisory(path: Path, folder: Path) -> Advisory:
    try:
        data = read_regular(path, "OSV advisory (JSON)", inside=folder, links=False, limit=MAX_FILE_BYTES)
    except OSError as exc:
        raise SpecError(f"{path}: {exc.strerror or exc}") from None
    try:
        parsed = json.loads(data)
    except RecursionError:
        raise SpecError(f"{path}: nested deeper than {MAX_DEPTH} levels; not an OSV advisory") from None
    except ValueError as exc:
        raise SpecError(f"{path}: not JSON ({' '.join(str(exc).split())[:120]})") from None
    if _depth(parsed) > MAX_DEPTH:
        raise SpecError(f"{path}: nested deeper than {MAX_DEPTH} levels; not an OSV advisory")
    try:
        advisory = Advisory.model_validate(parsed)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top)"
        raise SpecError(f"{path}: {where}: {first['msg']}", hint="an OSV record (https://ossf.github.io/osv-schema/)") from None
    for i, affected in enumerate(advisory.affected):
        for j, rng in enumerate(affected.ranges):
            for k, event in enumerate(rng.events):
                for key in ("introduced", "fixed", "last_affected", "limit"):
                    value = getattr(event, key)
                    if rng.type == "ECOSYSTEM" and value is not None and value != "0" and _version(value) is None:
                        raise SpecError(f"{path}: affected.{i}.ranges.{j}.events.{k}.{key}: '{value[:50]}' is not a PEP 440 version")
    return advisory


def _depth(value: object, level: int = 1) -> int:
    if level > MAX_DEPTH:
        return level
    if isinstance(value, dict):
        return max((_depth(v, level + 1) for v in value.values()), default=level)
    if isinstance(value, list):
        return max((_depth(v, level + 1) for v in value), default=level)
    return level


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def affects(affected: Affected, version: str) -> bool:
    """Whether ``version`` is in the listed versions or an ECOSYSTEM range (OSV's evaluation)."""
    if version in affected.versions:
        return True
    have = _version(version)
    if have is None:
        return False
    for rng in affected.ranges:
        if rng.type != "ECOSYSTEM":
            continue
        inside = False
        for event in sorted(rng.events, key=_event_order):
            if event.introduced is not None and (event.introduced == "0" or have >= Version(event.introduced)):
                inside = True
            elif event.fixed is not None and have >= Version(event.fixed):
                inside = False
            elif event.last_affected is not None and have > Version(event.last_affected):
                inside = False
        if inside:
            return True
    return False


def _event_order(event: Event) -> tuple[Version, int]:
    text = event.introduced or event.fixed or event.last_affected or event.limit or "0"
    return (Version("0") if text == "0" else Version(text), 0 if event.introduced is not None else 1)


def findings(advisories: list[Advisory], packages: Mapping[str, str]) -> list[Finding]:
    """The advisories that affect ``packages`` (canonical name -> pinned version), by package and id."""
    wanted = {canonicalize_name(k): v for k, v in packages.items()}
    found = []
    for adv in advisories:
        for affected in adv.affected:
            pkg = affected.package
            if pkg is None or pkg.ecosystem != "PyPI":
                continue
            name = canonicalize_name(pkg.name)
            version = wanted.get(name)
            if version is None or not affects(affected, version):
                continue
            fixed = sorted({e.fixed for r in affected.ranges if r.type == "ECOSYSTEM" for e in r.events if e.fixed}, key=_sort_key)
            found.append(
                Finding(
                    id=adv.id,
                    aliases=sorted(adv.aliases),
                    package=name,
                    version=version,
                    severity=adv.level,
                    summary=adv.summary,
                    fixed=fixed,
                )
            )
    unique = {(f.package, f.id): f for f in found}  # an advisory with two entries for one package counts once
    return [unique[k] for k in sorted(unique)]


def _sort_key(text: str) -> tuple[int, Version | str]:
    parsed = _version(text)
    return (0, parsed) if parsed is not None else (1, text)


def above(found: list[Finding], highest_accepted: str) -> list[Finding]:
    """The findings more severe than ``highest_accepted`` (one of SEVERITIES); 'unknown' never is."""
    limit = SEVERITIES.index(highest_accepted)
    return [f for f in found if f.severity in SEVERITIES and SEVERITIES.index(f.severity) > limit]
