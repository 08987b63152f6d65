"""Writes the crafted ELF files of this folder, each with a sidecar NAME.attacks (ELF has no
comments): python3 tests/data/corpus/elf/generate.py. A small valid 64-bit shared object (a PT_LOAD
over the whole file, a PT_DYNAMIC with NEEDED and DT_STRTAB, a section table with .rodata)
with one field or region made hostile per case."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
EHDR, PHDR, SHDR, DYN = 64, 56, 64, 16


def elf(*, needed: bytes = b"libc.so.6", ehdr: dict | None = None, phdrs: list[dict] | None = None,
        dyn: list[tuple[int, int]] | None = None, sh0: dict | None = None, rodata: dict | None = None,
        cut: int | None = None, tail: bytes = b"", elf_class: int = 2) -> bytes:
    strtab = b"\0" + needed + b"\0libplugin.so.1\0"
    shstr = b"\0.rodata\0.shstrtab\0"
    ph_at = EHDR
    dyn_at = ph_at + 2 * PHDR
    entries = dyn if dyn is not None else [(1, 1), (5, 0)]  # DT_NEEDED, DT_STRTAB (patched below)
    str_at = dyn_at + (len(entries) + 1) * DYN
    entries = [(t, str_at if (t == 5 and v == 0) else v) for t, v in entries] + [(0, 0)]
    ro_at = str_at + len(strtab)
    shstr_at = ro_at + len(strtab)
    sh_at = (shstr_at + len(shstr) + 7) & ~7
    end = sh_at + 3 * SHDR
    h = {"e_type": 3, "e_machine": 62, "e_phoff": ph_at, "e_shoff": sh_at, "e_phentsize": PHDR, "e_phnum": 2,
         "e_shentsize": SHDR, "e_shnum": 3, "e_shstrndx": 2, **(ehdr or {})}
    out = bytearray(end)
    out[0:16] = b"\x7fELF" + bytes([elf_class, 1, 1, 0]) + bytes(8)
    struct.pack_into("<HHIQQQIHHHHHH", out, 16, h["e_type"], h["e_machine"], 1, 0, h["e_phoff"], h["e_shoff"], 0,
                     EHDR, h["e_phentsize"], h["e_phnum"], h["e_shentsize"], h["e_shnum"], h["e_shstrndx"])
    load = {"p_type": 1, "p_offset": 0, "p_vaddr": 0, "p_filesz": end}
    dynamic = {"p_type": 2, "p_offset": dyn_at, "p_vaddr": dyn_at, "p_filesz": len(entries) * DYN}
    for i, ph in enumerate(phdrs or [load, dynamic]):
        ph = {**(load if i == 0 else dynamic), **ph}
        struct.pack_into("<IIQQQQQQ", out, ph_at + i * PHDR, ph["p_type"], 4, ph["p_offset"], ph["p_vaddr"],
                         ph["p_vaddr"], ph["p_filesz"], ph["p_filesz"], 8)
    for i, (tag, value) in enumerate(entries):
        struct.pack_into("<qQ", out, dyn_at + i * DYN, tag, value)
    out[str_at:str_at + len(strtab)] = strtab
    out[ro_at:ro_at + len(strtab)] = strtab
    out[shstr_at:shstr_at + len(shstr)] = shstr
    s0 = {"sh_name": 0, "sh_type": 0, "sh_offset": 0, "sh_size": 0, "sh_link": 0, "sh_info": 0, **(sh0 or {})}
    ro = {"sh_name": 1, "sh_type": 1, "sh_offset": ro_at, "sh_size": len(strtab), "sh_link": 0, "sh_info": 0, **(rodata or {})}
    names = {"sh_name": 9, "sh_type": 3, "sh_offset": shstr_at, "sh_size": len(shstr), "sh_link": 0, "sh_info": 0}
    for i, sh in enumerate((s0, ro, names)):
        struct.pack_into("<IIQQQQIIQQ", out, sh_at + i * SHDR, sh["sh_name"], sh["sh_type"], 0, 0, sh["sh_offset"],
                         sh["sh_size"], sh["sh_link"], sh["sh_info"], 1, 0)
    data = bytes(out) + tail
    return data[:cut] if cut is not None else data


CASES: dict[str, tuple[str, bytes]] = {
    "valid": ("nothing: a well-formed object, the baseline every other case changes", elf()),
    "pn-xnum": ("e_phnum = 0xFFFF (PN_XNUM), e_phentsize = 0 and section 0's sh_info = 0xFFFFFFFF: 4.3 billion program headers at one offset",
                elf(ehdr={"e_phnum": 0xFFFF, "e_phentsize": 0}, sh0={"sh_info": 0xFFFFFFFF})),
    "pn-xnum-sized": ("PN_XNUM with a real e_phentsize: sh_info = 0xFFFFFFFF headers claimed in a file of a few hundred bytes",
                      elf(ehdr={"e_phnum": 0xFFFF}, sh0={"sh_info": 0xFFFFFFFF})),
    "phentsize-zero": ("e_phentsize = 0 with 0xFFFE headers: every header read from the same bytes",
                       elf(ehdr={"e_phnum": 0xFFFE, "e_phentsize": 0})),
    "phentsize-small": ("e_phentsize = 8, smaller than a program header: headers overlap each other",
                        elf(ehdr={"e_phentsize": 8})),
    "phoff-past-end": ("e_phoff beyond the end of the file", elf(ehdr={"e_phoff": 1 << 40})),
    "phoff-wraps": ("e_phoff + e_phnum * e_phentsize wraps past 2**64", elf(ehdr={"e_phoff": (1 << 64) - 16})),
    "shnum-huge": ("e_shnum = 0xFFFF with e_shentsize = 0: the section loop over one header",
                   elf(ehdr={"e_shnum": 0xFFFF, "e_shentsize": 0})),
    "shoff-past-end": ("e_shoff beyond the end of the file", elf(ehdr={"e_shoff": 1 << 40})),
    "shstrndx-xindex": ("e_shstrndx = SHN_XINDEX with section 0's sh_link = 0xFFFFFFFF",
                        elf(ehdr={"e_shstrndx": 0xFFFF}, sh0={"sh_link": 0xFFFFFFFF})),
    "shstrndx-past-count": ("e_shstrndx names a section past e_shnum", elf(ehdr={"e_shstrndx": 200})),
    "dynamic-past-end": ("PT_DYNAMIC's p_filesz runs 1 TiB past the end of the file",
                         elf(phdrs=[{}, {"p_filesz": 1 << 40}])),
    "dynamic-offset-past-end": ("PT_DYNAMIC's p_offset beyond the file", elf(phdrs=[{}, {"p_offset": 1 << 40}])),
    "dynamic-no-null": ("a dynamic section with no DT_NULL: 1000 DT_DEBUG entries read to the end of the segment",
                        elf(dyn=[(1, 1), (5, 0)] + [(21, 0)] * 1000)),
    "strtab-unmapped": ("DT_STRTAB at an address no PT_LOAD maps", elf(dyn=[(1, 1), (5, 1 << 50)])),
    "needed-offset-past-end": ("a DT_NEEDED string offset 2**63 past the string table", elf(dyn=[(1, 1 << 63), (5, 0)])),
    "needed-many": ("4000 DT_NEEDED entries, each the same name", elf(dyn=[(5, 0)] + [(1, 1)] * 4000)),
    "needed-fifo": ("a DT_NEEDED naming an absolute FIFO (the test makes it at /tmp/trainstack-corpus-fifo): opening it would block",
                    elf(needed=b"/tmp/trainstack-corpus-fifo")),
    "needed-dev-zero": ("a DT_NEEDED naming /dev/zero, a device that never ends", elf(needed=b"/dev/zero")),
    "needed-escape": ("a DT_NEEDED of ../../../../etc/shadow: a path out of the object's folder", elf(needed=b"../../../../etc/shadow")),
    "needed-control": ("a DT_NEEDED holding a newline and an ANSI escape that would forge a report line",
                       elf(needed=b"libx.so\n\x1b[2Kerror: INJECTED")),
    "needed-unterminated": ("the string table's last string runs to the end of the file without a NUL",
                            elf(needed=b"lib" + b"A" * 300, cut=None)[:-1] + b"Z"),
    "truncated-header": ("a file of 20 bytes that starts with the ELF magic", elf()[:20]),
    "truncated-mid": ("cut in the middle of the dynamic section", elf(cut=EHDR + 2 * PHDR + 8)),
    "class-unknown": ("EI_CLASS = 7, neither 32 nor 64 bit", elf(elf_class=7)),
    "class-32-xnum": ("EI_CLASS = 1 (32-bit) read with 64-bit offsets and PN_XNUM", elf(elf_class=1, ehdr={"e_phnum": 0xFFFF})),
    "rodata-past-end": (".rodata's offset + size beyond the file", elf(rodata={"sh_size": 1 << 40})),
    "rodata-name-past-end": ("a section name offset past the section-name table and the file", elf(rodata={"sh_name": 0x7FFFFFFF})),
}


def main() -> int:
    for name, (attacks, data) in CASES.items():
        (HERE / f"{name}.so").write_bytes(data)
        (HERE / f"{name}.so.attacks").write_text(f"# attacks: {attacks}\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
