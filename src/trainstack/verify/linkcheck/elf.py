"""Read what the loader needs from one ELF file: class, machine, SONAME, NEEDED, RPATH,
RUNPATH, and the shared-library names in its read-only data (dlopen candidates)."""

from __future__ import annotations

import mmap
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSegment
from elftools.elf.elffile import ELFFile

ELF_MAGIC = b"\x7fELF"
# "libfoo.so", "libfoo.so.9", "libfoo-bar.so.1.2" as a whole NUL-terminated string or a word
SONAME_RE = re.compile(rb"lib[A-Za-z0-9_+-][A-Za-z0-9_.+-]{0,80}?\.so(?:\.[0-9]+)*(?![A-Za-z0-9_])")
SHT_NOBITS = 8


@dataclass
class ElfInfo:
    path: str
    elf_class: int = 64
    machine: str = ""
    soname: str | None = None
    needed: list[str] = field(default_factory=list)
    rpath: list[str] = field(default_factory=list)
    runpath: list[str] = field(default_factory=list)
    strings: list[str] = field(default_factory=list)  # shared-library names in .rodata
    error: str | None = None


def is_elf(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            return fh.read(4) == ELF_MAGIC
    except OSError:
        return False


def read_elf(path: str, scan_strings: bool = True) -> ElfInfo:
    """Parse the dynamic segment only (no symbol tables, no debug info)."""
    info = ElfInfo(path)
    try:
        with open(path, "rb") as fh:
            elf = ELFFile(fh)
            info.elf_class = elf.elfclass
            info.machine = elf["e_machine"]
            _read_dynamic(elf, info)
            if scan_strings:
                info.strings = _rodata_sonames(fh, elf)
    except (ELFError, OSError, ValueError) as exc:
        info.error = f"not a readable ELF file: {exc}"
    return info


def _read_dynamic(elf: ELFFile, info: ElfInfo) -> None:
    for segment in elf.iter_segments():
        if not isinstance(segment, DynamicSegment):
            continue
        for tag in segment.iter_tags():
            kind = tag.entry.d_tag
            if kind == "DT_NEEDED":
                info.needed.append(tag.needed)
            elif kind == "DT_SONAME":
                info.soname = tag.soname
            elif kind == "DT_RPATH":
                info.rpath.extend(p for p in tag.rpath.split(":"))
            elif kind == "DT_RUNPATH":
                info.runpath.extend(p for p in tag.runpath.split(":"))
        return


def _rodata_sonames(fh, elf: ELFFile) -> list[str]:
    """Library names in .rodata: what the object may pass to dlopen()."""
    with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        where = _find_section(mm, elf.elfclass, elf.little_endian, b".rodata")
        if where is None:
            return []
        found = {m.group().decode("ascii") for m in SONAME_RE.finditer(mm, *where)}
    return sorted(found)


def _find_section(mm: mmap.mmap, elf_class: int, little: bool, wanted: bytes) -> tuple[int, int] | None:
    """(start, end) file offsets of a section, read straight from the section header table.

    pyelftools builds an object per section header, which costs more than the whole
    string scan on libraries with thousands of sections; this reads only the fields needed.
    """
    order = "<" if little else ">"
    if elf_class == 64:
        (shoff,) = struct.unpack_from(order + "Q", mm, 0x28)
        entsize, count, strndx = struct.unpack_from(order + "HHH", mm, 0x3A)
        header = struct.Struct(order + "IIQQQQ")  # name, type, flags, addr, offset, size
    else:
        (shoff,) = struct.unpack_from(order + "I", mm, 0x20)
        entsize, count, strndx = struct.unpack_from(order + "HHH", mm, 0x2E)
        header = struct.Struct(order + "IIIIII")
    if shoff == 0 or count == 0 or strndx >= count or shoff + count * entsize > len(mm):
        return None
    names_at = header.unpack_from(mm, shoff + strndx * entsize)[4]
    for index in range(count):
        name, kind, _flags, _addr, offset, size = header.unpack_from(mm, shoff + index * entsize)
        if kind == SHT_NOBITS or size == 0:
            continue
        end = mm.find(b"\0", names_at + name)
        if mm[names_at + name : end] == wanted and offset + size <= len(mm):
            return offset, offset + size
    return None


def read_many(paths: list[str], scan_strings: bool = True) -> list[ElfInfo]:
    """Worker entry point: one chunk of files per process."""
    return [read_elf(p, scan_strings) for p in paths]


def cpu_count() -> int:
    """CPUs this process may use (affinity/cgroup aware where the OS says so)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1
