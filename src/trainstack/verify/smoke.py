"""Smoke checks run inside the target: one interpreter per check, so a crash costs one check."""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel
from rich.text import Text

from trainstack import proc
from trainstack.console import err
from trainstack.stackfile.schema import SMOKE_CHECKS
from trainstack.verify.target import Target, run_probe

TIMEOUTS = {"compile": 900.0, "cpp_extension": 900.0, "distributed": 300.0}


class SmokeResult(BaseModel):
    name: str  # "matmul[cpu]", "import numpy"
    status: Literal["pass", "fail", "skip"]
    reason: str
    seconds: float


def run_smoke(target: Target, checks: list[str], components: list[str], workdir: Path | None = None) -> list[SmokeResult]:
    results: list[SmokeResult] = []
    with tempfile.TemporaryDirectory(prefix="trainstack-smoke-") as tmp:
        where = workdir or Path(tmp)
        for check in checks:
            err.print(Text(f"smoke: {check}", style="dim"), highlight=False)
            if check == "imports":
                # one interpreter per component: an import that crashes costs only its own row
                for component in components:
                    results += run_check(target, check, [component], where, name=f"import {component}")
            else:
                results += run_check(target, check, [], where)
    return results


def run_check(target: Target, check: str, components: list[str], workdir: Path, *, name: str = "") -> list[SmokeResult]:
    if check not in SMOKE_CHECKS:
        return [SmokeResult(name=check, status="fail", reason=f"unknown smoke check (known: {', '.join(SMOKE_CHECKS)})", seconds=0)]
    start = time.perf_counter()
    data, reason = run_probe(target, "smoke_probe.py", [check, str(workdir), *components], timeout=TIMEOUTS.get(check, 300.0))
    if data is None:
        # the interpreter died or hung: the check fails, it is never dropped
        seconds = round(time.perf_counter() - start, 3)
        return [SmokeResult(name=name or check, status="fail", reason=reason, seconds=seconds)]
    return [_run_program(target, item) if isinstance(item, dict) and item.get("run") else SmokeResult.model_validate(item) for item in data]


def _run_program(target: Target, item: dict) -> SmokeResult:
    """A binary-only package (py-spy) is checked as its program: PROGRAM --version, in the target's
    environment. Only a program inside the target is run (the package's RECORD names it)."""
    program = Path(str(item["run"]))
    name = str(item.get("name") or program.name)
    inside = program.is_absolute() and program.resolve().is_relative_to(target.prefix.resolve())
    if not inside:
        return SmokeResult(name=name, status="fail", reason=f"{program.name}: not inside the environment", seconds=0)
    start = time.perf_counter()
    try:
        done = proc.run([program, "--version"], echo=False, timeout=60, env=target.env())
    except (OSError, subprocess.SubprocessError) as exc:
        return SmokeResult(name=name, status="fail", reason=f"{program.name} --version: {exc}", seconds=0)
    seconds = round(time.perf_counter() - start, 3)
    text = (done.stdout.strip() or done.stderr.strip()).splitlines()
    first = text[0][:300] if text else "no output"
    if not done.ok:
        return SmokeResult(name=name, status="fail", reason=f"{program.name} --version exited {done.returncode}: {first}", seconds=seconds)
    return SmokeResult(name=name, status="pass", reason=f"{program.name} --version: {first}", seconds=seconds)
