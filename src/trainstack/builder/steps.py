"""Build steps: each one timed, shown with a spinner, logged to logs/NN-name.log, retried when it is a network step."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlparse

from rich.status import Status
from rich.text import Text

from trainstack import proc
from trainstack.builder.disk import free_gb
from trainstack.builder.record import StepRecord
from trainstack.console import err
from trainstack.errors import BuildError, DiskSpaceError, NetworkError
from trainstack.retry import TransientFailure, with_retries

T = TypeVar("T")

# Given a failed network step's output and command line: the command line of another attempt
# and why it is needed, or None when the failure is final.
Recover = Callable[[str, list[str | Path]], tuple[Sequence[str | Path], str] | None]

# What uv, pip, git, apt and debootstrap print when the network (not the input) failed.
# uv's words when it runs offline and its cache lacks something: no retry helps
OFFLINE_MISS = r"Network connectivity is disabled|the network was disabled|was not found in the cache"
_NOT_CACHED = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*) was not found in the cache")
_TRANSIENT = re.compile(
    r"timed? ?out|connection (reset|refused|closed|aborted)|temporar(y|ily)|could not resolve|"
    r"name resolution|network is unreachable|error sending request|\b50[234]\b|\b429\b|"
    r"failed to fetch|early EOF|remote end hung up|unexpected disconnect|Failed to download|"
    r"failed to lookup address|dns error",
    re.IGNORECASE,
)
# What a failed command prints when the network was not there at all (no DNS, no route): exit 5, not 7.
_NETWORK_DOWN = re.compile(
    r"failed to lookup address information|could not resolve host|name or service not known|"
    r"temporary failure in name resolution|network is unreachable|dns error",
    re.IGNORECASE,
)
_NO_SPACE = re.compile(r"No space left on device|Disk quota exceeded", re.IGNORECASE)
_NOT_TRANSIENT = re.compile(r"hash mismatch|not found|does not exist|no matching|404|" + OFFLINE_MISS, re.IGNORECASE)
_URL = re.compile(r"https?://[^\s'\"<>()\[\]`]+")
# The summary of the failed step, beside its log; the build keeps both (build/<flavour>/logs/failed-<time>/).
FAILURE_FILE = "failed.txt"
TAIL_LINES = 30


@dataclass(frozen=True)
class Failure:
    """A failed step: what ran, how it ended, its last lines and the URL it last named."""

    step: str
    command: str
    returncode: int | None
    tail: tuple[str, ...]
    url: str | None
    log: Path

    def text(self) -> str:
        head = [f"step: {self.step}", f"command: {self.command}", f"exit: {self.returncode}"]
        head += [f"url: {self.url}"] if self.url else []
        return "\n".join([*head, f"log: {self.log.name}", f"last {len(self.tail)} lines:", *self.tail]) + "\n"


def failure_of(step: str, argv: Sequence[str | Path], result: proc.Result | None, log: Path) -> Failure:
    output = (result.stdout + "\n" + result.stderr) if result is not None else ""
    urls = _URL.findall(output)
    lines = [line.rstrip() for line in output.splitlines() if line.strip()]
    return Failure(
        step=step,
        command=proc.render([str(a) for a in argv]),
        returncode=result.returncode if result is not None else None,
        tail=tuple(lines[-TAIL_LINES:]),
        url=urls[-1].rstrip(".,;:") if urls else None,
        log=log,
    )


def _host(url: str | None) -> str | None:
    """host[:port] of a URL, without any user info."""
    if not url:
        return None
    try:
        parsed = urlparse(url)
        return parsed.hostname + (f":{parsed.port}" if parsed.port else "") if parsed.hostname else None
    except ValueError:
        return None


def looks_transient(output: str) -> bool:
    return bool(_TRANSIENT.search(output)) and not _NOT_TRANSIENT.search(output)


class Steps:
    """Runs and records the steps of one flavour's build; logs go under ``root/logs``."""

    def __init__(self, root: Path, *, retries: int = 4, retry_wait: float = 1.0, shown_root: Path | None = None) -> None:
        self.root = root
        # where ``root`` ends once the build is done (a staging folder is renamed into place):
        # the log paths printed are those, so that they still exist after a successful build
        self.shown_root = shown_root
        self.records: list[StepRecord] = []
        self.retries = retries
        self.retry_wait = retry_wait
        self.failure: Failure | None = None
        self.last_output = ""  # the running step's last line of output, for its heartbeat

    def _output(self, line: str) -> None:
        self.last_output = line

    def shown(self, path: Path) -> Path:
        """``path`` (under ``root``) as it will be named once the build is done."""
        if self.shown_root is None or self.root not in path.parents:
            return path
        return self.shown_root / path.relative_to(self.root)

    def log_path(self, name: str) -> Path:
        return self.root / "logs" / f"{len(self.records) + 1:02d}-{name}.log"

    def run(
        self,
        name: str,
        argv: Sequence[str | Path],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        network: bool = False,
        free_disk_gb: float | None = None,
        recover: Recover | None = None,
        fetching: str | None = None,
    ) -> proc.Result:
        """Run a command as one step; BuildError naming the step, its exit and its log when it fails.

        A network step is tried again when its output looks transient, or when ``recover``
        turns the failed output into the command line of another attempt. When it still fails,
        NetworkError names the host of the last URL it named and ``fetching``, what it was getting.
        """
        log = self.log_path(name)
        current = list(argv)
        last: list[proc.Result] = []

        def once() -> proc.Result:
            nonlocal current
            result = proc.run(current, env=env, cwd=cwd, log=log, echo=False, on_line=self._output)
            last[:] = [result]
            if result.ok or not network:
                return result
            if looks_transient(result.stdout + result.stderr):
                raise TransientFailure(_last_line(result))
            retry = recover(result.stdout + result.stderr, current) if recover is not None else None
            if retry is not None:
                current, why = list(retry[0]), retry[1]
                raise TransientFailure(why)
            return result

        def attempt() -> proc.Result:
            if not network:
                return once()
            return with_retries(once, what=f"step {name}", attempts=self.retries, initial=self.retry_wait)

        try:
            result = self.timed(name, attempt, log=log, free_disk_gb=free_disk_gb, ok=lambda r: r.ok)
        except NetworkError as exc:
            failure = self._failed(name, current, last[0] if last else None, log)
            host = _host(failure.url)
            subject = f"fetching {fetching}" if fetching else ""
            subject += f"{' from ' if subject else ''}host {host}" if host else ""
            if subject or (failure.url and failure.url not in exc.message):
                where = "; ".join(p for p in (subject, f"last URL: {failure.url}" if failure.url else "") if p)
                raise NetworkError(f"{exc.message} ({where})", hint=f"full output in {log}") from None
            raise
        if not result.ok:
            failure = self._failed(name, current, result, log)
            output = result.stdout + result.stderr
            if re.search(OFFLINE_MISS, output):
                package = _NOT_CACHED.search(output)
                missing = f"package {package.group(1)}" if package else failure.url or "what the step needs"
                raise NetworkError(
                    f"step {name}: offline (--offline or UV_OFFLINE), and uv's cache does not hold {missing}",
                    hint="build once where the index is reachable (it fills uv's cache), or point the stack's "
                    "[index] at a mirror inside the network",
                )
            if _NO_SPACE.search(result.stdout + result.stderr):
                raise DiskSpaceError(
                    f"step {name}: no space left on the device ({free_gb(self.root):.2f} GiB free on {self.root})",
                    hint="free some space; the previous build of this flavour is unchanged",
                )
            if _NETWORK_DOWN.search(result.stdout + result.stderr):
                host = f" (last URL: {self.failure.url})" if self.failure and self.failure.url else ""
                raise NetworkError(f"step {name}: network failure: {_last_line(result)}{host}", hint=f"full output in {log}")
            raise BuildError(
                f"step {name} failed (exit {result.returncode}): {_last_line(result)}",
                hint=f"full output in {log}",
            )
        return result

    def _failed(self, name: str, argv: Sequence[str | Path], result: proc.Result | None, log: Path) -> Failure:
        """Remember the failure and write its summary beside the logs, which the build keeps."""
        self.failure = failure_of(name, argv, result, log)
        log.parent.mkdir(parents=True, exist_ok=True)
        (log.parent / FAILURE_FILE).write_text(self.failure.text(), encoding="utf-8")
        return self.failure

    def timed(
        self,
        name: str,
        fn: Callable[[], T],
        *,
        log: Path | None = None,
        free_disk_gb: float | None = None,
        detail: str = "",
        ok: Callable[[T], bool] | None = None,
    ) -> T:
        """Call ``fn`` under a spinner (a start line when not in a terminal) and record its duration.

        The step is shown and recorded as failed when ``fn`` raises or ``ok(value)`` is false.
        """
        start = time.perf_counter()
        where = f" (log: {self.shown(log)})" if log is not None else ""
        if not err.is_terminal:
            err.print(Text(f"… {name}{where}"), highlight=False)
        try:
            self.last_output = ""
            with (
                err.status(Text.assemble((name, "bold"), (where, "dim"))) as status,
                _heartbeat(name, where, start, status, lambda: self.last_output),
            ):
                value = fn()
        except KeyboardInterrupt:
            self._record(name, start, "interrupted", log, free_disk_gb, detail)
            raise
        except BaseException:
            self._record(name, start, "failed", log, free_disk_gb, detail)
            raise
        self._record(name, start, "ok" if ok is None or ok(value) else "failed", log, free_disk_gb, detail)
        return value

    def _record(self, name: str, start: float, status: str, log: Path | None, free_disk_gb: float | None, detail: str) -> None:
        seconds = time.perf_counter() - start
        rel = str(log.relative_to(self.root)) if log is not None else None
        self.records.append(
            StepRecord(name=name, seconds=round(seconds, 3), status=status, log=rel, free_disk_gb=free_disk_gb, detail=detail)
        )
        mark = Text("✓", style="green") if status == "ok" else Text("✗", style="bold red")
        err.print(
            Text.assemble(mark, " ", name, " ", (f"{seconds:.1f}s" + ("" if status == "ok" else f" {status}"), "dim")), highlight=False
        )

    def skipped(self, name: str, why: str) -> None:
        self.records.append(StepRecord(name=name, seconds=0.0, status="skipped", detail=why))
        err.print(Text.assemble(("-", "yellow"), " ", name, " ", (f"skipped: {why}", "dim")), highlight=False)


# A long step says it is alive: in a terminal its spinner counts the seconds; elsewhere (a CI
# log) a plain line every HEARTBEAT_S seconds; both with the step's last line of output.
HEARTBEAT_S = 30.0
LAST_LINE_CHARS = 160


@contextmanager
def _heartbeat(name: str, where: str, start: float, status: Status, last: Callable[[], str]) -> Iterator[None]:
    """While a step runs: in a terminal its spinner counts seconds and shows the step's last
    line of output; in a CI log a plain line with both every HEARTBEAT_S seconds."""
    stop = threading.Event()

    def beat() -> None:
        interval = 1.0 if err.is_terminal else HEARTBEAT_S
        while not stop.wait(interval):
            elapsed = time.perf_counter() - start
            line = last()[:LAST_LINE_CHARS]
            if err.is_terminal:
                status.update(Text.assemble((name, "bold"), (f" {elapsed:.0f}s", "cyan"), (f" {line}" if line else where, "dim")))
            else:
                err.print(Text(f"  {name}: running for {elapsed:.0f} s" + (f"; last: {line}" if line else "")), highlight=False)

    thread = threading.Thread(target=beat, name=f"heartbeat-{name}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _last_line(result: proc.Result) -> str:
    lines = [line.strip() for line in (result.stderr or result.stdout).splitlines() if line.strip()]
    return lines[-1] if lines else "no output"
