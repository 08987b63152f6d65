"""Check every ELF object under some paths: NEEDED resolved, dlopen'ed libraries present,
banned and required links, no RPATH into CUDA stubs. Files are parsed in parallel."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from fnmatch import fnmatch
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from trainstack.errors import UsageError
from trainstack.stackfile.schema import LinkAcceptance, Links
from trainstack.verify.linkcheck.cache import ElfCache
from trainstack.verify.linkcheck.data import DlopenData, load_data
from trainstack.verify.linkcheck.elf import ElfInfo, cpu_count, is_elf, read_many
from trainstack.verify.linkcheck.resolve import Resolver, expand, is_stubs_dir

Severity = Literal["error", "warning", "note"]


class LinkIssue(BaseModel):
    kind: str  # unresolved | dlopen-missing | banned | required-missing | stubs-rpath | unreadable | driver
    severity: Severity
    file: str
    library: str
    detail: str
    # how the target's own interpreter met it: broken | optional | resolved-at-run-time | unconfirmed
    status: str | None = None
    reason: str = ""  # why, in the words of that confirmation
    chain: list[str] = []  # the objects that lead to ``file``, outermost first (ending with it)
    provider: str = ""  # the package or command that provides ``library``
    accepted: str = ""  # an error the stack accepts ([verify.links] accept): its reason; not a failure
    accepted_link: str | None = None


class DlopenCandidate(BaseModel):
    library: str  # the name as found in the object's read-only strings
    found_in: str  # the object whose .rodata holds it
    resolved: str | None  # where ld.so would find it from that object, or None


class LinkReport(BaseModel):
    paths: list[str]
    files_checked: int
    needed_resolved: int
    seconds: float
    workers: int
    issues: list[LinkIssue]
    candidates: list[DlopenCandidate]
    confirmed_in: str | None = None  # the interpreter that confirmed the findings
    confirmation: str = ""  # one line: how the findings were confirmed, or why they were not
    confirm_seconds: float = 0.0

    @property
    def errors(self) -> list[LinkIssue]:
        return [i for i in self.issues if i.severity == "error" and not i.accepted]

    @property
    def accepted(self) -> list[LinkIssue]:
        return [i for i in self.issues if i.severity == "error" and i.accepted]

    @property
    def ok(self) -> bool:
        return not self.errors


def accept_known(report: LinkReport, acceptances: list[LinkAcceptance]) -> LinkReport:
    """The report with each error the stack accepts marked with the acceptance's reason: the
    object's path (under site-packages, or anywhere below a checked root) and the library both
    match. An accepted error stays in the report and fails nothing."""
    if not acceptances:
        return report
    issues = []
    for issue in report.issues:
        match = next(
            (
                a
                for a in acceptances
                if issue.severity == "error"
                and fnmatch(issue.library, a.library)
                and (fnmatch(issue.file, a.file) or fnmatch(issue.file, "*/" + a.file))
            ),
            None,
        )
        issues.append(issue.model_copy(update={"accepted": match.reason, "accepted_link": match.link}) if match else issue)
    return report.model_copy(update={"issues": issues})


def _same_package(chain: list[str]) -> int:
    """How many objects of a chain lie in the folder of its outermost one's package."""
    package = os.path.dirname(chain[0]) + os.sep
    return sum(p.startswith(package) for p in chain)


def _is_extension(path: str) -> bool:
    base = os.path.basename(path)
    return ".cpython-" in base or base.endswith(".abi3.so")


def _special(path: str) -> bool:
    """Exists but is not a regular file (checked without opening it)."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def find_elf_files(paths: Iterable[Path]) -> list[str]:
    """Regular files under ``paths`` that start with the ELF magic (symlinks are not followed)."""
    found: list[str] = []
    for root in paths:
        if root.is_file():
            if is_elf(root):
                found.append(str(root))
            continue
        for dirpath, _dirs, files in os.walk(root):
            for name in files:
                full = os.path.join(dirpath, name)
                if _worth_opening(name, full) and is_elf(Path(full)):
                    found.append(full)
    return sorted(found)


def _worth_opening(name: str, full: str) -> bool:
    try:
        if not stat.S_ISREG(os.lstat(full).st_mode):
            return False  # links, FIFOs, sockets, devices: never opened (a FIFO would block)
    except OSError:
        return False
    if ".so" in name:
        return True
    if name.endswith((".py", ".pyc", ".pyi", ".h", ".hpp", ".txt", ".json", ".md", ".cuh", ".typed")):
        return False
    return os.access(full, os.X_OK) and not os.path.islink(full)


def read_all(files: list[str], workers: int, scan_strings: bool = True, cache: ElfCache | None = None) -> list[ElfInfo]:
    """Parse files not in ``cache`` in ``workers`` processes, in chunks ordered by size so the
    big ones spread out."""
    if cache is None:
        return _read_parallel(files, workers, scan_strings)
    known = {path: cache.get(path, scan_strings) for path in files}
    fresh = _read_parallel([p for p, info in known.items() if info is None], workers, scan_strings)
    for info in fresh:
        cache.put(info, scan_strings)
    cache.save()
    return sorted([i for i in known.values() if i is not None] + fresh, key=lambda i: i.path)


def _read_parallel(files: list[str], workers: int, scan_strings: bool) -> list[ElfInfo]:
    if workers <= 1 or len(files) < 8:
        return read_many(files, scan_strings)
    by_size = sorted(files, key=_size, reverse=True)
    chunks = [by_size[i :: workers * 4] for i in range(workers * 4)]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        results = pool.map(read_many, chunks, [scan_strings] * len(chunks))
        infos = [info for chunk in results for info in chunk]
    return sorted(infos, key=lambda i: i.path)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def check_paths(
    paths: list[Path],
    links: Links | None = None,
    *,
    resolver: Resolver | None = None,
    workers: int | None = None,
    scan_strings: bool = True,
    cache: bool = True,
) -> LinkReport:
    for path in paths:
        if not path.exists():
            raise UsageError(f"{path}: no such file or directory")
    start = time.perf_counter()
    workers = workers or cpu_count()
    files = find_elf_files(paths)
    infos = read_all(files, workers, scan_strings, ElfCache() if cache else None)
    resolver = resolver or Resolver.from_environment()
    checker = _Checker(infos, resolver, load_data(), links or Links(), [str(p.resolve()) for p in paths])
    checker.run()
    return LinkReport(
        paths=[str(p) for p in paths],
        files_checked=len(infos),
        needed_resolved=checker.resolved,
        seconds=round(time.perf_counter() - start, 3),
        workers=workers,
        issues=checker.issues,
        candidates=checker.candidates,
    )


class _Checker:
    def __init__(self, infos: list[ElfInfo], resolver: Resolver, data: DlopenData, links: Links, roots: list[str]):
        self.infos = infos
        self.resolver = resolver
        self.data = data
        self.links = links
        self.roots = roots
        self.issues: list[LinkIssue] = []
        self.candidates: list[DlopenCandidate] = []
        self.resolved = 0
        self.needed_by: dict[str, list[str]] = {}  # object path -> NEEDED names
        self.loaders: dict[str, list[ElfInfo]] = {}  # object path -> objects whose NEEDED resolve to it
        self._found: dict[tuple[str, str], tuple[str, str] | None] = {}

    def run(self) -> None:
        self._map_loaders()
        for info in self.infos:
            if info.error:
                self._add("unreadable", "error", info.path, "", info.error)
                continue
            self._needed(info)
            self._stubs(info)
            self._dlopen_rules(info)
            self._candidates(info)
        self._banned()
        self._required()

    def _add(self, kind: str, severity: Severity, file: str, library: str, detail: str) -> None:
        chain = self.chain(file) if kind in ("unresolved", "dlopen-missing") else []
        self.issues.append(LinkIssue(kind=kind, severity=severity, file=file, library=library, detail=detail, chain=chain))

    def chain(self, path: str) -> list[str]:
        """Objects that load ``path``, outermost first: up the loaders (breadth first, so the
        shortest way) to an extension module, or to an object nothing here links. Of the
        extensions equally near, the one whose package holds most of the way (torch's _C for
        torch/lib, not functorch's)."""
        parents: dict[str, str | None] = {path: None}
        level = [path]
        top = path
        while level:
            found = [p for p in level if _is_extension(p)]
            if found:
                return max((self._walk(p, parents) for p in sorted(found)), key=_same_package)
            top = level[-1]
            upper = []
            for current in level:
                for loader in self.loaders.get(current, []):
                    if loader.path not in parents:
                        parents[loader.path] = current
                        upper.append(loader.path)
            level = upper
        return self._walk(top, parents)

    @staticmethod
    def _walk(top: str, parents: dict[str, str | None]) -> list[str]:
        ordered: list[str] = []
        step: str | None = top
        while step is not None:
            ordered.append(step)
            step = parents.get(step)
        return ordered

    def _find(self, info: ElfInfo, name: str) -> tuple[str, str] | None:
        key = (info.path, name)
        if key not in self._found:
            self._found[key] = self.resolver.find(name, os.path.dirname(info.path), info.rpath, info.runpath, info.elf_class)
        return self._found[key]

    def _needed(self, info: ElfInfo) -> None:
        self.needed_by[info.path] = info.needed
        plugin = self.data.is_plugin(os.path.basename(info.path))
        for name in info.needed:
            if "/" in name and _special(os.path.join(os.path.dirname(info.path), name)):
                self._add(
                    "unreadable",
                    "error",
                    info.path,
                    name,
                    "NEEDED names a FIFO, device or socket, not a library file: the loader would block or fail on it",
                )
                continue
            found = self._find(info, name)
            if found is None and self._loaders_find(info, name):
                self.resolved += 1
                continue
            if found is not None:
                self.resolved += 1
                if is_stubs_dir(os.path.dirname(found[0])):
                    self._add("stubs-rpath", "error", info.path, name, f"resolves to a CUDA stub: {found[0]}")
                continue
            if self.data.is_driver(name):
                self._add("driver", "note", info.path, name, "host driver library, not installed on this machine")
            elif plugin:
                self._add("unresolved", "note", info.path, name, f"not found; {self.data.plugins.reason}")
            elif self._is_entry_point(info):
                self._add("unresolved", "error", info.path, name, f"NEEDED not found ({self._searched(info)})")
            else:
                self._add("unresolved", "warning", info.path, name, "NEEDED not found; nothing here links this library")

    def _loaders_find(self, info: ElfInfo, name: str) -> bool:
        """ld.so reuses a library its loader already mapped: the name is satisfied when
        every object linking ``info`` can find it itself."""
        loaders = self.loaders.get(info.path, [])
        return bool(loaders) and all(self._find(loader, name) is not None for loader in loaders)

    def _is_entry_point(self, info: ElfInfo) -> bool:
        """Linked by another object here, a Python extension module, or an executable."""
        base = os.path.basename(info.path)
        return info.path in self.loaders or ".cpython-" in base or base.endswith(".abi3.so") or ".so" not in base

    def _map_loaders(self) -> None:
        for info in self.infos:
            for name in info.needed:
                found = self._find(info, name)
                if found is not None:
                    for key in {os.path.normpath(found[0]), os.path.realpath(found[0])}:
                        self.loaders.setdefault(key, []).append(info)

    def _searched(self, info: ElfInfo) -> str:
        parts = []
        if info.rpath and not info.runpath:
            parts.append("RPATH " + ":".join(info.rpath))
        if info.runpath:
            parts.append("RUNPATH " + ":".join(info.runpath))
        if self.resolver.ld_library_path:
            parts.append("LD_LIBRARY_PATH")
        parts.append("ld.so cache, default paths")
        return "searched " + ", ".join(parts)

    def _stubs(self, info: ElfInfo) -> None:
        if self.links.allow_stubs_rpath:
            return
        origin = os.path.dirname(info.path)
        for kind, entries in (("RPATH", info.rpath), ("RUNPATH", info.runpath)):
            for entry in entries:
                if entry and is_stubs_dir(expand(entry, origin)):
                    self._add("stubs-rpath", "error", info.path, entry, f"{kind} points into a CUDA stubs directory")

    def _dlopen_rules(self, info: ElfInfo) -> None:
        soname = info.soname or os.path.basename(info.path)
        for rule in self.data.rules_for(soname):
            for name in rule.loads:
                if "*" in name or "?" in name or "[" in name:
                    hit = self._find_pattern(info, name)
                else:
                    found = self._find(info, name)
                    hit = found[0] if found else None
                if hit is None and rule.own_dir:
                    hit = self._in_own_dir(info, name)
                if hit is not None:
                    self.resolved += 1
                    continue
                severity: Severity = "note" if rule.optional else "error"
                self._add("dlopen-missing", severity, info.path, name, f"dlopen'ed by {soname}: {rule.reason}")

    def _in_own_dir(self, info: ElfInfo, pattern: str) -> str | None:
        directory = os.path.dirname(info.path)
        hits = [n for n in self.resolver.names_in(directory) if fnmatch(n, pattern)]
        return os.path.join(directory, hits[0]) if hits else None

    def _find_pattern(self, info: ElfInfo, pattern: str) -> str | None:
        stem = pattern.split("*", 1)[0].rstrip(".")
        path = self.resolver.find_prefix(stem, os.path.dirname(info.path), info.rpath, info.runpath, info.elf_class)
        return path if path and fnmatch(os.path.basename(path), pattern) else None

    def _candidates(self, info: ElfInfo) -> None:
        own = {os.path.basename(info.path), info.soname}
        for name in info.strings:
            if name in own or name in info.needed:
                continue
            resolved = self.resolver.find_prefix(name, os.path.dirname(info.path), info.rpath, info.runpath, info.elf_class)
            self.candidates.append(DlopenCandidate(library=name, found_in=info.path, resolved=resolved))

    def _banned(self) -> None:
        """A banned library (and every host driver library) must not be shipped inside the env."""
        banned = list(self.links.banned)
        for info in self.infos:
            base = os.path.basename(info.path)
            names = {base, info.soname or base}
            for pattern in banned:
                if any(fnmatch(n, pattern) for n in names):
                    self._add("banned", "error", info.path, pattern, "banned library is shipped inside the environment")
            if any(self.data.is_driver(n) for n in names):
                self._add("banned", "error", info.path, base, "ships a driver library; it must come from the host")

    def _required(self) -> None:
        """'LIB' (some object NEEDs it) or 'OBJECT needs LIB' (that object NEEDs it)."""
        for rule in self.links.required:
            owner, _, lib = rule.partition(" needs ")
            owner, lib = (owner.strip(), lib.strip()) if lib else ("*", owner.strip())
            owners = [p for p in self.needed_by if fnmatch(os.path.basename(p), owner)]
            if not owners:
                self._add("required-missing", "error", owner, lib, f"required link '{rule}': no object named {owner}")
                continue
            if not any(any(fnmatch(n, lib) for n in self.needed_by[p]) for p in owners):
                where = owners[0] if owner != "*" else ", ".join(self.roots)
                self._add("required-missing", "error", where, lib, f"required link '{rule}' is not in any DT_NEEDED")
