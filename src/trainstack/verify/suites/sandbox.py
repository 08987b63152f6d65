"""Run a command with a read-only view of the machine, only its own folders writable, in a
PID namespace of its own that dies with the caller and at its timeout.

Run as a script by the suite runner (stdlib only, so any Python can run it):

    python -I sandbox.py [--timeout S] --writable DIR [--writable DIR ...] -- PROGRAM ARGS...
    python -I sandbox.py --check        # exit 0 when this machine lets it isolate

Process lifetime (enforced by the kernel, not by handlers the command could reach):

- this process (the *warden*) dies with its parent, the caller (PR_SET_PDEATHSIG), whatever
  signal ended the caller, SIGKILL included;
- the command runs under an *init* of its own PID namespace, which dies with the warden
  (PR_SET_PDEATHSIG again); when an init ends, the kernel kills every process of its
  namespace, daemons that double-forked and called setsid() included;
- the command can see and signal no process outside its namespace (the caller neither), and
  its init ignores every signal sent from inside;
- the warden, outside the namespace, holds the timeout: at ``--timeout`` seconds it kills the
  init (so the namespace), whether or not the caller is stopped. It then prints
  ``sandbox: timed out after S s`` and exits 124.

Mount policy (MOUNT_POLICY below, in one place): every mount read-only but each --writable
folder; a fresh /proc of the namespace with /proc/sys and the other kernel knobs read-only;
/dev read-only with a private tmpfs on /dev/shm, its device nodes usable only where DEVICES_KEPT
names them (the others, disks and loop devices among them, are /dev/null). System V
IPC of its own (CLONE_NEWIPC). Every capability but a container's default set (KEPT_CAPS: no
mounting, tracing, raw devices or sockets, device nodes, clock, network or BPF) is dropped from
the bounding set and no new privileges can be gained; then it execs PROGRAM. Where any
step fails it exits 125 with one line on stderr and runs nothing.
"""

from __future__ import annotations

import ctypes
import fnmatch
import os
import re
import select
import signal
import stat
import sys
import time

CLONE_NEWNS, CLONE_NEWPID = 0x00020000, 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
CLONE_NEWIPC = 0x08000000
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 24, 38
# The capabilities a suite keeps: those of a container's default set, less CAP_MKNOD and CAP_NET_RAW
# (this sandbox has no network namespace of its own). Every other one is dropped from the bounding
# set, so that the command runs without it: mounting and tracing (which could undo the mount
# policy), the machine's clock (CAP_SYS_TIME), its network (CAP_NET_ADMIN, CAP_NET_RAW: reading
# other processes' traffic), BPF and perf tracing, the kernel log, real-time scheduling, ...
KEPT_CAPS = {
    0: "CAP_CHOWN",
    1: "CAP_DAC_OVERRIDE",
    3: "CAP_FOWNER",
    4: "CAP_FSETID",
    5: "CAP_KILL",
    6: "CAP_SETGID",
    7: "CAP_SETUID",
    8: "CAP_SETPCAP",
    10: "CAP_NET_BIND_SERVICE",
    18: "CAP_SYS_CHROOT",
    29: "CAP_AUDIT_WRITE",
    31: "CAP_SETFCAP",
}
REFUSED, TIMED_OUT = 125, 124

# The mount policy of the suite sandbox, all of it.
READ_ONLY_PROC = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")
LEFT_AS_IS = ("/proc", "/dev/pts")  # /proc is mounted afresh; a terminal's pseudo-devices stay usable
PRIVATE_TMPFS = {"/dev/shm": "mode=1777,size=1g"}  # the suite's own, gone with its namespace
# The device nodes a suite may use (a GPU's and an RDMA card's among them); every other device node
# under /dev, every block device (a disk, a loop device) and /dev/kmsg, /dev/watchdog, the consoles,
# /dev/kvm... is covered by a bind of /dev/null: a root suite can neither write a disk nor a log.
DEVICES_KEPT = (
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/nvidia*",
    "/dev/nvidia-caps/*",
    "/dev/dri/*",
    "/dev/infiniband/*",
    "/dev/kfd",
)
MOUNT_POLICY = (
    "read-only: every mount but the suite's own work folder; a fresh /proc of its PID namespace with "
    + ", ".join(READ_ONLY_PROC)
    + " read-only; /dev read-only; private tmpfs: "
    + ", ".join(PRIVATE_TMPFS)
    + "; device nodes kept: "
    + ", ".join(DEVICES_KEPT)
    + " (every other one is /dev/null)"
    + "; System V IPC of its own; capabilities kept: "
    + ", ".join(KEPT_CAPS.values())
)


class Refused(Exception):
    pass


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return libc


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


def _under(point: str, folders: tuple[str, ...] | list[str]) -> bool:
    return any(point == p or point.startswith(p.rstrip("/") + "/") for p in folders)


def isolate(writable: list[str]) -> None:
    """The mount policy, applied in this (new) mount namespace by the init of the new PID namespace."""
    libc = _libc()
    _call("making / private", libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None))
    folders = [os.path.realpath(w) for w in writable]
    for folder in folders:  # bound before the remount: a bind mount of its own, left writable below
        _call(f"binding {folder}", libc.mount(folder.encode(), folder.encode(), None, MS_BIND | MS_REC, None))
    seen: set[str] = set()
    for point, options in _mount_points():
        if point in seen or point in folders or _under(point, LEFT_AS_IS):
            continue
        seen.add(point)
        if "ro" in options:
            continue
        _call(f"remounting {point} read-only", libc.mount(b"none", point.encode("utf-8", "surrogateescape"), None, _flags(options), None))
    for folder in folders:
        options = next((o for p, o in reversed(_mount_points()) if p == folder), set())
        flags = _flags(options) & ~MS_RDONLY
        _call(f"keeping {folder} writable", libc.mount(b"none", folder.encode(), None, flags, None))
    _call("mounting a /proc of its own", libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None))
    for knob in READ_ONLY_PROC:
        if not os.path.exists(knob):
            continue
        _call(f"binding {knob}", libc.mount(knob.encode(), knob.encode(), None, MS_BIND | MS_REC, None))
        _call(
            f"remounting {knob} read-only",
            libc.mount(b"none", knob.encode(), None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, None),
        )
    _cover_devices(libc)
    for place, tmpfs_options in PRIVATE_TMPFS.items():
        if os.path.isdir(place):
            _call(
                f"mounting a private tmpfs on {place}",
                libc.mount(b"tmpfs", place.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, tmpfs_options.encode()),
            )
    _confirm(folders)
    for cap in range(64):
        if cap not in KEPT_CAPS:
            libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # past the kernel's last one: EINVAL, nothing to drop
    _call("no new privileges", libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))


def _cover_devices(libc: ctypes.CDLL) -> None:
    """Bind /dev/null over every device node under /dev that DEVICES_KEPT does not name (links
    and the terminals of /dev/pts left as they are)."""
    for folder, subfolders, names in os.walk("/dev"):
        subfolders[:] = [d for d in subfolders if os.path.join(folder, d) not in ("/dev/pts", "/dev/shm")]
        for name in names:
            path = os.path.join(folder, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if not (stat.S_ISCHR(mode) or stat.S_ISBLK(mode)) or any(fnmatch.fnmatchcase(path, kept) for kept in DEVICES_KEPT):
                continue
            _call(f"covering {path}", libc.mount(b"/dev/null", path.encode("utf-8", "surrogateescape"), None, MS_BIND, None))


def _confirm(folders: list[str]) -> None:
    """What the policy promises, tried: / and /proc/sys refuse a write, the work folder takes one."""
    for place in ("/.trainstack-sandbox-probe", "/dev/.trainstack-sandbox-probe"):
        try:
            with open(place, "w"):
                pass
            os.unlink(place)
            raise Refused(f"{os.path.dirname(place)} is still writable after the remount")
        except OSError:
            pass
    if os.path.exists("/proc/sys/kernel/core_pattern"):
        try:
            os.close(os.open("/proc/sys/kernel/core_pattern", os.O_WRONLY))
            raise Refused("/proc/sys is still writable")
        except OSError:
            pass
    if folders:
        probe = os.path.join(folders[0], ".trainstack-sandbox-probe")
        try:
            with open(probe, "w"):
                pass
            os.unlink(probe)
        except OSError as exc:
            raise Refused(f"the work folder is not writable in the sandbox: {exc.strerror}") from None


def _die_with_parent(libc: ctypes.CDLL, alive: int | None) -> None:
    """SIGKILL this process when its parent ends; end now if it already has (``alive``: the
    read end of a pipe whose writer is the parent: readable once the parent is gone)."""
    _call("PR_SET_PDEATHSIG", libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0))
    gone = os.getppid() == 1 if alive is None else bool(select.select([alive], [], [], 0)[0])
    if gone:
        os._exit(REFUSED)


def _init(command: list[str] | None, writable: list[str], status: int, alive: int) -> None:
    """PID 1 of the namespace: set up the mounts, run the command, reap every orphan until the
    command ends, then report its wait status and end (the kernel kills what is left)."""
    try:
        libc = _libc()
        _die_with_parent(libc, alive)
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # a signal from inside reaches no handler here
        isolate(writable)
    except (Refused, OSError, ValueError) as exc:
        print(f"sandbox: cannot isolate here: {exc}", file=sys.stderr, flush=True)
        os._exit(REFUSED)
    if command is None:
        os.write(status, b"0\n")
        os._exit(0)
    child = os.fork()
    if child == 0:
        os.close(status)
        try:
            os.execvp(command[0], command)
        except OSError as exc:
            print(f"sandbox: cannot run {command[0]!r}: {exc.strerror}", file=sys.stderr, flush=True)
        os._exit(127)
    while True:
        try:
            pid, code = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(0)
        if pid == child:
            os.write(status, f"{code}\n".encode())
            os._exit(0)


def warden(command: list[str] | None, writable: list[str], timeout: float | None) -> int:
    """Make the namespaces, start their init, wait for it (at most ``timeout`` seconds), end as the command ended."""
    libc = _libc()
    try:
        _die_with_parent(libc, None)
        _call("unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC)", libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC))
    except (Refused, OSError) as exc:
        print(f"sandbox: cannot isolate here: {exc}", file=sys.stderr)
        return REFUSED
    status_read, status_write = os.pipe()
    alive_read, alive_write = os.pipe()
    init = os.fork()
    if init == 0:
        os.close(status_read)
        os.close(alive_write)
        _init(command, writable, status_write, alive_read)
    os.close(status_write)
    os.close(alive_read)
    start = time.monotonic()
    init_code = _wait(init, None if timeout is None else start + timeout)
    if init_code is None:
        os.kill(init, signal.SIGKILL)  # the init's end is the end of every process in its namespace
        os.waitpid(init, 0)
        print(
            f"sandbox: timed out after {time.monotonic() - start:.0f} s: every process of the command was killed",
            file=sys.stderr,
            flush=True,
        )
        return TIMED_OUT
    reported = os.read(status_read, 64).decode().strip()
    if not reported:
        return os.waitstatus_to_exitcode(init_code) if os.WIFEXITED(init_code) else REFUSED
    code = os.waitstatus_to_exitcode(int(reported))
    if code < 0:  # end as the command ended: killed by the same signal
        if -code not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


def _wait(pid: int, deadline: float | None) -> int | None:
    """The wait status of ``pid`` (a child), or None when it still runs at ``deadline``."""
    try:
        handle = os.pidfd_open(pid)
    except (AttributeError, OSError):  # a kernel before 5.3: polled
        handle = None
    try:
        while True:
            done, code = os.waitpid(pid, os.WNOHANG)
            if done:
                return code
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            if handle is not None:
                select.select([handle], [], [], left)
            else:
                time.sleep(0.05 if left is None else min(0.05, left))
    finally:
        if handle is not None:
            os.close(handle)


def main(argv: list[str]) -> int:
    writable: list[str] = []
    check = False
    timeout: float | None = None
    i = 0
    while i < len(argv) and argv[i] != "--":
        if argv[i] in ("--writable", "--timeout") and i + 1 < len(argv):
            if argv[i] == "--writable":
                writable.append(argv[i + 1])
            else:
                timeout = float(argv[i + 1])
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
    return warden(None if check else command, writable, timeout)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
