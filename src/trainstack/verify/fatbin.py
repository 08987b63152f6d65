"""GPU architectures compiled into a shared object, read from its ELF `.nv_fatbin` section
(pyelftools), without cuobjdump: each fat binary holds entries of machine code (sm_XX) and
PTX (compute_XX), each entry header naming its architecture."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

FATBIN_MAGIC = 0xBA55ED50
_HEADER = struct.Struct("<IHHQ")  # magic, version, header size, size of the entries that follow
_ENTRY = struct.Struct("<HHIQ")  # kind (1 PTX, 2 machine code), version, header size, padded payload size
_ARCH_OFFSET = 28  # u32 within an entry header: the architecture, 90 for sm_90
_KINDS = {1: "compute", 2: "sm"}


@dataclass(frozen=True)
class FatbinArchs:
    sm: tuple[str, ...]  # machine code: '90', '100'
    ptx: tuple[str, ...]  # PTX the driver can compile for newer GPUs

    @property
    def labels(self) -> list[str]:
        return [f"sm_{a}" for a in self.sm] + [f"compute_{a}" for a in self.ptx]


def fatbin_archs(path: Path) -> FatbinArchs | None:
    """The architectures in ``path``'s `.nv_fatbin`; None when it is not an ELF or has no GPU code."""
    try:
        with path.open("rb") as handle:
            section = ELFFile(handle).get_section_by_name(".nv_fatbin")
            data = section.data() if section is not None else b""
    except (OSError, ELFError):
        return None
    return parse_fatbin(data) if data else None


def parse_fatbin(data: bytes) -> FatbinArchs:
    """Walk every fat binary in the section (one per linked translation unit) and its entries."""
    found: dict[str, set[str]] = {"sm": set(), "compute": set()}
    offset = 0
    while offset + _HEADER.size <= len(data):
        magic, _, header_size, size = _HEADER.unpack_from(data, offset)
        if magic != FATBIN_MAGIC:
            offset += 8  # fat binaries are 8-byte aligned within the section
            continue
        entry, end = offset + header_size, min(offset + header_size + size, len(data))  # a cut section ends early
        while entry + _ARCH_OFFSET + 4 <= end:
            kind, _, entry_header, payload = _ENTRY.unpack_from(data, entry)
            if entry_header == 0:
                break
            (arch,) = struct.unpack_from("<I", data, entry + _ARCH_OFFSET)
            if kind in _KINDS:
                found[_KINDS[kind]].add(str(arch))
            entry += entry_header + payload
        offset = max(end, offset + 8)
    return FatbinArchs(sm=_sorted(found["sm"]), ptx=_sorted(found["compute"]))


def _sorted(archs: set[str]) -> tuple[str, ...]:
    return tuple(sorted(archs, key=int))
