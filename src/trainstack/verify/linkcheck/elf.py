"""Read what the loader needs from one ELF file: class, machine, SONAME, NEEDED, RPATH,
RUNPATH, and the shared-library names in its read-only data (dlopen candidates)."""

from __future__ import annotations

import mmap
import os
import re
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.common.utils import parse_cstring_from_stream, struct_parse
from elftools.elf.elffile import ELFFile

ELF_MAGIC = b"\x7fELF"
# "libfoo.so", "libfoo.so.9", "libfoo-bar.so.1.2" as a whole NUL-terminated string or a word
SONAME_RE = re.compile(rb"lib[A-Za-z0-9_+-][A-Za-z0-9_.+-]{0,80}?\.so(?:\.[0-9]+)*(?![A-Za-z0-9_])")
SHT_NOBITS = 8
SO_END_RE = re.compile(rb"\.so(?:\.[0-9]+)*(?![A-Za-z0-9_])")
SONAME_AT_END_RE = re.compile(SONAME_RE.pattern + rb"\Z")
MAX_STEM = 84  # "lib", one character and up to 80 more: the longest stem SONAME_RE takes


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
        with _open_regular(str(path)) as fh:
            return fh.read(4) == ELF_MAGIC
    except OSError:
        return False


def _open_regular(path: str):
    """A regular file opened for reading; a FIFO, device or socket is refused before any read
    (opened without blocking, its type checked on the open descriptor)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_elf(path: str, scan_strings: bool = True) -> ElfInfo:
    """Parse the dynamic segment only (no symbol tables, no debug info)."""
    info = ElfInfo(path)
    try:
        with _open_regular(path) as fh:
            _check_header(fh, os.fstat(fh.fileno()).st_size)
            elf = ELFFile(fh)
            _check_complete(elf, os.fstat(fh.fileno()).st_size)
            info.elf_class = elf.elfclass
            info.machine = elf["e_machine"]
            _read_dynamic(elf, info)
            if scan_strings:
                info.strings = _rodata_sonames(fh, elf)
    except (ELFError, OSError, ValueError, struct.error) as exc:
        info.error = f"not a readable ELF file: {exc}"
    return info


# per class: the header fields from e_phoff to e_shstrndx and where they start, a program
# header's size, a section header's format
_HEADER = {1: ("IIIHHHHHH", 0x1C, 32, "IIIIIIIIII"), 2: ("QQIHHHHHH", 0x20, 56, "IIQQQQIIQQ")}


def _check_header(fh, size: int) -> None:
    """ValueError unless every count and offset of the ELF header fits the file's real size:
    e_phentsize and e_shentsize the sizes of their class, and both tables (counts from
    section 0 when e_phnum is PN_XNUM or e_shnum is 0) inside the file. Checked before any
    table is read, so no loop runs longer than the file allows."""
    head = fh.read(64)
    if len(head) < 0x34 or head[4] not in _HEADER or head[5] not in (1, 2):
        raise ValueError(f"truncated or unknown ELF header ({size} bytes)")
    fields, at, phdr, section = _HEADER[head[4]]
    order = "<" if head[5] == 1 else ">"
    if len(head) < at + struct.calcsize(order + fields):
        raise ValueError(f"truncated ELF header ({size} bytes)")
    phoff, shoff, _flags, _ehsize, phentsize, phnum, shentsize, shnum, _shstrndx = struct.unpack_from(order + fields, head, at)
    shdr = struct.calcsize(order + section)
    section0 = None
    if shoff:
        if shentsize != shdr or shoff > size - shdr:
            raise ValueError(
                f"the section table at byte {shoff} with entries of {shentsize} bytes (a {shdr}-byte "
                f"section header) does not fit a file of {size} bytes"
            )
        fh.seek(shoff)
        section0 = struct.unpack(order + section, fh.read(shdr))
    if phnum == 0xFFFF:  # PN_XNUM: the real count is section 0's sh_info
        if section0 is None:
            raise ValueError("e_phnum is PN_XNUM but there is no section 0 to hold the count")
        phnum = section0[7]
    if section0 is not None and shnum == 0:  # section 0 is read whenever there is a section table
        shnum = section0[5]
    if phnum and (phentsize != phdr or phoff > size or phnum > (size - phoff) // phdr):
        raise ValueError(
            f"{phnum} program headers of {phentsize} bytes at byte {phoff} (a {phdr}-byte header) do not fit a file of {size} bytes"
        )
    if shoff and shnum > (size - shoff) // shdr:
        raise ValueError(f"{shnum} section headers at byte {shoff} do not fit a file of {size} bytes")
    fh.seek(0)


def _check_complete(elf: ELFFile, size: int) -> None:
    """ValueError for a truncated file: every segment and the section table lie within it
    (the counts were bounded by the file's size in _check_header)."""
    table_end = elf["e_shoff"] + elf["e_shnum"] * elf["e_shentsize"]
    if table_end > size:
        raise ValueError(f"truncated: the section table ends at byte {table_end}, the file has {size}")
    for index in range(elf.num_segments()):
        header = _program_header(elf, index)
        end = header["p_offset"] + header["p_filesz"]
        if end > size:
            raise ValueError(f"truncated: segment {index} ends at byte {end}, the file has {size}")


def _read_dynamic(elf: ELFFile, info: ElfInfo) -> None:
    """NEEDED, SONAME, RPATH and RUNPATH from PT_DYNAMIC, parsed with pyelftools' structs.

    pyelftools' DynamicSegment looks up every section header to find its string table,
    which costs more than the rest of the check on large libraries; the loader itself
    only needs the program headers, DT_STRTAB and the entries, and so does this.
    """
    headers = [_program_header(elf, i) for i in range(elf.num_segments())]
    dynamic = next((h for h in headers if h["p_type"] == "PT_DYNAMIC"), None)
    if dynamic is None:
        return
    entries = _dynamic_entries(elf, dynamic)
    strtab = next((value for tag, value in entries if tag == "DT_STRTAB"), None)
    if strtab is None:
        return
    strtab_offset = _file_offset(headers, strtab)
    for tag, value in entries:
        if tag not in _STRING_TAGS:
            continue
        raw = parse_cstring_from_stream(elf.stream, strtab_offset + value)
        text = (raw or b"").decode("utf-8", "replace")
        if any(ord(c) < 0x20 or ord(c) == 0x7F or c == "\ufffd" for c in text) or len(text) > 4096:
            raise ValueError(
                f"its {tag} entry is not a file name (control characters, bytes that are not UTF-8 or over 4096 characters): {text[:80]!r}"
            )
        if tag == "DT_NEEDED":
            info.needed.append(text)
        elif tag == "DT_SONAME":
            info.soname = text
        elif tag == "DT_RPATH":
            info.rpath.extend(text.split(":"))
        else:
            info.runpath.extend(text.split(":"))


_STRING_TAGS = frozenset({"DT_NEEDED", "DT_SONAME", "DT_RPATH", "DT_RUNPATH"})


def _program_header(elf: ELFFile, index: int):
    offset = elf["e_phoff"] + index * elf["e_phentsize"]
    return struct_parse(elf.structs.Elf_Phdr, elf.stream, stream_pos=offset)


def _dynamic_entries(elf: ELFFile, dynamic) -> list[tuple[str, int]]:
    size = elf.structs.Elf_Dyn.sizeof()
    entries = []
    for index in range(dynamic["p_filesz"] // size):
        entry = struct_parse(elf.structs.Elf_Dyn, elf.stream, stream_pos=dynamic["p_offset"] + index * size)
        if entry["d_tag"] == "DT_NULL":
            break
        entries.append((entry["d_tag"], entry["d_val"]))
    return entries


def _file_offset(headers, address: int) -> int:
    """The file offset of a virtual address, through the PT_LOAD segment that maps it."""
    for header in headers:
        start = header["p_vaddr"]
        if header["p_type"] == "PT_LOAD" and start <= address < start + header["p_filesz"]:
            return address - start + header["p_offset"]
    raise ValueError(f"DT_STRTAB address {address:#x} is in no PT_LOAD segment")


def _rodata_sonames(fh, elf: ELFFile) -> list[str]:
    """Library names in .rodata: what the object may pass to dlopen()."""
    with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        where = _find_section(mm, elf.elfclass, elf.little_endian, b".rodata")
        if where is None:
            return []
        return sorted(_sonames_in(mm, *where))


def _sonames_in(mm: mmap.mmap, start: int, end: int) -> set[str]:
    """SONAME_RE's matches in [start, end), found from their ".so" endings.

    Scanning for the rare ending and matching only the few bytes before it halves the
    time of running SONAME_RE over the whole section, which dominates a cold check.
    """
    found: set[str] = set()
    for ending in SO_END_RE.finditer(mm, start, end):
        window = mm[max(start, ending.start() - MAX_STEM) : ending.end()]
        match = SONAME_AT_END_RE.search(window)
        if match is not None:
            found.add(match.group().decode("ascii"))
    return found


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
    if shoff == 0 or count == 0 or strndx >= count or entsize < header.size or shoff + count * entsize > len(mm):
        return None
    names_at = header.unpack_from(mm, shoff + strndx * entsize)[4]
    if names_at >= len(mm):
        return None
    for index in range(count):
        name, kind, _flags, _addr, offset, size = header.unpack_from(mm, shoff + index * entsize)
        if kind == SHT_NOBITS or size == 0:
            continue
        if names_at + name >= len(mm):
            continue
        end = mm.find(b"\0", names_at + name)
        if end >= 0 and mm[names_at + name : end] == wanted and offset + size <= len(mm):
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
