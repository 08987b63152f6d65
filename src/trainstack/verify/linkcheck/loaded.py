"""The dlopen'ed libraries of objects a process has mapped: what `report` checks for the
libraries it saw loaded (a cuDNN whose engine library was deleted still imports)."""

from __future__ import annotations

import os

from trainstack.verify.linkcheck.data import load_data
from trainstack.verify.linkcheck.elf import read_elf
from trainstack.verify.linkcheck.resolve import Resolver


def missing_dlopens(loaded: list[str], resolver: Resolver | None = None) -> list[str]:
    """One line per library that a mapped object dlopens (non-optional rules) and that the
    loader would not find from it."""
    data = load_data()
    lines: list[str] = []
    resolver = resolver or Resolver.from_environment()
    for path in sorted(set(loaded)):
        info = None
        for rule in data.rules_for(os.path.basename(path)):
            if rule.optional:
                continue
            info = info or read_elf(path, scan_strings=False)
            origin = os.path.dirname(path)
            for name in rule.loads:
                if resolver.find(name, origin, info.rpath, info.runpath, info.elf_class) is None and name not in resolver.names_in(origin):
                    lines.append(f"{name}: dlopen'ed by {path}, not found ({rule.reason})")
    return lines
