"""Compile jobs from the effective CPU count: cgroup v2 and v1 quota files, the table, overrides."""

from __future__ import annotations

from pathlib import Path

from trainstack.builder.cpu import cgroup_quota, effective_cpus
from trainstack.buildenv import budget_for, max_jobs
from trainstack.stackfile.schema import Component, JobBudget


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2_quota_of_own_group(tmp_path: Path) -> None:
    write(tmp_path / "cpu.max", "max 100000\n")
    write(tmp_path / "kubepods" / "pod1" / "cpu.max", "250000 100000\n")
    assert cgroup_quota(tmp_path, "0::/kubepods/pod1\n") == 2.5


def test_cgroup_v2_tightest_ancestor_wins(tmp_path: Path) -> None:
    write(tmp_path / "a" / "cpu.max", "150000 100000\n")
    write(tmp_path / "a" / "b" / "cpu.max", "max 100000\n")
    assert cgroup_quota(tmp_path, "0::/a/b\n") == 1.5


def test_cgroup_v1_quota(tmp_path: Path) -> None:
    v1 = tmp_path / "cpu,cpuacct" / "docker" / "abc"
    write(v1 / "cpu.cfs_quota_us", "400000\n")
    write(v1 / "cpu.cfs_period_us", "100000\n")
    write(tmp_path / "cpu,cpuacct" / "cpu.cfs_quota_us", "-1\n")
    write(tmp_path / "cpu,cpuacct" / "cpu.cfs_period_us", "100000\n")
    assert cgroup_quota(tmp_path, "12:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n") == 4.0


def test_no_quota_falls_back_to_affinity(tmp_path: Path) -> None:
    write(tmp_path / "cpu.max", "max 100000\n")
    self_cgroup = tmp_path / "self"
    write(self_cgroup, "0::/\n")
    assert cgroup_quota(tmp_path, "0::/\n") is None
    assert effective_cpus(tmp_path, self_cgroup) >= 1


def test_quota_caps_the_affinity_count(tmp_path: Path) -> None:
    write(tmp_path / "cpu.max", "50000 100000\n")
    self_cgroup = tmp_path / "self"
    write(self_cgroup, "0::/\n")
    assert effective_cpus(tmp_path, self_cgroup) == 0.5


def test_table_divisors_caps_and_overrides() -> None:
    assert max_jobs(96, budget_for(Component(name="torch"))) == 32
    assert max_jobs(96, budget_for(Component(name="flash_attn"))) == 12
    assert max_jobs(64, budget_for(Component(name="deepspeed"))) == 16
    assert max_jobs(64, budget_for(Component(name="apex"))) == 8
    assert max_jobs(2, budget_for(Component(name="flash-attn"))) == 1  # never zero
    override = Component(name="apex", jobs=JobBudget(divisor=2, cap=3))
    assert max_jobs(64, budget_for(override)) == 3
