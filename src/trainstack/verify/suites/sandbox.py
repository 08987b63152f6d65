"""Run a command with a read-only view of the machine and only its own folders writable.

Run as a script by the suite runner (stdlib only, so any Python can run it):

    python -I sandbox.py --writable DIR [--writable DIR ...] -- PROGRAM ARGS...
    python -I sandbox.py --check        # exit 0 when this machine lets it isolate

In a mount namespace of its own (unshare(CLONE_NEWNS), nothing propagated back), every mount
but /proc, /dev and their sub-mounts is remounted read-only, each --writable folder is bound
over itself writable, the capabilities that could undo that (mounting, raw devices, device
nodes, tracing) are dropped from the bounding set and no new privileges can be gained; then it
execs PROGRAM. Where any step fails it exits 125 with one line on stderr and runs nothing.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys

CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 24, 38
# CAP_DAC_READ_SEARCH (open_by_handle_at), CAP_SYS_MODULE, CAP_SYS_RAWIO, CAP_SYS_PTRACE,
# CAP_SYS_ADMIN (mount), CAP_SYS_BOOT, CAP_MKNOD
DROPPED_CAPS = (2, 16, 17, 19, 21, 22, 27)
LEFT_WRITABLE = ("/proc", "/dev")  # what a process needs to run (/dev/null, /dev/shm, its own /proc)
REFUSED = 125


class Refused(Exception):
    pass


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _call(what: str, result: int) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise Refused(f"{what}: {os.strerror(errno)}")


def _mount_points() -> list[tuple[str, set[str]]]:
    """(mount point, its per-mount flags) of this namespace, parents before children."""
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as fh:
        for line in fh:
            fields = line.split()
            if len(fields) < 6:
                continue
            # the kernel writes space, tab, newline and backslash in a path as octal escapes
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            points.append((point, set(fields[5].split(","))))
    return points


def _flags(options: set[str]) -> int:
    flags = MS_BIND | MS_REMOUNT | MS_RDONLY
    for name, bit in (("nosuid", MS_NOSUID), ("nodev", MS_NODEV), ("noexec", MS_NOEXEC)):
        if name in options:
            flags |= bit  # a remount must keep the locked flags it had
    return flags


def isolate(writable: list[str]) -> None:
    libc = _libc()
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    _call("unshare(CLONE_NEWNS)", libc.unshare(CLONE_NEWNS))
    _call("making / private", libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None))
    folders = [os.path.realpath(w) for w in writable]
    for folder in folders:  # bound before the remount: a bind mount of its own, left writable below
        _call(f"binding {folder}", libc.mount(folder.encode(), folder.encode(), None, MS_BIND | MS_REC, None))
    seen: set[str] = set()
    for point, options in _mount_points():
        if point in seen or point in folders or any(point == p or point.startswith(p + "/") for p in LEFT_WRITABLE):
            continue
        seen.add(point)
        if "ro" in options:
            continue
        _call(f"remounting {point} read-only",
              libc.mount(b"none", point.encode("utf-8", "surrogateescape"), None, _flags(options), None))
    for folder in folders:
        options = next((o for p, o in reversed(_mount_points()) if p == folder), set())
        flags = (_flags(options) & ~MS_RDONLY)
        _call(f"keeping {folder} writable", libc.mount(b"none", folder.encode(), None, flags, None))
    probe = os.path.join(folders[0], ".trainstack-sandbox-probe") if folders else None
    try:
        with open("/.trainstack-sandbox-probe", "w"):
            pass
        os.unlink("/.trainstack-sandbox-probe")
        raise Refused("/ is still writable after the remount")
    except OSError:
        pass
    if probe is not None:
        try:
            with open(probe, "w"):
                pass
            os.unlink(probe)
        except OSError as exc:
            raise Refused(f"the work folder is not writable in the sandbox: {exc.strerror}") from None
    for cap in DROPPED_CAPS:
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # a kernel without one of them has nothing to drop
    _call("no new privileges", libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))


def main(argv: list[str]) -> int:
    writable: list[str] = []
    check = False
    i = 0
    while i < len(argv) and argv[i] != "--":
        if argv[i] == "--writable" and i + 1 < len(argv):
            writable.append(argv[i + 1])
            i += 2
        elif argv[i] == "--check":
            check = True
            i += 1
        else:
            print(f"sandbox: unknown argument {argv[i]!r}", file=sys.stderr)
            return REFUSED
    command = argv[i + 1 :]
    if not check and not command:
        print("sandbox: no command after --", file=sys.stderr)
        return REFUSED
    try:
        isolate(writable)
    except (Refused, OSError, ValueError) as exc:
        print(f"sandbox: cannot isolate here: {exc}", file=sys.stderr)
        return REFUSED
    if check:
        return 0
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"sandbox: cannot run {command[0]!r}: {exc.strerror}", file=sys.stderr)
        return 127
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
