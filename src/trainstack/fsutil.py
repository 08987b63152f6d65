"""Atomic writes: a reader sees the old file or the new one, never half of one.

A set of files that belongs together (a lock directory, rendered files, release notes) is
replaced as one directory (``replace_tree``): written in full beside the old one, then swapped
in by one rename, under an exclusive lock so two writers take turns.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import json
import math
import os
import secrets
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any

from trainstack.errors import OutputError, SpecError, UsageError
from trainstack.redact import redact


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        # mkstemp makes 0600 files; give the result the mode a plain open() would
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: Path, text: str) -> None:
    """``text`` written as one unit, through the masking pass: no credential reaches a file."""
    atomic_write_bytes(path, redact(text).encode("utf-8"))


def dump_json(data: Any, *, allow_nan: bool = False) -> str:
    """Strict JSON: NaN and Infinity are refused (ValueError), never written as invalid JSON
    (``allow_nan`` only for a hand-off between trainstack's own processes)."""
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=allow_nan) + "\n"


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            shown = json.dumps(key, ensure_ascii=True)
            raise ValueError(f"the key {shown if len(shown) <= 60 else shown[:57] + '...'} appears twice in one object")
        found[key] = value
    return found


def loads_strict(text: str | bytes, *, allow_nan: bool = False) -> Any:
    """json.loads that refuses a key given twice in one object (which of the two a reader keeps
    differs between readers) and NaN, Infinity and -Infinity (unless ``allow_nan``: a figure a
    run could not measure), with ValueError; so too arrays or objects nested past the parser's
    recursion (a RecursionError in json.loads)."""
    constant = None if allow_nan else _refuse_constant
    try:
        return json.loads(text, parse_constant=constant, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise ValueError("arrays or objects nested too deeply") from None


def finite(value: float | None) -> bool:
    return value is None or math.isfinite(value)


def atomic_write_json(path: Path, data: Any, *, allow_nan: bool = False) -> None:
    atomic_write_text(path, dump_json(data, allow_nan=allow_nan))


READ_LIMIT = 64 << 20  # the largest file trainstack reads from a repository: 64 MiB


class LeavesFolder(OSError):
    """A symbolic link on the way to a file that leads out of the folder it must stay in."""


def read_regular(
    path: Path,
    what: str = "file",
    *,
    inside: Path | None = None,
    folder_name: str = "folder",
    links: bool = True,
    limit: int = READ_LIMIT,
) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes, read without blocking
    (a FIFO or a device is refused, never opened for reading).

    With ``inside`` (the folder a repository brings it in), every component below that folder
    is opened with O_NOFOLLOW: a symbolic link is followed only where it stays inside the folder
    (``links``=False: not at all), so no link can make trainstack read a file of the machine.
    Raises OSError subclasses with one-line text (FileNotFoundError when it is absent,
    LeavesFolder for a link out)."""
    if inside is None:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, f"is a directory; expected a {what}")
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"is {_kind(st.st_mode)}, not a regular file; expected a {what}")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    else:
        fd = _open_inside(Path(path), Path(inside), what, folder_name, links)
    # the name may have been swapped for a FIFO between stat and open: check what was opened
    # (before fdopen, which refuses a directory with text of its own)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, f"is a directory; expected a {what}")
        raise OSError(errno.EINVAL, f"is {_kind(st.st_mode)}, not a regular file; expected a {what}")
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"is larger than {limit >> 20} MiB; expected a {what}")
    return data


def read_text(
    path: Path,
    what: str,
    *,
    inside: Path | None = None,
    folder_name: str = "folder",
    missing: str | None = None,
    hint: str | None = None,
) -> str:
    """The UTF-8 text of a file a repository brings, read as read_regular reads it; SpecError
    naming the file when it cannot be read (``missing``: the words for a file that is not
    there, else the system's) or is not UTF-8 text (``hint``: what it should be, by default
    'expected <what>')."""
    try:
        return read_regular(path, what, inside=inside, folder_name=folder_name).decode("utf-8")
    except FileNotFoundError as exc:
        raise SpecError(f"{path}: {missing or 'cannot read: ' + describe_os_error(exc)}") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read: {describe_os_error(exc)}") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 text (byte {exc.start}); {hint or 'expected ' + what}") from None


_MAX_LINKS = 40  # as the kernel's own limit on links followed in one path


def _open_inside(path: Path, folder: Path, what: str, folder_name: str, links: bool) -> int:
    """A descriptor of ``path`` opened one component at a time below ``folder``, each with
    O_NOFOLLOW; a link met on the way is followed only while it stays inside ``folder``."""
    root = os.path.abspath(folder)
    target = os.path.abspath(path)
    if os.path.commonpath([root, target]) != root or target == root:
        raise LeavesFolder(errno.EXDEV, f"is not inside the {folder_name} {folder}; a {what} is a file in it")
    parts = os.path.relpath(target, root).split(os.sep)
    for _ in range(_MAX_LINKS + 1):
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for index, part in enumerate(parts):
                last = index == len(parts) - 1
                flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | (0 if last else os.O_DIRECTORY)
                try:
                    opened = os.open(part, flags, dir_fd=fd)
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR) or not _is_link(part, fd):
                        raise
                    parts = _through_link(root, parts, index, os.readlink(part, dir_fd=fd), folder, what, folder_name, links)
                    break
                os.close(fd)
                fd = opened
            else:
                opened, fd = fd, -1
                return opened
        finally:
            if fd >= 0:
                os.close(fd)
    raise LeavesFolder(errno.ELOOP, f"has more than {_MAX_LINKS} symbolic links on its way; a {what} is a file")


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def _through_link(root: str, parts: list[str], index: int, link: str, folder: Path, what: str, folder_name: str, links: bool) -> list[str]:
    """The components below ``root`` that the link at ``parts[index]`` stands for; LeavesFolder
    when it leads out of the folder (or when no link is allowed)."""
    # the link named: the file itself, or the folder on its way that is one
    link_is = "is" if index == len(parts) - 1 else f"is in {os.path.join(root, *parts[: index + 1])}, which is"
    if not links:
        raise LeavesFolder(errno.ELOOP, f"{link_is} a symbolic link; a {what} is a file in the {folder_name} {folder}, not a link")
    landed = os.path.normpath(os.path.join(root, *parts[:index], link))
    if os.path.commonpath([root, landed]) != root or landed == root:
        raise LeavesFolder(errno.EXDEV, f"{link_is} a symbolic link that leads out of the {folder_name} {folder}; a {what} is a file in it")
    return os.path.relpath(landed, root).split(os.sep) + parts[index + 1 :]


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "a special file"


# Kernel filesystems: a result written there is lost or refused (a tmpfs at /dev/shm is a real place).
SPECIAL_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))
REAL_UNDER_SPECIAL = (Path("/dev/shm"),)


def check_output(path: Path, option: str, *, folder: bool = False) -> Path:
    """Refuse, before any work, an output path that could not be written: one UsageError naming
    ``option``, the path and what would be accepted. ``folder``: the verb writes a folder there
    (made if missing), else a file (replaced if present). Refused: a folder where a file is
    wanted or the reverse, a special file (a FIFO, a device), a path under /proc, /sys or
    /dev, and a place where nothing can be created (read-only, no permission, a file as a
    parent). The check writes nothing."""
    want = "a folder (made if missing)" if folder else "a file path (made, or replaced if it exists)"

    def refuse(why: str) -> UsageError:
        return UsageError(f"{option} {path}: {why}; accepted: {want}")

    real = Path(os.path.realpath(path))
    if any(real == root or root in real.parents for root in SPECIAL_ROOTS) and not any(
        real == ok or ok in real.parents for ok in REAL_UNDER_SPECIAL
    ):
        raise refuse("a special path (under /proc, /sys or /dev)")
    try:
        mode: int | None = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise refuse(describe_os_error(exc)) from None
    if mode is not None:
        if stat.S_ISDIR(mode) and not folder:
            raise refuse("is a directory")
        if not stat.S_ISDIR(mode) and folder:
            raise refuse("is a file" if stat.S_ISREG(mode) else f"is {_kind(mode)}")
        if not stat.S_ISDIR(mode) and not stat.S_ISREG(mode):
            raise refuse(f"is {_kind(mode)}, not a regular file")
    place = real if mode is not None and folder else _nearest_existing(real.parent)
    if not place.is_dir():
        raise refuse(f"{place} is not a folder")
    if not os.access(place, os.W_OK | os.X_OK):  # a read-only mount refuses root too
        why = "a read-only filesystem" if os.statvfs(place).f_flag & os.ST_RDONLY else "no permission"
        raise refuse(f"nothing can be written in {place} ({why})")
    return path


def _nearest_existing(path: Path) -> Path:
    """``path`` or its closest ancestor that exists (the root at worst): bounded by its parts."""
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path(path.anchor or ".")


def describe_os_error(exc: OSError) -> str:
    """'No space left on device' rather than '[Errno 28] No space left on device: '/x''."""
    return exc.strerror or str(exc)


@contextmanager
def exclusive(path: Path, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive flock on ``path`` (a file or a directory, opened read-only).

    A second holder waits until the first is done; ``on_wait`` is called once if it has to.
    Where the filesystem has no flock (some network filesystems) the work goes on unlocked.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EBADF, errno.EINVAL):
                raise
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def read_tree(root: Path) -> dict[str, bytes] | None:
    """Relative path -> bytes of every regular file under ``root``; None when ``root`` is absent.

    Anything else in the tree (a link, a FIFO, a device) makes it None too: such a tree is
    never equal to one that ``replace_tree`` writes, so it is replaced.
    """
    if not root.is_dir():
        return None
    found: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink() or not (path.is_dir() or path.is_file()):
            return None
        if path.is_file():
            found[path.relative_to(root).as_posix()] = path.read_bytes()
    return found


def replace_tree(final: Path, files: Mapping[str, bytes], *, mode: int | None = None) -> bool:
    """Make the directory ``final`` hold exactly ``files`` (relative path -> bytes), as one step.

    The new tree is written in full to a staging directory beside ``final`` and swapped in
    with one rename; a reader (or a process killed at any point) sees the old tree or the new
    one, never a mix. Writers take turns through an exclusive lock on the parent directory,
    and clean up what a killed writer left. Unchanged content writes nothing: returns False.
    A failed write (disk full, permission) raises OutputError and leaves ``final`` as it was.
    """
    parent = final.parent
    try:
        if not parent.is_dir():
            parent.mkdir(parents=True)
        with exclusive(parent):
            _recover(final)
            if read_tree(final) == dict(files):
                return False
            staging = parent / f".{final.name}.staging-{secrets.token_hex(4)}"
            try:
                _write_staging(staging, files, mode)
                swap_dir(staging, final)
                _fsync_dirs([parent])  # the rename itself on disk, not only in the page cache
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    except OSError as exc:
        raise OutputError(f"{final}: cannot write: {describe_os_error(exc)}", hint="nothing was replaced") from None
    return True


def _write_staging(staging: Path, files: Mapping[str, bytes], mode: int | None) -> None:
    """Every file written and synced to disk in a new directory, with the modes open() gives."""
    staging.mkdir()
    made = {staging}
    for relative, data in sorted(files.items()):
        parts = PurePosixPath(relative).parts
        if not parts or PurePosixPath(relative).is_absolute() or ".." in parts:
            raise ValueError(f"{relative!r}: not a path inside the output directory")
        target = staging.joinpath(*parts)
        for directory in reversed(target.parents):
            if directory not in made and staging in directory.parents:
                directory.mkdir()
                made.add(directory)
        with open(target, "xb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(target, mode)
    _fsync_dirs(sorted(made))


def _fsync_dirs(directories: list[Path]) -> None:
    for directory in directories:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def recover_tree(final: Path) -> None:
    """What ``replace_tree`` does first, alone: finish or undo an interrupted replacement."""
    if final.parent.is_dir():
        with exclusive(final.parent):
            _recover(final)


def _recover(final: Path) -> None:
    """Undo what an interrupted writer left: a moved-aside tree put back, staging trees removed."""
    old = final.with_name(f".{final.name}.old")
    if old.exists() and not final.exists():
        os.replace(old, final)  # killed between the two renames of the fallback swap
    for leftover in final.parent.glob(f".{final.name}.staging-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    if old.exists():
        shutil.rmtree(old, ignore_errors=True)


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def exchange_dirs(a: Path, b: Path) -> bool:
    """Linux renameat2(RENAME_EXCHANGE): both names swap in one step. False where unsupported."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    func = getattr(libc, "renameat2", None)
    if func is None:
        return False
    sys.audit("trainstack.exchange_dirs", str(a), str(b))  # a foreign call raises no audit event of its own
    if func(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False  # this kernel or filesystem cannot exchange
    raise OSError(code, os.strerror(code), str(b))


def swap_dir(staging: Path, final: Path) -> None:
    """Put the finished ``staging`` at ``final``; the previous tree ends at ``staging`` (for removal).

    One rename when ``final`` is new, one exchange when it exists; where the filesystem cannot
    exchange, the old tree is moved aside first (``replace_tree`` puts it back if interrupted).
    """
    if not final.exists():
        os.rename(staging, final)
        return
    if exchange_dirs(staging, final):
        return
    replace_dir(staging, final)


def replace_dir(staging: Path, final: Path) -> None:
    """Swap a finished ``staging`` directory into place of ``final``.

    The old directory is moved aside first and removed only after the swap, so an
    interruption leaves either the old or the new tree at ``final``.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    old = final.with_name(f".{final.name}.old")
    if old.exists():
        shutil.rmtree(old)
    if final.exists():
        os.replace(final, old)
    os.replace(staging, final)
    if old.exists():
        shutil.rmtree(old, ignore_errors=True)
