"""Requirements lock files (uv pip compile --generate-hashes output): split, filter, join.

Pure text handling, so a layer's lock can be derived from the flavour's full lock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.utils import canonicalize_name

_NAME_RE = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)")


@dataclass(frozen=True)
class LockEntry:
    name: str  # canonical
    text: str  # the requirement line with its continuation lines (hashes), newline-terminated
    version: str | None  # pinned version, None for a direct URL (git, file)

    @property
    def is_direct(self) -> bool:
        return self.version is None


@dataclass(frozen=True)
class LockFile:
    options: tuple[str, ...]  # --index-url, --extra-index-url, --find-links lines
    entries: tuple[LockEntry, ...]

    def names(self) -> set[str]:
        return {e.name for e in self.entries}

    def get(self, name: str) -> LockEntry | None:
        key = canonicalize_name(name)
        return next((e for e in self.entries if e.name == key), None)

    def without(self, names: set[str]) -> LockFile:
        keys = {canonicalize_name(n) for n in names}
        return LockFile(self.options, tuple(e for e in self.entries if e.name not in keys))

    def only(self, names: set[str]) -> LockFile:
        keys = {canonicalize_name(n) for n in names}
        return LockFile(self.options, tuple(e for e in self.entries if e.name in keys))

    def text(self) -> str:
        head = "".join(f"{o}\n" for o in self.options)
        return head + "".join(e.text for e in self.entries)


def parse_lock(text: str) -> LockFile:
    """Entries in file order; comments (``# via``) dropped, option lines kept. Lines end at "\\n"
    alone, as lock.manifest.check_lock_text reads them (a control character stays inside its line)."""
    options: list[str] = []
    blocks: list[list[str]] = []
    for raw in text.split("\n"):
        line = raw.rstrip(" ")
        stripped = line.strip(" ")
        if not stripped or stripped.startswith("#"):
            continue
        if line.startswith("--"):
            options.append(stripped)
        elif line[0] == " " and blocks:
            blocks[-1].append(line)
        else:
            blocks.append([line])
    return LockFile(tuple(options), tuple(_entry(block) for block in blocks))


def _entry(block: list[str]) -> LockEntry:
    first = block[0].split(";", 1)[0].rstrip(" \\")
    match = _NAME_RE.match(first)
    name = canonicalize_name(match.group(1)) if match else first
    version = first.split("==", 1)[1].strip() if "==" in first and " @ " not in first else None
    return LockEntry(name, "\n".join(block) + "\n", version)


def hashes(entry: LockEntry) -> list[str]:
    """The sha256 digests listed for an entry (hex, without the 'sha256:' prefix)."""
    return re.findall(r"--hash=sha256:([0-9a-f]{64})", entry.text)
