"""Resumable extension builds: a compile stopped at any point (a time limit, preemption,
Ctrl-C, SIGKILL) continues where it stopped on the next build.

Beside the wheel cache's entry build/.extensions/<package>-<key>/ an unfinished build keeps
<package>-<key>.partial/: a copy of the source, built in place, so the build folder torch's
cpp_extension hands to ninja (build/temp.*/: build.ninja, the objects, .ninja_log and
.ninja_deps) outlives the flavour's staging folder. Only what trainstack's own build wrote is
taken back: each object is recorded (sha256, size, mode, owner, ninja's log line) as ninja
finishes it, and a resumed build starts from a fresh copy of the source into which only the
objects that still match their record are moved (trainstack.builder.objects); anything else
left in the folder is dropped with one line saying why. Then ninja's own state decides what is
left to do: a unit whose object is missing, whose command line changed, or whose source or
headers are newer than its object compiles again; the rest is kept.

The folder is reused only when its record holds the same wheel-cache key (package version or
commit, torch, CUDA, GPU targets, toolchain pins, build_env, Python) and the same compilers
(each c++, gcc, nvcc on PATH: real path, size and time) and compile variables (CFLAGS, CXX,
NVCC_FLAGS, ...); anything else empties it first. It is removed once the wheel is stored.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if sys.version_info >= (3, 12):
    import tarfile
else:  # the data filter below, which Python 3.11 gained only in 3.11.4 (Debian 12 has 3.11.2)
    from backports import tarfile

from trainstack.builder.objects import OBJECTS, ObjectRecord, ObjectRecorder, carry, read_record, recording
from trainstack.console import err
from trainstack.errors import BuildError
from trainstack.fsutil import atomic_write_json, exclusive, loads_strict, read_regular

if TYPE_CHECKING:
    from trainstack.builder.record import ExtensionKey

STATE = "state.json"
SOURCE = "src"
# the programs an extension's objects come from, looked up in every folder of PATH (a ccache
# link first on PATH still shows the real compiler behind it)
COMPILERS = ("c++", "g++", "cc", "gcc", "clang++", "clang", "nvcc")
# variables read by setuptools, torch's cpp_extension and nvcc that change an object's bytes
COMPILE_VARIABLES = (
    "CC",
    "CXX",
    "CFLAGS",
    "CXXFLAGS",
    "CPPFLAGS",
    "LDFLAGS",
    "NVCC_FLAGS",
    "NVCC_PREPEND_FLAGS",
    "NVCC_APPEND_FLAGS",
    "NVCC_CCBIN",
    "PYTORCH_NVCC",
    "CUDA_HOME",
    "CUDA_PATH",
    "NVCC_THREADS",
    "TORCH_CUDA_ARCH_LIST",
    "FLASH_ATTN_CUDA_ARCHS",
    "_GLIBCXX_USE_CXX11_ABI",
)
# a ninja edge: 'build <outputs>: <rule> <inputs>' (paths escape ' ', ':' and '$' with '$')
_PATH = r"(?:[^\s:$|]|\$.)+"
_EDGE = re.compile(rf"^build ({_PATH}(?: {_PATH})*)(?: \|[^:]*)?: (\S+)")
_UNESCAPE = re.compile(r"\$(.)")


@dataclass(frozen=True)
class Units:
    """A ninja build's compile units: how many, how many ninja recorded as finished, and the
    seconds those took (each unit's last compile in .ninja_log, whichever run it was)."""

    done: int
    total: int
    seconds: float = 0.0


def toolchain_identity(env: Mapping[str, str]) -> dict[str, str]:
    """What the objects were compiled with besides the key: every compiler on ``env``'s PATH
    (and CC, CXX, CUDA_HOME's nvcc) as real path, size and modification time, and the compile
    variables that are set. Reads only file metadata; runs nothing."""
    names = list(COMPILERS) + [env[v].split()[0] for v in ("CC", "CXX") if env.get(v, "").split()]
    candidates: list[Path] = []
    for folder in env.get("PATH", "").split(os.pathsep):
        if folder:
            candidates += [Path(folder) / name for name in names if os.sep not in name]
    candidates += [Path(name) for name in names if os.sep in name]
    if env.get("CUDA_HOME"):
        candidates.append(Path(env["CUDA_HOME"]) / "bin" / "nvcc")
    found: dict[str, str] = {}
    for path in candidates:
        try:
            real = os.path.realpath(path)
            st = os.stat(real)
        except OSError:
            continue
        if os.path.isfile(real):
            found[f"program {path}"] = f"{real} {st.st_size} {st.st_mtime_ns}"
    return {**found, **{f"env {v}": env[v] for v in COMPILE_VARIABLES if v in env}}


def refuse_links(root: Path, *paths: Path) -> None:
    """BuildError when ``root`` or any component of ``paths`` below it is a symbolic link: the
    extension cache writes, removes and reads only inside the build folder, through no link."""
    for path in paths:
        for part in (path, *path.parents):
            if part.is_symlink():
                raise BuildError(
                    f"{part}: a link in the extension cache (to {os.readlink(part)}); the cache follows no link, "
                    "so that a build neither writes outside its folder nor installs what it did not build",
                    hint=f"remove the link ({part}); the next build makes the entry again",
                )
            if part == root:
                break


def _inside(path: Path, root: Path) -> bool:
    """``path`` (links resolved) lies under ``root``: nothing is read through a link that leaves it."""
    try:
        return os.path.realpath(path).startswith(os.path.realpath(root) + os.sep)
    except OSError:
        return False


def ninja_units(source: Path) -> Units | None:
    """Compile units of the ninja builds under ``source``/build/ (torch's cpp_extension writes
    build/temp.*/build.ninja) and how many of them .ninja_log records as finished with their
    object still there; None when no ninja build was started there."""
    manifests = [m for m in sorted(source.glob("build/*/build.ninja")) if _inside(m, source)]
    if not manifests:
        return None
    done = total = 0
    seconds = 0.0
    for manifest in manifests:
        folder = manifest.parent
        outputs = _objects(manifest)
        logged = _logged(folder / ".ninja_log") if _inside(folder / ".ninja_log", source) else {}
        total += len(outputs)
        for output in outputs:
            path = Path(output) if os.path.isabs(output) else folder / output
            if output in logged and _inside(path, source) and path.is_file():
                done += 1
                seconds += logged[output]
    return Units(done=done, total=total, seconds=round(seconds, 3))


def _objects(manifest: Path) -> list[str]:
    """The outputs of every edge but phony ones: the objects torch's ninja file compiles."""
    try:
        text = read_regular(manifest, "ninja build file").decode("utf-8", errors="replace")
    except OSError:
        return []
    outputs: list[str] = []
    for line in text.splitlines():
        match = _EDGE.match(line)
        if match and match.group(2) != "phony":
            outputs += [_UNESCAPE.sub(r"\1", p) for p in re.findall(_PATH, match.group(1))]
    return outputs


def _logged(log: Path) -> dict[str, float]:
    """Output -> seconds of its last finished command, from .ninja_log (a line per finished
    command: start and end in ms, mtime, path, command hash; later lines win)."""
    try:
        text = read_regular(log, "ninja log").decode("utf-8", errors="replace")
    except OSError:
        return {}
    found: dict[str, float] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 5 and parts[0].isdigit() and parts[1].isdigit():
            found[parts[3]] = max(0, int(parts[1]) - int(parts[0])) / 1000
    return found


class KeptBuild:
    """build/.extensions/<package>-<key>.partial/: an unfinished build of one wheel-cache key."""

    def __init__(self, folder: Path, key: ExtensionKey, toolchain: Mapping[str, str], root: Path | None = None) -> None:
        self.folder = folder
        self.root = root if root is not None else folder.parent  # the build folder: no link below it
        self.expected = {"key": json.loads(json.dumps(asdict(key))), "toolchain": dict(toolchain)}
        self.record = ObjectRecord(**self.expected)

    @property
    def source(self) -> Path:
        return self.folder / SOURCE

    @contextmanager
    def held(self) -> Iterator[None]:
        """One build of a key at a time: two flavours with the same key share its folder."""
        lock = self.folder.with_name(self.folder.name + ".lock")
        refuse_links(self.root, lock, self.folder)
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)  # never through a link
        os.close(fd)
        with exclusive(lock):
            refuse_links(self.root, lock, self.folder)
            yield

    def _matches(self) -> bool:
        try:
            state = loads_strict(read_regular(self.folder / STATE, "build state").decode("utf-8"))
        except (OSError, ValueError, UnicodeDecodeError):
            return False
        return state == self.expected and self.source.is_dir() and not self.source.is_symlink()

    def open(self, target: Path) -> Units | None:
        """Make ``self.source`` the tree to build: a fresh copy of ``target`` (a source folder, or
        an sdist archive unpacked). When the kept folder's state matches, it takes in what the
        earlier run's object record vouches for (trainstack.builder.objects.carry) and returns the
        units so finished (None before ninja was started); else the folder is emptied first
        (None). A copy killed half way has no state and is made again."""
        if self._matches():
            record, why = read_record(self.folder, self.expected)
            try:
                if record is not None:
                    return self._renew(target, record)
            except OSError as exc:
                why = f"its objects cannot be taken back ({exc.strerror or exc})"
            err.print(f"{self.folder.name}: {why}; building from scratch", highlight=False, markup=False)
        self.discard()
        self.folder.mkdir(parents=True)
        self._copy_source(target, self.source)
        self.record = ObjectRecord(**self.expected)
        atomic_write_json(self.folder / STATE, self.expected)  # last: the copy is whole
        return None

    def _renew(self, target: Path, record: ObjectRecord) -> Units | None:
        """A fresh copy of the source, the recorded objects moved in from the earlier tree, which
        then goes with all it held besides; the record rewritten to what was kept."""
        fresh = self.folder / (SOURCE + ".new")
        refuse_links(self.root, fresh)
        shutil.rmtree(fresh, ignore_errors=True)
        self._copy_source(target, fresh)
        carried = carry(self.source, fresh, record)
        shutil.rmtree(self.source)
        fresh.rename(self.source)
        atomic_write_json(self.folder / OBJECTS, carried.record.model_dump())
        self.record = carried.record
        line = carried.line(self.folder.name)
        if line is not None:
            err.print(line, highlight=False, markup=False)
        return ninja_units(self.source)

    def _copy_source(self, target: Path, dest: Path) -> None:
        """``target`` copied to ``dest`` (links copied as links, never followed), or the one folder
        of an sdist unpacked there, times kept (ninja compares them with its objects)."""
        staging = self.folder / (SOURCE + ".tmp")
        refuse_links(self.root, staging, dest)
        shutil.rmtree(staging, ignore_errors=True)
        if target.is_dir():
            shutil.copytree(target, staging, symlinks=True)
            staging.rename(dest)
            return
        _unpack_sdist(target, staging)
        tops = list(staging.iterdir())
        if len(tops) != 1 or not tops[0].is_dir() or tops[0].is_symlink():
            self.discard()
            raise BuildError(f"{target.name}: an sdist holds one folder, <name>-<version>/; this one holds {len(tops)} entries")
        tops[0].rename(dest)
        staging.rmdir()

    @contextmanager
    def recording(self) -> Iterator[None]:
        """While the body compiles in ``self.source``: every object ninja finishes recorded in
        objects.json as it completes (trainstack.builder.objects.ObjectRecorder)."""
        with recording(ObjectRecorder(self.folder, self.source, self.record)):
            yield

    def discard(self) -> None:
        refuse_links(self.root, self.folder)
        shutil.rmtree(self.folder, ignore_errors=True)


def _unpack_sdist(archive: Path, dest: Path) -> None:
    """A .tar.gz sdist through tarfile's data filter (no absolute paths, no way out, no devices,
    no link leaving ``dest``), a .zip one through zipfile (which drops such paths); BuildError else."""
    try:
        if archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as zipped:
                zipped.extractall(dest)
        else:
            with tarfile.open(archive) as tar:
                tar.extractall(dest, filter="data")
    except (tarfile.TarError, zipfile.BadZipFile, OSError) as exc:
        raise BuildError(f"{archive.name}: not an sdist to unpack: {exc}") from None
