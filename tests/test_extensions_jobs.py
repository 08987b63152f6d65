"""Memory-aware compile jobs: the CPU budget lowered to what free memory holds at a per-unit
estimate (pure arithmetic, on values recorded from real machines), and the edge read of
/proc/meminfo and the cgroup v1 and v2 memory files."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from trainstack.builder.cpu import GIB, available_memory, bound_jobs, cgroup_room, unit_memory
from trainstack.buildenv import budget_for
from trainstack.cli import main
from trainstack.stackfile.schema import Component, JobBudget

ROOT = Path(__file__).resolve().parent.parent

# this build machine: 2 CPUs, no cgroup memory limit (v1, the page-rounded 2**63 - 1)
MEMINFO = "MemTotal:       24731400 kB\nMemFree:         1203920 kB\nMemAvailable:   22935084 kB\nBuffers:          412300 kB\n"
SELF_V1 = "9:name=systemd:/\n4:memory:/process_api/0bb52a5cfb5f9aa627635bd3b87bff35\n1:cpu:/\n0::/\n"
NO_LIMIT = "9223372036854771712"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_memory_lowers_the_cpu_budget_and_the_bound_is_said() -> None:
    plain = JobBudget(divisor=1, cap=64)
    bound = bound_jobs(16, plain, 23 * GIB, 6 * GIB)
    assert (bound.jobs, bound.cpu_jobs, bound.memory_jobs) == (3, 16, 3)
    assert bound.text() == "jobs: 3 (cores 16, memory 23 GiB at 6 GiB a unit)"
    # flash-attn on the 16-core GPU machine: its divisor (8) binds before 123 GiB free does
    flash = bound_jobs(16, budget_for(Component(name="flash-attn")), 123 * GIB, unit_memory(Component(name="flash_attn")))
    assert flash.jobs == 2 and flash.text() == "jobs: 2 (cores 16 / 8, memory 123 GiB at 6 GiB a unit)"
    # this machine: 2 cores, 21.9 GiB available, apex at 3 GiB a unit
    apex = bound_jobs(2, budget_for(Component(name="apex")), 22935084 * 1024, unit_memory(Component(name="apex")))
    assert apex.jobs == 1 and apex.text() == "jobs: 1 (cores 2 / 8, memory 21.9 GiB at 3 GiB a unit)"
    assert bound_jobs(64, plain, 2 * GIB, 6 * GIB).jobs == 1  # never zero
    unknown = bound_jobs(8, plain, None, GIB)
    assert unknown.jobs == 8 and unknown.text() == "jobs: 8 (cores 8, memory unknown at 1 GiB a unit)"


def test_the_unit_estimate_comes_from_the_stack_then_the_table() -> None:
    assert unit_memory(Component(name="flash-attn")) == 6 * GIB
    assert unit_memory(Component(name="some-ext")) == GIB
    own = Component(name="flash-attn", jobs=JobBudget(divisor=2, cap=8, memory="9.5GiB"))
    assert unit_memory(own) == int(9.5 * GIB)
    assert unit_memory(Component(name="x", jobs=JobBudget(divisor=1, cap=2, memory="800MB"))) == 800 * 10**6
    with pytest.raises(ValidationError, match="'6' is not a size; accepted"):
        JobBudget(divisor=1, cap=2, memory="6")  # a size needs its unit


def test_a_unit_estimate_without_its_unit_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "examples" / "stacks" / "torch-cuda.toml").read_text(encoding="utf-8")
    stack = tmp_path / "stack.toml"
    stack.write_text(text.replace("jobs = { divisor = 8, cap = 12 }", 'jobs = { divisor = 8, cap = 12, memory = "6" }'), encoding="utf-8")
    line = next(n for n, row in enumerate(stack.read_text().splitlines(), 1) if 'memory = "6"' in row)
    assert main(["check", str(stack)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"error: {stack}:{line}: components.flash-attn.jobs.memory: '6' is not a size; accepted: a number with its unit, "
        "such as '6GiB', '7.5GB' or '800MiB'"
    ]


def test_meminfo_and_an_unlimited_v1_cgroup_as_recorded_here(tmp_path: Path) -> None:
    write(tmp_path / "meminfo", MEMINFO)
    root = tmp_path / "cgroup"
    for folder in (root / "memory", root / "memory" / "process_api", root / "memory" / "process_api" / "0bb52a5cfb5f9aa627635bd3b87bff35"):
        write(folder / "memory.limit_in_bytes", NO_LIMIT)
        write(folder / "memory.usage_in_bytes", "51466240")
    write(tmp_path / "self", SELF_V1)
    assert available_memory(tmp_path / "meminfo", root, tmp_path / "self") == 22935084 * 1024


def test_a_cgroup_limit_leaves_less_than_meminfo(tmp_path: Path) -> None:
    write(tmp_path / "meminfo", MEMINFO)
    root = tmp_path / "cgroup"
    # v2: a job's cgroup of 8 GiB using 5 GiB, 1 GiB of it reclaimable page cache; its parent unlimited
    write(root / "memory.max", "max")
    write(root / "ci.slice" / "memory.max", "max")
    write(root / "ci.slice" / "job-7" / "memory.max", str(8 * GIB))
    write(root / "ci.slice" / "job-7" / "memory.current", str(5 * GIB))
    write(root / "ci.slice" / "job-7" / "memory.stat", f"anon {4 * GIB}\nfile {GIB}\ninactive_file {GIB}\n")
    write(tmp_path / "self", "0::/ci.slice/job-7\n")
    assert cgroup_room(root, "0::/ci.slice/job-7\n") == 4 * GIB
    assert available_memory(tmp_path / "meminfo", root, tmp_path / "self") == 4 * GIB
    # v1: a 16 GiB limit on an ancestor, 10 GiB used of which 2 GiB inactive page cache
    v1 = tmp_path / "v1"
    write(v1 / "memory" / "memory.limit_in_bytes", NO_LIMIT)
    write(v1 / "memory" / "docker" / "memory.limit_in_bytes", str(16 * GIB))
    write(v1 / "memory" / "docker" / "memory.usage_in_bytes", str(10 * GIB))
    write(v1 / "memory" / "docker" / "memory.stat", f"cache {3 * GIB}\ntotal_inactive_file {2 * GIB}\n")
    write(v1 / "memory" / "docker" / "abc" / "memory.limit_in_bytes", NO_LIMIT)
    assert cgroup_room(v1, "4:memory:/docker/abc\n0::/\n") == 8 * GIB
    assert cgroup_room(v1, "4:memory:/\n") is None  # no limit anywhere: MemAvailable decides


def test_the_real_files_of_this_machine() -> None:
    total = int(next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal:"))) * 1024
    free = available_memory()
    assert free is not None and 0 < free <= total
