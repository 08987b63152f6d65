"""Compile jobs: cgroup-aware effective CPUs divided by a per-package divisor, capped."""

from __future__ import annotations

import math
import os
from pathlib import Path

from packaging.utils import canonicalize_name

from trainstack.stackfile.models import Component, JobBudget

# Compiling these packages needs far more memory per job than CPUs per job, hence the divisors.
DEFAULT_BUDGETS: dict[str, JobBudget] = {
    "torch": JobBudget(divisor=3, cap=32),
    "torchvision": JobBudget(divisor=3, cap=32),
    "torchaudio": JobBudget(divisor=3, cap=32),
    "triton": JobBudget(divisor=3, cap=32),
    "pytorch-triton": JobBudget(divisor=3, cap=32),
    "flash-attn": JobBudget(divisor=8, cap=12),
    "deepspeed": JobBudget(divisor=4, cap=24),
    "apex": JobBudget(divisor=8, cap=24),
}
FALLBACK_BUDGET = JobBudget(divisor=1, cap=64)


def budget_for(component: Component) -> JobBudget:
    """The component's own ``jobs`` setting, else the table's row for its package, else 1/1 capped at 64."""
    if component.jobs is not None:
        return component.jobs
    return DEFAULT_BUDGETS.get(canonicalize_name(component.name), FALLBACK_BUDGET)


def max_jobs(cpus: float, budget: JobBudget) -> int:
    return max(1, min(budget.cap, math.floor(cpus / budget.divisor)))


def effective_cpus(cgroup_root: Path = Path("/sys/fs/cgroup"), proc_self_cgroup: Path = Path("/proc/self/cgroup")) -> float:
    """CPUs this process may really use: the cgroup v2 or v1 CPU quota when set, else the affinity mask."""
    online = float(len(os.sched_getaffinity(0)))
    quota = cgroup_quota(cgroup_root, _read(proc_self_cgroup) or "")
    return min(online, quota) if quota is not None else online


def cgroup_quota(root: Path, self_cgroup: str) -> float | None:
    """The tightest CPU quota (in CPUs) on the way from this cgroup to the root, v2 first, then v1."""
    v2, v1 = _paths(self_cgroup)
    found: list[float] = []
    for directory in _ancestors(root, v2):
        value = _v2_quota(_read(directory / "cpu.max"))
        if value is not None:
            found.append(value)
    if not found:
        for base in (root / "cpu,cpuacct", root / "cpu"):
            for directory in _ancestors(base, v1):
                value = _v1_quota(_read(directory / "cpu.cfs_quota_us"), _read(directory / "cpu.cfs_period_us"))
                if value is not None:
                    found.append(value)
            if found:
                break
    return min(found) if found else None


def _paths(self_cgroup: str) -> tuple[str, str]:
    """(v2 path, v1 cpu controller path) from /proc/self/cgroup lines 'id:controllers:path'."""
    v2 = v1 = "/"
    for line in self_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
        elif "cpu" in parts[1].split(","):
            v1 = parts[2]
    return v2, v1


def _ancestors(base: Path, cgroup_path: str) -> list[Path]:
    parts = [p for p in cgroup_path.strip().split("/") if p]
    return [base.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def _v2_quota(text: str | None) -> float | None:
    if not text:
        return None
    fields = text.split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    return int(fields[0]) / int(fields[1])


def _v1_quota(quota: str | None, period: str | None) -> float | None:
    if not quota or not period or int(quota) <= 0:
        return None
    return int(quota) / int(period)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
