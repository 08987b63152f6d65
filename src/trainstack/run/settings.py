"""What the job asked for, read from ``TRAINSTACK_*`` environment variables (pure, no torch).

The variables are the one interface: ``trainstack run`` sets them, an image or a scheduler
may set them itself; the hook reads them in every process of the job.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trainstack.errors import UsageError

PROFILE_DIR = "TRAINSTACK_PROFILE_DIR"  # where traces and tables go; arms the signal and file triggers
PROFILE_STEPS = "TRAINSTACK_PROFILE_STEPS"  # A:B, optimizer steps A..B-1 counted from 0 (A >= 1: a step is seen at its end)
PROFILE_COUNT = "TRAINSTACK_PROFILE_COUNT"  # steps profiled per signal or file trigger
PROFILE_SIGNAL = "TRAINSTACK_PROFILE_SIGNAL"  # USR1 (default), USR2 or off
PROFILE_CONTROL = "TRAINSTACK_PROFILE_CONTROL"  # folder whose file 'profile', when touched, triggers
OOM_SNAPSHOT = "TRAINSTACK_OOM_SNAPSHOT"  # folder for the snapshot, its HTML view and the diagnosis
OOM_SNAPSHOT_ENTRIES = "TRAINSTACK_OOM_SNAPSHOT_ENTRIES"  # allocator events kept in the ring
MEMPLAN = "TRAINSTACK_MEMPLAN"  # budget: '20GiB' or a fraction of the GPU such as '0.8'
COMPILE = "TRAINSTACK_COMPILE"  # 1: torch.compile each block of the job's model
# any of these set turns the hook on (boot.py, which imports nothing of trainstack, holds a copy)
SWITCHES = (PROFILE_DIR, PROFILE_STEPS, OOM_SNAPSHOT, MEMPLAN, COMPILE)
RUN_HOME = "TRAINSTACK_RUN_HOME"  # where trainstack is importable from, for a Python without it

DEFAULT_COUNT = 3
DEFAULT_ENTRIES = 100_000
TRIGGER_FILE = "profile"
SIGNALS = {"USR1": signal.SIGUSR1, "USR2": signal.SIGUSR2}
_STEPS = re.compile(r"[ \t]*([0-9]{1,9})[ \t]*:[ \t]*([0-9]{1,9})[ \t]*", re.ASCII)  # ASCII digits only
_COUNT = re.compile(r"[0-9]{1,9}", re.ASCII)
MAX_COUNT = 1_000_000  # steps profiled per trigger
MAX_ENTRIES = 100_000_000  # allocator events kept in the OOM snapshot's ring
MAX_RANK = 1 << 24
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}


@dataclass(frozen=True)
class Settings:
    profile_dir: Path | None = None
    profile_steps: tuple[int, int] | None = None  # [first, stop)
    profile_count: int = DEFAULT_COUNT
    profile_signal: int | None = None
    control_dir: Path | None = None
    oom_dir: Path | None = None
    oom_entries: int = DEFAULT_ENTRIES
    memplan: str | None = None
    compile: bool = False

    @property
    def profiling(self) -> bool:
        return self.profile_dir is not None

    @property
    def needs_model(self) -> bool:
        """The job's model is captured: to plan it, compile it, or diagnose an OOM with it."""
        return self.memplan is not None or self.compile or self.oom_dir is not None

    @property
    def active(self) -> bool:
        return self.profiling or self.needs_model


def parse_steps(text: str, where: str = PROFILE_STEPS) -> tuple[int, int]:
    m = _STEPS.fullmatch(text)
    if not m or not 1 <= int(m.group(1)) < int(m.group(2)):
        raise UsageError(
            f"{where}: {_shown(text)} is not a step range; accepted: A:B with 1 <= A < B (ASCII digits, "
            "at most 9 each), optimizer steps A to B-1 counted from 0"
        )
    return int(m.group(1)), int(m.group(2))


def parse_signal(text: str, where: str = PROFILE_SIGNAL) -> int | None:
    name = text.strip().upper().removeprefix("SIG")
    if name in ("OFF", "NONE"):
        return None
    if name not in SIGNALS:
        raise UsageError(f"{where}: {_shown(text)} is not a profiling signal; accepted: USR1, USR2 or off")
    return SIGNALS[name]


def _shown(text: str) -> str:
    """A variable's value as an error line may show it: quoted, escaped, cut to 60 characters."""
    return repr(text[:60]) + ("..." if len(text) > 60 else "")


def _positive(environ: Mapping[str, str], name: str, default: int, most: int) -> int:
    text = environ.get(name, "").strip(" \t")
    if not text:
        return default
    if not _COUNT.fullmatch(text) or not 1 <= int(text) <= most:
        raise UsageError(f"{name}: {_shown(text)} is not a count; accepted: a whole number from 1 to {most} in ASCII digits")
    return int(text)


def _flag(environ: Mapping[str, str], name: str) -> bool:
    text = environ.get(name, "").strip(" \t").lower()
    if text not in _TRUE | _FALSE:
        raise UsageError(f"{name}: {_shown(text)} is not a switch; accepted: 1 or 0")
    return text in _TRUE


def from_env(environ: Mapping[str, str]) -> Settings:
    """The settings the variables ask for; a bad value raises UsageError naming the variable."""
    profile_dir = Path(environ[PROFILE_DIR]) if environ.get(PROFILE_DIR) else None
    steps = parse_steps(environ[PROFILE_STEPS]) if environ.get(PROFILE_STEPS, "").strip() else None
    if steps is not None and profile_dir is None:
        profile_dir = Path("trainstack-profile")
    armed = profile_dir is not None
    control = environ.get(PROFILE_CONTROL) or (str(profile_dir / "control") if profile_dir is not None else "")
    oom = environ.get(OOM_SNAPSHOT, "").strip()
    return Settings(
        profile_dir=profile_dir,
        profile_steps=steps,
        profile_count=_positive(environ, PROFILE_COUNT, DEFAULT_COUNT, MAX_COUNT),
        profile_signal=parse_signal(environ.get(PROFILE_SIGNAL, "USR1")) if armed else None,
        control_dir=Path(control) if control else None,
        oom_dir=Path(oom) if oom not in _FALSE else None,
        oom_entries=_positive(environ, OOM_SNAPSHOT_ENTRIES, DEFAULT_ENTRIES, MAX_ENTRIES),
        memplan=environ.get(MEMPLAN, "").strip() or None,
        compile=_flag(environ, COMPILE),
    )


def rank(environ: Mapping[str, str]) -> int:
    """This process's rank under torchrun (or another launcher that sets RANK); 0 alone.
    UsageError for a value that is not a rank (ASCII digits, below 2**24)."""
    text = environ.get("RANK", "0").strip(" \t") or "0"
    if not _COUNT.fullmatch(text) or int(text) >= MAX_RANK:
        raise UsageError(f"RANK: {_shown(text)} is not a rank; accepted: a whole number from 0 in ASCII digits")
    return int(text)
