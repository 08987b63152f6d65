"""memplan's offload choice: the ladder of kinds moved to the host, the host's budget, the
cost model's rates, and the CLI's --world-size/--shard/--offload/--accum."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache

import pytest

from tests.clirun import assert_no_traceback
from trainstack.errors import BudgetError, UsageError
from trainstack.memplan.costs import Choice, Overheads
from trainstack.memplan.memory import breakdown, state_totals
from trainstack.memplan.offload import Rates, choose_with_offload, step_cost
from trainstack.memplan.placement import Layout, parse_offload
from trainstack.memplan.planner import human
from trainstack.nn.presets import preset

GiB = 1 << 30


@cache
def _profile():
    """The 1b preset at bf16 (fp32 master weights and AdamW state), batch 1, seq 512."""
    from trainstack.memplan import plan_memory
    from trainstack.memplan.offload import Placement

    return plan_memory(preset("1b"), batch=1, seq=512, budget_bytes=1 << 50, precision="bf16", placement=Placement(), overheads=Overheads()).profile


def _least(layout: Layout, accum: int = 1) -> int:
    profile = _profile()
    return breakdown(profile, (Choice.FULL,) * profile.n_blocks, layout=layout, accum=accum).reserved_peak


def test_each_sharding_keeps_its_kinds_whole_or_split():
    profile = _profile()
    totals = state_totals(profile)
    assert totals["master"] == 2 * totals["params"] and totals["optimizer"] == 2 * totals["master"]  # bf16 params; fp32 master and 2 moments
    expected = {"zero1": ("gpu", "gpu", "sharded", "sharded"), "zero2": ("gpu", "sharded", "sharded", "sharded"),
                "zero3": ("sharded",) * 4, "fsdp2": ("sharded",) * 4, "none": ("gpu",) * 4}
    for shard, wheres in expected.items():
        per_kind = breakdown(profile, (Choice.KEEP,) * profile.n_blocks, layout=Layout(shard, 4)).per_kind
        assert tuple(per_kind[k]["where"] for k in ("params", "grads", "master", "optimizer")) == wheres
        for kind, where in zip(("params", "grads", "master", "optimizer"), wheres):
            assert per_kind[kind]["gpu_bytes"] == (totals[kind] if where == "gpu" else -(-totals[kind] // 4))


def test_the_plan_recomputes_where_that_fits_and_offloads_only_where_the_budget_needs_it():
    none = Layout("none", 1)
    fits_alone = _least(none) + GiB
    plan = choose_with_offload(_profile(), budget_bytes=fits_alone, host_budget_bytes=None, shard="none", world_size=1)
    assert not plan.layout.offload and plan.why.startswith("chose one process, nothing on the host")
    tight = _least(none) - GiB  # nothing fits on the GPU alone, the optimizer's state on the host does
    plan = choose_with_offload(_profile(), budget_bytes=tight, host_budget_bytes=None, shard="none", world_size=1)
    assert plan.layout.offload == {"optimizer"} and plan.peak_bytes <= tight
    assert "nothing on the host: does not fit the GPU" in plan.why and plan.breakdown.host_bytes == plan.breakdown.per_kind["optimizer"]["host_bytes"]


def test_the_host_budget_is_a_budget_too():
    tight = _least(Layout("none", 1, frozenset({"optimizer"}))) - GiB  # needs master weights on the host as well
    plan = choose_with_offload(_profile(), budget_bytes=tight, host_budget_bytes=None, shard="none", world_size=1)
    assert plan.layout.offload == {"optimizer", "master"} and plan.layout.cpu_step
    need = plan.breakdown.host_bytes
    with pytest.raises(BudgetError, match="the host would need") as refused:
        choose_with_offload(_profile(), budget_bytes=tight, host_budget_bytes=need - 1, shard="none", world_size=1)
    # the refusal says which rungs the GPU fits and the least host memory that would do
    assert "on the host: master, optimizer: fits the GPU" in str(refused.value)
    assert str(refused.value).endswith(f"would fit: a host budget of at least {human(need)} (on the host: master, optimizer)")
    assert choose_with_offload(_profile(), budget_bytes=tight, host_budget_bytes=need, shard="none", world_size=1).layout.offload == {"optimizer", "master"}


def test_a_gpu_budget_no_rung_fits_names_the_ranks_that_would():
    host_step = frozenset({"optimizer", "master"})
    budget = _least(Layout("none", 1, host_step)) - GiB
    with pytest.raises(BudgetError) as refused:
        choose_with_offload(_profile(), budget_bytes=budget, host_budget_bytes=None, shard="none", world_size=1, offload=host_step)
    text = str(refused.value)
    assert "on the host: master, optimizer: does not fit the GPU" in text
    ranks = int(text.split("would fit: sharding over ")[1].split(" ranks")[0])
    plan = choose_with_offload(_profile(), budget_bytes=budget, host_budget_bytes=None, shard="fsdp2", world_size=ranks, offload=host_step)
    assert ranks > 1 and plan.peak_bytes <= budget
    with pytest.raises(BudgetError):  # the fewest: half as many do not fit
        choose_with_offload(_profile(), budget_bytes=budget, host_budget_bytes=None, shard="fsdp2", world_size=ranks // 2, offload=host_step)
    # the 1b's embedding and output, gathered whole through an FSDP2 step, fit no 1 GiB GPU
    with pytest.raises(BudgetError, match="no sharding over up to 1024 ranks fits either"):
        choose_with_offload(_profile(), budget_bytes=GiB, host_budget_bytes=None, shard="none", world_size=1)


def test_without_measured_rates_the_why_says_the_copies_are_not_costed():
    plan = choose_with_offload(_profile(), budget_bytes=_least(Layout("none", 1)) - GiB, host_budget_bytes=None, shard="none", world_size=1)
    assert "the first rung that fits: copy and CPU rates not measured here" in plan.why
    assert "per step of compute (copies and CPU step not costed)" in plan.why and "not hidden" not in plan.why


def test_measured_rates_make_the_fastest_rung_win_and_cost_the_copies():
    profile = _profile()
    slow_host = Rates(1e9, 1e9, 1e-9, "slow")
    budget = _least(Layout("none", 1)) + 8 * GiB
    plan = choose_with_offload(profile, budget_bytes=budget, host_budget_bytes=None, shard="none", world_size=1, accum=4, rates=slow_host)
    assert not plan.layout.offload and "the least estimated step time" in plan.why and "rates: slow" in plan.why
    cost = step_cost(profile, {Choice.KEEP: profile.n_blocks}, Layout("none", 1, frozenset({"optimizer", "master"})), accum=4, rates=slow_host)
    totals = state_totals(profile)
    assert cost.d2h_s == pytest.approx(totals["grads"] / 1e9) and cost.h2d_s == pytest.approx(totals["params"] / 1e9)
    assert cost.cpu_optimizer_s == pytest.approx((totals["master"] + totals["optimizer"]) * 1e-9)
    assert cost.exposed_s == pytest.approx(max(cost.d2h_s, cost.h2d_s, cost.cpu_optimizer_s))  # pipelined by chunks


def test_layouts_refuse_what_cannot_be():
    with pytest.raises(UsageError, match="--shard: 'zero4'"):
        Layout("zero4", 2)
    with pytest.raises(UsageError, match="master on the host needs optimizer"):
        Layout("none", 1, parse_offload("master"))
    with pytest.raises(UsageError, match="'weights' is not a kind"):
        Layout("none", 1, parse_offload("optimizer,weights"))


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainstack.cli", "memplan", *args], capture_output=True, text=True, timeout=240)


def test_cli_predicts_per_rank_bytes_by_kind_and_says_why():
    done = _cli("--preset", "tiny", "--seq", "64", "--batch", "2", "--world-size", "2", "--shard", "zero2", "--accum", "4", "--budget", "1GiB", "--json")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["layout"]["where"] == {"params": "gpu", "grads": "sharded", "master": "sharded", "optimizer": "sharded"}
    assert plan["per_rank"]["grads"]["gpu_bytes"] * 2 == plan["per_rank"]["grads"]["total_bytes"] and plan["accum"] == 4
    assert plan["why"].startswith("chose zero2 over 2 ranks") and plan["step_cost"]["accum"] == 4
    short = _cli("--preset", "tiny", "--seq", "64", "--offload", "optimizer,master", "--budget", "1GiB", "--host-budget", "100KiB")
    assert_no_traceback(short.stderr)
    assert short.returncode == 9 and short.stderr.count("\n") == 1
    assert "but the host would need" in short.stderr and "would fit: a host budget of at least" in short.stderr
    bad = _cli("--preset", "tiny", "--offload", "params", "--budget", "1GiB")
    assert_no_traceback(bad.stderr)
    assert bad.returncode == 2 and bad.stderr.startswith("error: --offload: params on the host needs")


def test_zero_offload_keeps_host_gradients_in_fp32_and_fsdp2_in_the_parameters_dtype():
    """DeepSpeed's ZeRO-Offload copies each gradient partition into an fp32 buffer on the host:
    bf16 parameters' gradients take 4 bytes an element there, twice their bytes on the GPU."""
    from trainstack.memplan.memory import host_bytes, per_kind

    profile = _profile()
    totals = state_totals(profile)
    zero = Layout("zero2", 2, frozenset({"optimizer", "master", "grads"}))
    kinds = per_kind(profile, zero)
    assert kinds["grads"]["host_bytes"] == -(-totals["master"] // 2) == -(-2 * totals["grads"] // 2)
    assert host_bytes(profile, zero) == sum(k["host_bytes"] for k in kinds.values())
    fsdp2 = Layout("fsdp2", 2, frozenset({"optimizer", "master", "grads", "params"}))
    assert per_kind(profile, fsdp2)["grads"]["host_bytes"] == -(-totals["grads"] // 2)


def test_a_bad_host_budget_names_its_own_flag():
    bad = _cli("--preset", "tiny", "--offload", "optimizer", "--host-budget", "lots", "--budget", "1GiB")
    assert_no_traceback(bad.stderr)
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: --host-budget: 'lots' is not a budget") and "of this host's memory" in bad.stderr
    bare = _cli("--preset", "tiny", "--offload", "optimizer", "--host-budget", "64", "--budget", "1GiB")
    assert bare.returncode == 2 and bare.stderr.startswith("error: --host-budget: '64' has no unit")
