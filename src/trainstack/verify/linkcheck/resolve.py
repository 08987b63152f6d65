"""Where the dynamic loader would find a library: RPATH, LD_LIBRARY_PATH, RUNPATH,
the ld.so cache, then the default directories (the order of glibc's ld.so(8))."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from trainstack import proc

DEFAULT_DIRS_64 = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")
DEFAULT_DIRS_32 = ("/lib/i386-linux-gnu", "/usr/lib/i386-linux-gnu", "/lib32", "/usr/lib32", "/lib", "/usr/lib")


def parse_ldconfig(text: str) -> dict[tuple[str, int], str]:
    """``ldconfig -p`` output -> {(soname, elf class): path}; the first entry wins, as in ld.so."""
    cache: dict[tuple[str, int], str] = {}
    for line in text.splitlines():
        if "=>" not in line or "(" not in line:
            continue
        left, path = line.split("=>", 1)
        name, _, flags = left.strip().partition(" (")
        elf_class = 64 if any(tag in flags for tag in ("64", "AArch64")) else 32
        cache.setdefault((name.strip(), elf_class), path.strip())
    return cache


def load_ld_cache() -> dict[tuple[str, int], str]:
    """Read the ld.so cache once through ``ldconfig -p`` (an empty cache when unavailable)."""
    ldconfig = next((p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.path.exists(p)), "ldconfig")
    result = proc.run([ldconfig, "-p"], echo=False)
    return parse_ldconfig(result.stdout) if result.ok else {}


@dataclass
class Resolver:
    cache: dict[tuple[str, int], str]
    ld_library_path: list[str] = field(default_factory=list)
    _listings: dict[str, frozenset[str]] = field(default_factory=dict)
    _prefixes: dict[str, dict[str, str]] = field(default_factory=dict)
    _cache_prefixes: dict[tuple[str, int], str] | None = None

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> Resolver:
        variables = os.environ if env is None else env
        paths = [p for p in variables.get("LD_LIBRARY_PATH", "").split(":") if p]
        return cls(load_ld_cache(), paths)

    def names_in(self, directory: str) -> frozenset[str]:
        if directory not in self._listings:
            try:
                self._listings[directory] = frozenset(os.listdir(directory))
            except OSError:
                self._listings[directory] = frozenset()
        return self._listings[directory]

    def search_dirs(self, origin: str, rpath: list[str], runpath: list[str], elf_class: int) -> list[tuple[str, str]]:
        """(directory, how) in the order ld.so tries them for an object living in ``origin``."""
        dirs: list[tuple[str, str]] = []
        if not runpath:
            dirs += [(expand(p, origin), "RPATH") for p in rpath if p]
        dirs += [(p, "LD_LIBRARY_PATH") for p in self.ld_library_path]
        dirs += [(expand(p, origin), "RUNPATH") for p in runpath if p]
        return dirs

    def find(self, name: str, origin: str, rpath: list[str], runpath: list[str], elf_class: int) -> tuple[str, str] | None:
        """(path, how it was found) for an exact soname, or None."""
        if "/" in name:
            path = name if os.path.isabs(name) else os.path.join(origin, name)
            return (path, "path") if os.path.isfile(path) else None  # a FIFO or a device is no library
        for directory, how in self.search_dirs(origin, rpath, runpath, elf_class):
            if name in self.names_in(directory):
                return os.path.join(directory, name), how
        cached = self.cache.get((name, elf_class))
        if cached:
            return cached, "ld.so cache"
        for directory in DEFAULT_DIRS_64 if elf_class == 64 else DEFAULT_DIRS_32:
            if name in self.names_in(directory):
                return os.path.join(directory, name), "default path"
        return None

    def find_prefix(self, stem: str, origin: str, rpath: list[str], runpath: list[str], elf_class: int) -> str | None:
        """A file named ``stem`` or ``stem.N...`` anywhere ld.so would look: for dlopen
        candidates whose version suffix is appended at run time ("libcudnn_ops.so" + ".9")."""
        exact = self.find(stem, origin, rpath, runpath, elf_class)
        if exact:
            return exact[0]
        dirs = [d for d, _ in self.search_dirs(origin, rpath, runpath, elf_class)]
        dirs += list(DEFAULT_DIRS_64 if elf_class == 64 else DEFAULT_DIRS_32)
        for directory in dirs:
            versioned = self._versions_in(directory).get(stem)
            if versioned:
                return os.path.join(directory, versioned)
        return self._cached_versions().get((stem, elf_class))

    def _versions_in(self, directory: str) -> dict[str, str]:
        """{"libfoo.so": "libfoo.so.1.2", "libfoo.so.1": "libfoo.so.1.2"} for one directory."""
        if directory not in self._prefixes:
            index: dict[str, str] = {}
            for entry in sorted(self.names_in(directory)):
                for prefix in version_prefixes(entry):
                    index.setdefault(prefix, entry)
            self._prefixes[directory] = index
        return self._prefixes[directory]

    def _cached_versions(self) -> dict[tuple[str, int], str]:
        if self._cache_prefixes is None:
            self._cache_prefixes = {}
            for (soname, elf_class), path in self.cache.items():
                for prefix in version_prefixes(soname):
                    self._cache_prefixes.setdefault((prefix, elf_class), path)
        return self._cache_prefixes


def version_prefixes(name: str) -> list[str]:
    """'libfoo.so.1.2' -> ['libfoo.so', 'libfoo.so.1']: the names it answers for a dlopen of a
    name without its full version."""
    base, sep, version = name.partition(".so.")
    if not sep:
        return []
    parts = version.split(".")
    return [base + ".so"] + [f"{base}.so.{'.'.join(parts[:n])}" for n in range(1, len(parts))]


def expand(entry: str, origin: str) -> str:
    """$ORIGIN / ${ORIGIN} -> the object's directory; $LIB -> lib64 (x86-64 glibc)."""
    text = entry.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)
    text = text.replace("${LIB}", "lib64").replace("$LIB", "lib64")
    return os.path.normpath(text)


def is_stubs_dir(path: str) -> bool:
    return "stubs" in Path(path).parts
