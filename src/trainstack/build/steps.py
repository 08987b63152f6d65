"""Build steps: each one timed, shown with a spinner, logged to logs/NN-name.log, retried when it is a network step."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from trainstack import proc
from trainstack.build.record import StepRecord
from trainstack.console import err
from trainstack.build.disk import free_gb
from trainstack.errors import BuildError, DiskSpaceError
from trainstack.retry import TransientFailure, with_retries

T = TypeVar("T")

# Given a failed network step's output and command line: the command line of another attempt
# and why it is needed, or None when the failure is final.
Recover = Callable[[str, list[str | Path]], tuple[Sequence[str | Path], str] | None]

# What uv, pip, git, apt and debootstrap print when the network (not the input) failed.
_TRANSIENT = re.compile(
    r"timed? ?out|connection (reset|refused|closed|aborted)|temporar(y|ily)|could not resolve|"
    r"name resolution|network is unreachable|error sending request|\b50[234]\b|\b429\b|"
    r"failed to fetch|early EOF|remote end hung up|unexpected disconnect|Failed to download",
    re.IGNORECASE,
)
_NO_SPACE = re.compile(r"No space left on device|Disk quota exceeded", re.IGNORECASE)
_NOT_TRANSIENT = re.compile(r"hash mismatch|not found|does not exist|no matching|404", re.IGNORECASE)


def looks_transient(output: str) -> bool:
    return bool(_TRANSIENT.search(output)) and not _NOT_TRANSIENT.search(output)


class Steps:
    """Runs and records the steps of one flavour's build; logs go under ``root/logs``."""

    def __init__(self, root: Path, *, retries: int = 4, retry_wait: float = 1.0) -> None:
        self.root = root
        self.records: list[StepRecord] = []
        self.retries = retries
        self.retry_wait = retry_wait

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
    ) -> proc.Result:
        """Run a command as one step; BuildError naming the step, its exit and its log when it fails.

        A network step is tried again when its output looks transient, or when ``recover``
        turns the failed output into the command line of another attempt.
        """
        log = self.log_path(name)
        current = list(argv)

        def once() -> proc.Result:
            nonlocal current
            result = proc.run(current, env=env, cwd=cwd, log=log, echo=False)
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

        result = self.timed(name, attempt, log=log, free_disk_gb=free_disk_gb)
        if not result.ok:
            self.records[-1] = self.records[-1].model_copy(update={"status": "failed"})
            if _NO_SPACE.search(result.stdout + result.stderr):
                raise DiskSpaceError(
                    f"step {name}: no space left on the device ({free_gb(self.root):.2f} GiB free on {self.root})",
                    hint="free some space; the previous build of this flavour is unchanged",
                )
            raise BuildError(
                f"step {name} failed (exit {result.returncode}): {_last_line(result)}",
                hint=f"full output in {log}",
            )
        return result

    def timed(
        self, name: str, fn: Callable[[], T], *, log: Path | None = None, free_disk_gb: float | None = None, detail: str = ""
    ) -> T:
        """Call ``fn`` under a spinner and record its duration."""
        start = time.perf_counter()
        with err.status(f"[bold]{name}[/]"):
            value = fn()
        seconds = time.perf_counter() - start
        rel = str(log.relative_to(self.root)) if log is not None else None
        self.records.append(StepRecord(name=name, seconds=round(seconds, 3), status="ok", log=rel, free_disk_gb=free_disk_gb, detail=detail))
        err.print(f"[green]✓[/] {name} [dim]{seconds:.1f}s[/]", highlight=False)
        return value

    def skipped(self, name: str, why: str) -> None:
        self.records.append(StepRecord(name=name, seconds=0.0, status="skipped", detail=why))
        err.print(f"[yellow]-[/] {name} [dim]skipped: {why}[/]", highlight=False)


def _last_line(result: proc.Result) -> str:
    lines = [line.strip() for line in (result.stderr or result.stdout).splitlines() if line.strip()]
    return lines[-1] if lines else "no output"
