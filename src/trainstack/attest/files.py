"""Every file of an environment with its sha256, recorded when it is built (files.json beside
build.json), and what changed since: a distribution replaced, modified, added or removed after
the build, and files outside any distribution changed, added or removed.

Without a build record, each distribution's own RECORD (the wheel's list of its files with their
hashes) is the basis: a file that differs from its RECORD is named."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from typing import Literal

from packaging.utils import canonicalize_name
from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1
SKIPPED_DIRS = frozenset({"__pycache__"})  # bytecode an interpreter writes as it imports
SBOM_NAME = "sbom.cdx.json"  # written into the environment after its files are recorded
EXAMPLES = 20  # paths listed per kind of change; the count says how many there are
CHUNK = 1 << 20


class FilesRecord(BaseModel):
    """files.json: what a build installed, file by file."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    distributions: dict[str, str]  # canonical name -> version
    files: dict[str, tuple[str, str]]  # path relative to the environment -> (sha256 or 'link:TARGET', owner or '')

    def digest(self) -> str:
        """One sha256 over every path and hash: what provenance names the environment by."""
        h = hashlib.sha256()
        for path in sorted(self.files):
            h.update(f"{path}\0{self.files[path][0]}\n".encode("utf-8", "surrogateescape"))
        return h.hexdigest()


class DistributionChange(BaseModel):
    name: str
    change: Literal["replaced", "modified", "added", "removed"]
    built: str | None  # the version the build installed (None: not installed by the build)
    installed: str | None  # the version there now (None: gone)
    files: int  # its files changed, added or removed
    example: str = ""  # one of them


class FileDrift(BaseModel):
    basis: Literal["build record", "RECORD"]  # what the installed files were compared with
    record: str | None = None  # files.json, when that was the basis
    checked: int  # files compared
    distributions: list[DistributionChange] = []
    changed: list[str] = []  # files of no distribution (first EXAMPLES of each)
    added: list[str] = []
    removed: list[str] = []
    unowned: dict[str, int] = Field(default_factory=dict)  # 'changed'/'added'/'removed' -> how many in all

    @property
    def reasons(self) -> list[str]:
        """One line per finding: what verify fails on."""
        lines = []
        basis = "the build" if self.basis == "build record" else "its RECORD"
        for d in self.distributions:
            what = {
                "replaced": f"{d.name} {d.built} was replaced by {d.installed} after the build",
                "modified": f"{d.name} {d.built}: {d.files} file(s) differ from {basis}, e.g. {d.example}",
                "added": f"{d.name} {d.installed} was installed after the build (not in the build)",
                "removed": f"{d.name} {d.built} was removed after the build",
            }[d.change]
            lines.append(f"files: {what}")
        for kind in ("changed", "added", "removed"):
            count = self.unowned.get(kind, 0)
            if count:
                shown = getattr(self, kind)[:3]
                more = f" and {count - len(shown)} more" if count > len(shown) else ""
                lines.append(f"files: {count} file(s) of no distribution {kind} since the build: {', '.join(shown)}{more}")
        return lines


@dataclass(frozen=True)
class Installed:
    """A distribution found in a site directory: its name, version and RECORD rows."""

    name: str
    version: str
    record: tuple[tuple[str, str], ...]  # (path relative to the environment, 'sha256=<urlsafe b64>' or '')


def file_hash(path: Path) -> str:
    if path.is_symlink():
        return f"link:{os.readlink(path)}"
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def site_dirs(root: Path) -> list[Path]:
    """A venv's site-packages (lib/pythonX.Y/site-packages)."""
    return sorted(p for p in (root / "lib").glob("python*/site-packages") if p.is_dir() and not p.is_symlink())


def installed_distributions(root: Path, sites: list[Path]) -> dict[str, Installed]:
    found: dict[str, Installed] = {}
    for site in sites:
        for info in sorted(site.glob("*.dist-info")):
            meta = info / "METADATA"
            if not meta.is_file():
                continue
            headers = HeaderParser().parsestr(meta.read_text(encoding="utf-8", errors="replace"), headersonly=True)
            name, version = headers.get("Name"), headers.get("Version")
            if not name or not version:
                continue
            found[canonicalize_name(name)] = Installed(canonicalize_name(name), version.strip(), _record(root, site, info))
    return found


def _record(root: Path, site: Path, info: Path) -> tuple[tuple[str, str], ...]:
    path = info / "RECORD"
    if not path.is_file():
        return ()
    rows = []
    for row in csv.reader(io.StringIO(path.read_text(encoding="utf-8", errors="replace"))):
        if not row or not row[0]:
            continue
        full = os.path.normpath(site / row[0])
        try:
            relative = os.path.relpath(full, root)
        except ValueError:
            continue
        if relative.startswith(".."):
            continue  # outside the environment: not its file
        rows.append((relative, row[1] if len(row) > 1 else ""))
    return tuple(rows)


def walk(root: Path) -> list[str]:
    """Every file and link under ``root`` (relative paths), bytecode caches and the SBOM left out."""
    found = []
    for folder, dirs, names in os.walk(root):
        here = Path(folder)
        keep = []
        for d in dirs:
            if d in SKIPPED_DIRS:
                continue
            if (here / d).is_symlink():
                names.append(d)  # a link to a folder (lib64 -> lib) is recorded as a link
            else:
                keep.append(d)
        dirs[:] = sorted(keep)
        for name in names:
            relative = os.path.relpath(here / name, root)
            if relative != SBOM_NAME:
                found.append(relative)
    return sorted(found)


def snapshot(root: Path) -> FilesRecord:
    """Every file of the environment at ``root`` with its hash and owning distribution."""
    dists = installed_distributions(root, site_dirs(root))
    owner = {path: d.name for d in dists.values() for path, _ in d.record}
    paths = walk(root)
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:  # hashlib lets go of the GIL
        digests = list(pool.map(lambda path: file_hash(root / path), paths))
    files = {path: (digest, owner.get(path, "")) for path, digest in zip(paths, digests)}
    return FilesRecord(distributions={d.name: d.version for d in dists.values()}, files=files)


def compare(record: FilesRecord, root: Path, record_path: Path | None = None) -> FileDrift:
    """What changed in the environment at ``root`` since ``record`` was made."""
    now = snapshot(root)
    built, installed = record.distributions, now.distributions
    per_dist: dict[str, list[str]] = {}
    unowned: dict[str, list[str]] = {"changed": [], "added": [], "removed": []}
    for path in sorted(set(record.files) | set(now.files)):
        before, after = record.files.get(path), now.files.get(path)
        if before is not None and after is not None and before[0] == after[0]:
            continue
        owner = (before[1] if before else "") or (after[1] if after else "")
        kind = "changed" if before and after else "added" if after else "removed"
        if owner:
            per_dist.setdefault(owner, []).append(path)
        else:
            unowned[kind].append(path)
    changes = []
    for name in sorted(set(built) | set(installed) | set(per_dist)):
        paths = per_dist.get(name, [])
        was, is_ = built.get(name), installed.get(name)
        if was is None and is_ is None:
            continue
        change: Literal["replaced", "modified", "added", "removed"] | None
        change = "added" if was is None else "removed" if is_ is None else "replaced" if was != is_ else "modified" if paths else None
        if change is not None:
            changes.append(
                DistributionChange(name=name, change=change, built=was, installed=is_, files=len(paths), example=paths[0] if paths else "")
            )
    return FileDrift(
        basis="build record",
        record=str(record_path) if record_path else None,
        checked=len(now.files),
        distributions=changes,
        unowned={k: len(v) for k, v in unowned.items() if v},
        **{k: v[:EXAMPLES] for k, v in unowned.items()},
    )


def against_record_files(root: Path, sites: list[Path]) -> FileDrift:
    """Without a build record: each distribution's files against the hashes its RECORD lists."""
    changes, checked = [], 0
    for dist in installed_distributions(root, sites).values():
        differ = []
        for path, expected in dist.record:
            if not expected.startswith("sha256="):
                continue
            checked += 1
            full = root / path
            if not full.is_file():
                differ.append(path)
                continue
            digest = bytes.fromhex(file_hash(full))
            if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != expected.removeprefix("sha256="):
                differ.append(path)
        if differ:
            changes.append(
                DistributionChange(
                    name=dist.name, change="modified", built=dist.version, installed=dist.version, files=len(differ), example=differ[0]
                )
            )
    return FileDrift(basis="RECORD", checked=checked, distributions=changes)
