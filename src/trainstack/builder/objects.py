"""What a resumed extension build keeps of an earlier run (trainstack.builder.resume): only the
objects trainstack's own build wrote, each checked against a record made as it completed.

While ninja compiles in the kept folder, ``ObjectRecorder`` reads each build folder's .ninja_log
(a line per finished command) every half second and records each newly finished object: its
path below the source tree, sha256, size, mode and owner, and ninja's log line for it, beside
the sha256 of the build.ninja it was compiled by. The record (objects.json) is replaced as one
unit after each change, so a build killed at any point leaves the record of what it had
finished; an object finished after the last write is compiled again.

A resumed build starts from a fresh copy of the source, and ``carry`` moves into it from the
earlier tree only what the record vouches for, each file reached through no link: every
recorded object whose bytes, size, mode and owner still match; build.ninja when its sha256
matches; a .ninja_log written from the record's own lines; and .ninja_deps (header
dependencies, which decide only whether a unit compiles again, never what goes into the
wheel). Everything else under build/ (a planted or tampered object, a link, a linked module,
an object killed half way) stays behind and is removed with that tree, with one line saying
how many files were dropped and why. A record that cannot be read or parsed, another user's,
or one of another key or toolchain means a build from scratch.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from trainstack.fsutil import atomic_write_json, loads_strict, read_regular
from trainstack.grammar import shown

OBJECTS = "objects.json"
NINJA_FILE, NINJA_LOG, NINJA_DEPS = "build.ninja", ".ninja_log", ".ninja_deps"
POLL_SECONDS = 0.5
MAX_LISTED = 200_000  # files under build/ looked at one by one; the rest are dropped with the tree
_SHA256 = r"^[0-9a-f]{64}$"  # checked by pydantic (Rust regex: $ is the very end)
_PART = r"[^/\x00-\x1f\x7f]{1,255}"
_FOLDER = re.compile(rf"^build/{_PART}\Z")  # a build folder: build/temp.linux-x86_64-cpython-311
_OBJECT = re.compile(rf"^build/{_PART}(?:/{_PART}){{1,32}}\Z")  # a file below one
# ninja's log line: start and end (ms), the output's mtime, its path, the command's hash
_LOG_LINE = re.compile(r"^\d{1,20}\t\d{1,20}\t-?\d{1,20}\t([^\t\n]{1,4096})\t[0-9a-f]{1,32}$")  # fullmatch only


def _relative(value: str, pattern: re.Pattern[str]) -> str:
    if not pattern.fullmatch(value) or any(part in (".", "..") for part in value.split("/")):
        raise ValueError(f"'{shown(value)}' is not a path below build/ (no '.' or '..' parts, no control characters)")
    return value


class RecordedObject(BaseModel):
    """One object as the build wrote it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sha256: str = Field(pattern=_SHA256)
    size: int = Field(ge=0)
    mode: int = Field(ge=0, le=0o7777)
    uid: int = Field(ge=0)
    log: str = Field(pattern=_LOG_LINE.pattern)  # ninja's line for it, written back into .ninja_log


class RecordedFolder(BaseModel):
    """A build folder (build/temp.*): the build.ninja its objects were compiled by."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ninja_sha256: str = Field(pattern=_SHA256)
    log_header: str = Field(pattern=r"^# ninja log v\d{1,3}$")


class ObjectRecord(BaseModel):
    """objects.json: the key and toolchain of the kept folder, and what its build wrote."""

    model_config = ConfigDict(extra="forbid")

    key: dict[str, Any]
    toolchain: dict[str, str]
    folders: dict[str, RecordedFolder] = {}
    objects: dict[str, RecordedObject] = {}

    @field_validator("folders")
    @classmethod
    def _folder_names(cls, value: dict[str, RecordedFolder]) -> dict[str, RecordedFolder]:
        for name in value:
            _relative(name, _FOLDER)
        return value

    @field_validator("objects")
    @classmethod
    def _object_paths(cls, value: dict[str, RecordedObject]) -> dict[str, RecordedObject]:
        for path in value:
            _relative(path, _OBJECT)
        return value


def read_record(folder: Path, identity: Mapping[str, Any]) -> tuple[ObjectRecord | None, str]:
    """The object record of kept folder ``folder`` (an empty one when there is none), or None and
    why it cannot be trusted: unreadable, not parsing, another user's, another key's or toolchain's."""
    path = folder / OBJECTS
    try:
        data = read_regular(path, "object record", inside=folder, links=False)
        owner = os.stat(path, follow_symlinks=False).st_uid
    except FileNotFoundError:
        return ObjectRecord(key=dict(identity["key"]), toolchain=dict(identity["toolchain"])), ""
    except OSError as exc:
        return None, f"its object record cannot be read ({exc.strerror or exc})"
    if owner != os.getuid():
        return None, f"its object record belongs to another user (uid {owner})"
    try:
        record = ObjectRecord.model_validate(loads_strict(data.decode("utf-8")))
    except (ValueError, UnicodeDecodeError) as exc:
        return None, f"its object record does not parse ({shown(str(exc).splitlines()[0], 120)})"
    if record.key != identity["key"] or record.toolchain != identity["toolchain"]:
        return None, "its object record is of another key or toolchain"
    return record, ""


def _dir_below(root: Path, parts: list[str], *, create: bool = False) -> int:
    """A descriptor of the folder ``root``/``parts``, each part opened without following a link
    (OSError ELOOP or ENOTDIR at one); ``create``: made where missing."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(root, flags)
    try:
        for part in parts:
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            inner = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _fingerprint(dir_fd: int, name: str) -> tuple[str, os.stat_result]:
    """sha256 and status of regular file ``name`` in ``dir_fd``, opened without following a link."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as reader:
        st = os.fstat(reader.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        digest = hashlib.sha256()
        while chunk := reader.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest(), st


def _file_digest(root: Path, rel: str) -> tuple[str, os.stat_result]:
    *parents, name = rel.split("/")
    dir_fd = _dir_below(root, parents)
    try:
        return _fingerprint(dir_fd, name)
    finally:
        os.close(dir_fd)


def _logged_path(source: Path, folder: str, logged: str) -> str | None:
    """The path below ``source`` of an output ninja logged (absolute, or relative to its build
    folder, where torch runs ninja); None for one outside the source's build/ tree."""
    base = os.path.abspath(source)
    path = os.path.normpath(logged if os.path.isabs(logged) else os.path.join(base, folder, logged))
    if not path.startswith(base + os.sep):
        return None
    rel = path[len(base) + 1 :]
    try:
        return _relative(rel, _OBJECT)
    except ValueError:
        return None


def _build_folders(source: Path) -> list[str]:
    """The build folders under ``source``/build/ (real folders, no link followed)."""
    try:
        fd = _dir_below(source, ["build"])
    except OSError:
        return []
    try:
        with os.scandir(fd) as entries:
            names = [e.name for e in entries if e.is_dir(follow_symlinks=False)]
    finally:
        os.close(fd)
    return sorted(f"build/{n}" for n in names if _FOLDER.fullmatch(f"build/{n}") and n not in (".", ".."))


class ObjectRecorder:
    """Keeps ``folder``/objects.json up to date with the objects ninja finishes under ``source``."""

    def __init__(self, folder: Path, source: Path, record: ObjectRecord) -> None:
        self.folder, self.source, self.record = folder, source, record

    def poll(self) -> None:
        """Record what ninja logged as finished since the last poll; write the record if it changed."""
        changed = False
        for folder in _build_folders(self.source):
            try:
                changed |= self._poll_folder(folder)
            except OSError:
                continue  # the build is changing the folder: the next poll looks again
        if changed:
            with suppress(OSError):  # unrecorded objects are only compiled again; the build itself goes on
                atomic_write_json(self.folder / OBJECTS, self.record.model_dump())

    def _poll_folder(self, folder: str) -> bool:
        ninja, _ = _file_digest(self.source, f"{folder}/{NINJA_FILE}")
        log = read_regular(self.source / folder / NINJA_LOG, "ninja log", inside=self.source, links=False)
        header, *lines = log.decode("utf-8", errors="replace").split("\n")
        if not re.fullmatch(r"# ninja log v\d{1,3}", header):
            return False
        latest: dict[str, str] = {}
        for line in lines[:-1]:  # the last piece is a line ninja is still writing (or empty)
            match = _LOG_LINE.fullmatch(line)
            rel = _logged_path(self.source, folder, match.group(1)) if match else None
            if rel is not None:
                latest[rel] = line  # a later line for the same output wins, as in ninja
        changed = False
        for rel, line in latest.items():
            known = self.record.objects.get(rel)
            if known is not None and known.log == line:
                continue
            try:
                digest, st = _file_digest(self.source, rel)
            except OSError:
                continue
            self.record.objects[rel] = RecordedObject(
                sha256=digest, size=st.st_size, mode=stat.S_IMODE(st.st_mode), uid=st.st_uid, log=line
            )
            changed = True
        recorded = RecordedFolder(ninja_sha256=ninja, log_header=header)
        if self.record.folders.get(folder) != recorded:
            self.record.folders[folder] = recorded
            changed = True
        return changed


@contextmanager
def recording(recorder: ObjectRecorder) -> Iterator[None]:
    """Polls ``recorder`` every POLL_SECONDS in a thread while the body runs, and once after it
    (an interrupted or failed compile included)."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(POLL_SECONDS):
            recorder.poll()

    thread = threading.Thread(target=loop, name="object-record", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        recorder.poll()


REASONS = {
    "differ": "whose bytes differ from the build's record",
    "owner": "whose owner or mode changed since it was recorded",
    "link": "reached through a link",
    "special": "of another kind than a regular file",
    "ninja": "of a build folder whose build.ninja is not the recorded one",
    "unrecorded": "that the build did not record as its own",
    "unmovable": "that could not be moved",
}


@dataclass
class Carried:
    """What ``carry`` moved into the fresh tree and what it left behind, by reason."""

    record: ObjectRecord
    dropped: dict[str, list[str]] = field(default_factory=dict)

    def drop(self, reason: str, rel: str) -> None:
        self.dropped.setdefault(reason, []).append(rel)

    def line(self, name: str) -> str | None:
        """One line saying how many files were dropped and why; None when none were."""
        total = sum(len(v) for v in self.dropped.values())
        if not total:
            return None
        parts = []
        for reason, paths in sorted(self.dropped.items(), key=lambda item: list(REASONS).index(item[0])):
            names = ", ".join(shown(p.rsplit("/", 1)[-1], 40) for p in sorted(paths)[:3])
            more = f", +{len(paths) - 3} more" if len(paths) > 3 else ""
            parts.append(f"{len(paths)} {REASONS[reason]} ({names}{more})")
        plural = "s" if total > 1 else ""
        return f"{name}: {total} file{plural} of the earlier run dropped, built again: {'; '.join(parts)}"


def _listing(source: Path) -> dict[str, str]:
    """Every entry below ``source``/build/ as 'file', 'link' or 'special' (folders are walked,
    links never followed), at most MAX_LISTED of them."""
    found: dict[str, str] = {}
    top = source / "build"
    if top.is_symlink():
        return {"build": "link"}
    pending = ["build"] if top.is_dir() else []
    while pending and len(found) < MAX_LISTED:
        rel = pending.pop()
        try:
            entries = list(os.scandir(source / rel))
        except OSError:
            continue
        for entry in entries:
            path = f"{rel}/{entry.name}"
            if entry.is_symlink():
                found[path] = "link"
            elif entry.is_dir(follow_symlinks=False):
                pending.append(path)
            else:
                found[path] = "file" if entry.is_file(follow_symlinks=False) else "special"
    return found


def carry(old: Path, new: Path, record: ObjectRecord) -> Carried:
    """Move into source tree ``new`` what ``record`` vouches for in the earlier tree ``old``, each
    file checked where it lands (what is checked is what is built on); the rest stays in ``old``
    (to be removed with it) or is removed from ``new``, counted by reason."""
    carried = Carried(ObjectRecord(key=record.key, toolchain=record.toolchain))
    uid = os.getuid()
    listing = _listing(old)
    for folder, kept in record.folders.items():  # first: a folder's objects count only under its build.ninja
        rel = f"{folder}/{NINJA_FILE}"
        if listing.get(rel) != "file":
            continue
        verdict = _take(old, new, rel, partial(_ninja_verdict, sha256=kept.ninja_sha256, uid=uid))
        if verdict:
            carried.drop(verdict, rel)
        else:
            carried.record.folders[folder] = kept
        del listing[rel]
    logs: dict[str, list[str]] = {}
    for rel, kind in sorted(listing.items()):
        folder, _, name = rel.rpartition("/")
        top = "/".join(rel.split("/")[:2])
        if kind != "file":
            carried.drop(kind, rel)
        elif name == NINJA_LOG and folder in record.folders:
            continue  # written afresh from the record's lines
        elif rel not in record.objects and not (name == NINJA_DEPS and folder in record.folders):
            carried.drop("unrecorded", rel)
        elif top not in carried.record.folders:
            carried.drop("ninja", rel)
        elif name == NINJA_DEPS and rel not in record.objects:
            verdict = _take(old, new, rel, partial(_owner_verdict, uid=uid))
            if verdict:
                carried.drop(verdict, rel)
        else:
            recorded = record.objects[rel]
            verdict = _take(old, new, rel, partial(_verdict, recorded=recorded, uid=uid))
            if verdict:
                carried.drop(verdict, rel)
            else:
                carried.record.objects[rel] = recorded
                logs.setdefault(top, []).append(recorded.log)
    for folder in carried.record.folders:
        lines = sorted(logs.get(folder, []), key=lambda line: int(line.split("\t", 1)[0]))
        _write_log(new, folder, [record.folders[folder].log_header, *lines])
    return carried


def _ninja_verdict(digest: str, st: os.stat_result, *, sha256: str, uid: int) -> str:
    """'' when a folder's build.ninja is the one recorded, made by this user; else 'ninja'."""
    return "" if digest == sha256 and st.st_uid == uid else "ninja"


def _owner_verdict(digest: str, st: os.stat_result, *, uid: int) -> str:
    """'' when a file is this user's; else 'owner'."""
    return "" if st.st_uid == uid else "owner"


def _verdict(digest: str, st: os.stat_result, *, recorded: RecordedObject, uid: int) -> str:
    """'' when an object is the one recorded; else the reason to drop it."""
    if digest != recorded.sha256 or st.st_size != recorded.size:
        return "differ"
    same = st.st_uid == recorded.uid == uid and stat.S_IMODE(st.st_mode) == recorded.mode
    return "" if same else "owner"


def _take(old: Path, new: Path, rel: str, judge: Callable[[str, os.stat_result], str]) -> str:
    """Rename ``rel`` from tree ``old`` into tree ``new`` through no link, then hash it there:
    '' when ``judge`` accepts it, else the reason it gives ('link', 'special' for what is no
    regular file), the file then removed from ``new``."""
    *parents, name = rel.split("/")
    try:
        src_fd = _dir_below(old, parents)
    except OSError:
        return "link"
    try:
        dst_fd = _dir_below(new, parents, create=True)
    except OSError:
        os.close(src_fd)
        return "link"  # the fresh source holds a link where the build folder goes
    try:
        try:
            os.rename(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
        except OSError:
            return "unmovable"
        try:
            digest, st = _fingerprint(dst_fd, name)
            verdict = judge(digest, st)
        except OSError as exc:
            verdict = "link" if exc.errno == errno.ELOOP else "special"
        if verdict:
            os.unlink(name, dir_fd=dst_fd)
        return verdict
    finally:
        os.close(dst_fd)
        os.close(src_fd)


def _write_log(new: Path, folder: str, lines: list[str]) -> None:
    dir_fd = _dir_below(new, folder.split("/"), create=True)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        with os.fdopen(os.open(NINJA_LOG, flags, 0o644, dir_fd=dir_fd), "w", encoding="utf-8") as writer:
            writer.write("\n".join(lines) + "\n")
    finally:
        os.close(dir_fd)
