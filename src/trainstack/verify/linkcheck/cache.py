"""What each ELF file's dynamic section and strings held, keyed by the file's identity
(device, inode, size, mtime). Wheels are installed as hardlinks or copies of uv's cache,
so a rebuilt or second environment mostly re-checks files already read once."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

from trainstack.fsutil import atomic_write_text
from trainstack.verify.linkcheck.elf import ElfInfo

VERSION = 2  # 2: counts bounded by the file size, control characters in dynamic strings refused


def cache_file() -> Path:
    base = os.environ.get("TRAINSTACK_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "trainstack"
    )
    return Path(base) / f"linkcheck-v{VERSION}.json"


def identity(path: str) -> str | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


class ElfCache:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or cache_file()
        self.entries: dict[str, dict] = {}
        self.dirty = False
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if data.get("version") == VERSION:
                self.entries = data["entries"]
        except (OSError, ValueError, KeyError, AttributeError):
            self.entries = {}  # a missing or damaged cache is only slower

    def get(self, path: str, scan_strings: bool) -> ElfInfo | None:
        key = identity(path)
        entry = self.entries.get(key) if key else None
        if entry is None or (scan_strings and not entry.get("scanned")):
            return None
        fields = {k: v for k, v in entry.items() if k != "scanned"}
        return ElfInfo(**{**fields, "path": path})

    def put(self, info: ElfInfo, scan_strings: bool) -> None:
        key = identity(info.path)
        if key is None or info.error:
            return
        self.entries[key] = {**asdict(info), "scanned": scan_strings}
        self.dirty = True

    def save(self) -> None:
        if not self.dirty:
            return
        try:
            atomic_write_text(self.path, json.dumps({"version": VERSION, "entries": self.entries}))
        except OSError:
            return  # a read-only home only costs speed: the next run reads the files again
