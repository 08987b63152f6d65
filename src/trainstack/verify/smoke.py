"""Smoke checks run inside the target: one interpreter per check, so a crash costs one check."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from rich.text import Text

from trainstack.console import err
from trainstack.stackfile.models import SMOKE_CHECKS
from trainstack.verify.target import Target, run_probe

KNOWN = SMOKE_CHECKS
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
    if check not in KNOWN:
        return [SmokeResult(name=check, status="fail", reason=f"unknown smoke check (known: {', '.join(KNOWN)})", seconds=0)]
    start = time.perf_counter()
    data, reason = run_probe(target, "smoke_probe.py", [check, str(workdir), *components], timeout=TIMEOUTS.get(check, 300.0))
    if data is None:
        # the interpreter died or hung: the check fails, it is never dropped
        seconds = round(time.perf_counter() - start, 3)
        return [SmokeResult(name=name or check, status="fail", reason=reason, seconds=seconds)]
    return [SmokeResult.model_validate(item) for item in data]  # type: ignore[union-attr]
