"""Compile jobs: cgroup-aware effective CPUs divided by a per-package divisor, capped, and
bounded by the memory free for compiling at a per-unit estimate."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from trainstack.buildenv import max_jobs
from trainstack.stackfile.schema import Component, JobBudget

GIB = 2**30
# The memory one compile unit takes at its peak: flash-attn's CUDA kernels (templates of
# cutlass, one head dimension per unit) take several GiB each in nvcc's cicc and ptxas.
DEFAULT_UNIT_MEMORY: dict[str, int] = {
    "torch": 2 * GIB,
    "torchvision": 2 * GIB,
    "torchaudio": 2 * GIB,
    "triton": 2 * GIB,
    "pytorch-triton": 2 * GIB,
    "flash-attn": 6 * GIB,
    "deepspeed": 2 * GIB,
    "apex": 3 * GIB,
}
FALLBACK_UNIT_MEMORY = 1 * GIB
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)(GiB|MiB|GB|MB)$")
_SIZE_UNITS = {"GiB": GIB, "MiB": 2**20, "GB": 10**9, "MB": 10**6}


def unit_memory(component: Component) -> int:
    """Bytes one compile unit of ``component`` takes: its ``jobs.memory``, else the table's, else 1 GiB."""
    if component.jobs is not None and component.jobs.memory is not None:
        match = _SIZE.match(component.jobs.memory)
        if match:  # the stack file's grammar holds it to this form
            return int(float(match.group(1)) * _SIZE_UNITS[match.group(2)])
    return DEFAULT_UNIT_MEMORY.get(canonicalize_name(component.name), FALLBACK_UNIT_MEMORY)


@dataclass(frozen=True)
class JobBound:
    """MAX_JOBS for one extension: the CPU budget's jobs, lowered to what free memory holds."""

    jobs: int
    cpu_jobs: int
    cpus: float
    divisor: int
    available: int | None  # bytes free for compiling; None where nothing could be read
    unit: int  # bytes one unit takes

    @property
    def memory_jobs(self) -> int | None:
        return None if self.available is None else self.available // self.unit

    def text(self) -> str:
        """'jobs: 3 (cores 16, memory 23 GiB at 6 GiB a unit)'; the divisor where it is not 1."""
        cores = f"cores {self.cpus:g}" + (f" / {self.divisor}" if self.divisor > 1 else "")
        memory = "memory unknown" if self.available is None else f"memory {_gib(self.available)} GiB"
        return f"jobs: {self.jobs} ({cores}, {memory} at {_gib(self.unit)} GiB a unit)"


def _gib(nbytes: int) -> str:
    return f"{nbytes / GIB:.1f}".removesuffix(".0")


def bound_jobs(cpus: float, budget: JobBudget, available: int | None, unit: int) -> JobBound:
    """The CPU budget's jobs (max_jobs) no more than ``available // unit``, never below 1."""
    cpu_jobs = max_jobs(cpus, budget)
    jobs = cpu_jobs if available is None else max(1, min(cpu_jobs, available // max(unit, 1)))
    return JobBound(jobs=jobs, cpu_jobs=cpu_jobs, cpus=cpus, divisor=budget.divisor, available=available, unit=unit)


def available_memory(
    meminfo: Path = Path("/proc/meminfo"),
    cgroup_root: Path = Path("/sys/fs/cgroup"),
    proc_self_cgroup: Path = Path("/proc/self/cgroup"),
) -> int | None:
    """Bytes a compile may still take: MemAvailable, or less where this process's cgroup (v2
    memory.max, v1 memory.limit_in_bytes, on the way to the root) leaves less room."""
    found = [room for room in (_mem_available(_read(meminfo)), cgroup_room(cgroup_root, _read(proc_self_cgroup) or "")) if room is not None]
    return min(found) if found else None


def _mem_available(text: str | None) -> int | None:
    for line in (text or "").splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "MemAvailable:" and fields[1].isdigit():
            return int(fields[1]) * 1024  # kB
    return None


def cgroup_room(root: Path, self_cgroup: str) -> int | None:
    """The least room left under a memory limit from this cgroup up to the root: limit minus
    usage, the reclaimable page cache (inactive_file) counted as free; v2 first, then v1."""
    v2, v1 = _controller_paths(self_cgroup, "memory")
    found: list[int] = []
    for directory in _ancestors(root, v2):
        limit = _read(directory / "memory.max")
        if limit and limit.isdigit():
            found.append(_room(int(limit), _read(directory / "memory.current"), _read(directory / "memory.stat"), "inactive_file"))
    if not found:
        for directory in _ancestors(root / "memory", v1):
            limit = _read(directory / "memory.limit_in_bytes")
            # no limit reads as a page-rounded 2**63 - 1
            if limit and limit.isdigit() and int(limit) < 2**62:
                found.append(
                    _room(int(limit), _read(directory / "memory.usage_in_bytes"), _read(directory / "memory.stat"), "total_inactive_file")
                )
    return min(found) if found else None


def _room(limit: int, usage: str | None, stat: str | None, cache_field: str) -> int:
    used = int(usage) if usage and usage.isdigit() else 0
    cache = 0
    for line in (stat or "").splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0] == cache_field and fields[1].isdigit():
            cache = int(fields[1])
    return max(0, limit - max(0, used - cache))


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
    return _controller_paths(self_cgroup, "cpu")


def _controller_paths(self_cgroup: str, controller: str) -> tuple[str, str]:
    """(v2 path, v1 path of ``controller``) from /proc/self/cgroup lines 'id:controllers:path'."""
    v2 = v1 = "/"
    for line in self_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
        elif controller in parts[1].split(","):
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
