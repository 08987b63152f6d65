"""From the run verb's options to the job's environment, then the job in this process's place.

The job replaces trainstack (exec), so its pid, signals and exit code are its own.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import trainstack
from trainstack.errors import ToolMissingError, UsageError
from trainstack.memplan.budget import parse_budget
from trainstack.run import settings as s
from trainstack.run.install import write_sitecustomize


@dataclass(frozen=True)
class Request:
    argv: list[str]
    out: Path
    profile_steps: str | None = None
    profile_count: int = s.DEFAULT_COUNT
    signal_name: str = "USR1"
    oom_snapshot: bool = False
    oom_entries: int = s.DEFAULT_ENTRIES
    memplan: str | None = None
    compile: bool = False


def variables(request: Request) -> dict[str, str]:
    """The TRAINSTACK_* variables for ``request`` (validated as the hook will read them)."""
    out = request.out.resolve()
    env = {
        s.PROFILE_DIR: str(out / "profile"),
        s.PROFILE_CONTROL: str(out / "control"),
        s.PROFILE_COUNT: str(request.profile_count),
        s.PROFILE_SIGNAL: request.signal_name,
    }
    if request.profile_steps:
        s.parse_steps(request.profile_steps, "--profile-steps")
        env[s.PROFILE_STEPS] = request.profile_steps
    s.parse_signal(request.signal_name, "--signal")
    if request.oom_snapshot:
        env[s.OOM_SNAPSHOT] = str(out / "oom")
        env[s.OOM_SNAPSHOT_ENTRIES] = str(request.oom_entries)
    if request.memplan is not None:
        parse_budget(request.memplan, lambda: 2**40, flag="--memplan")  # the form only: a fraction is taken of the job's GPU
        env[s.MEMPLAN] = request.memplan
    if request.compile:
        env[s.COMPILE] = "1"
    return env


RUN_VARIABLES = (*s.SWITCHES, s.PROFILE_COUNT, s.PROFILE_SIGNAL, s.PROFILE_CONTROL, s.OOM_SNAPSHOT_ENTRIES)


def replaced(base: Mapping[str, str], env: Mapping[str, str]) -> list[str]:
    """The TRAINSTACK_* variables the shell set that the job does not see as set: run's
    options decide each of them (said in a note, never silently)."""
    return [name for name in RUN_VARIABLES if base.get(name, "").strip() not in ("", "0") and env.get(name) != base[name]]


def job_env(request: Request, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The job's whole environment: ``base`` plus the variables, the hook first on PYTHONPATH."""
    if not request.argv:
        raise UsageError("no command to run; accepted: trainstack run [OPTIONS] -- python train.py ARGS")
    env = dict(os.environ if base is None else base)
    for name in RUN_VARIABLES:
        env.pop(name, None)  # the options decide, not what the shell had
    env.update(variables(request))
    hook = write_sitecustomize(request.out.resolve() / "hook")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(hook), env.get("PYTHONPATH", "")) if p)
    env[s.RUN_HOME] = str(Path(trainstack.__file__).resolve().parent.parent)
    return env


def exec_job(argv: list[str], env: dict[str, str]) -> None:
    program = shutil.which(argv[0], path=env.get("PATH"))
    if program is None:
        raise ToolMissingError(f"'{argv[0]}' is not a program on PATH", hint="give the job as: trainstack run -- python train.py ARGS")
    out = Path(env[s.PROFILE_DIR]).parent
    signal_hint = (
        f"kill -{env[s.PROFILE_SIGNAL].upper().removeprefix('SIG')} {os.getpid()} or " if s.parse_signal(env[s.PROFILE_SIGNAL]) else ""
    )
    print(
        f"trainstack run: profile the next {env[s.PROFILE_COUNT]} steps with {signal_hint}touch {env[s.PROFILE_CONTROL]}/{s.TRIGGER_FILE}; outputs in {out}",
        file=sys.stderr,
        flush=True,
    )
    sys.stdout.flush()
    os.execve(program, argv, env)
