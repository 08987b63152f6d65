"""The planner on synthetic cost tables: optimal (brute force over every assignment), monotone, and its errors."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest

from trainstack.errors import BudgetError
from trainstack.memplan.memory import breakdown, peak_bytes, step_seconds
from trainstack.memplan.costs import BlockCost, Choice, HeadCost, Overheads, Profile
from trainstack.memplan.planner import all_counts, choices_for, choose

MiB = 1 << 20


def synthetic(rng: random.Random, n: int, batch: int = 4) -> Profile:
    """A cost table shaped like a real block's: full saves least and recomputes most."""
    act = rng.randint(200, 800) * MiB  # what a kept block saves
    weights_copy = rng.randint(5, 60) * MiB  # autocast's bf16 copies, held during forward
    work = rng.randint(20, 200) * MiB  # backward's intermediate gradients
    sel = rng.randint(act // 4, act // 2)
    full = rng.randint(8, 40) * MiB
    gpu_full, gpu_sel = rng.uniform(1, 5) * 1e-3, rng.uniform(0.2, 1.5) * 1e-3
    return Profile(
        n_blocks=n,
        block_param_bytes=rng.randint(10, 100) * MiB,
        other_param_bytes=rng.randint(50, 500) * MiB,
        buffer_bytes=4 * MiB,
        options={
            Choice.KEEP: BlockCost(saved=act, held=act, fwd_peak=act + work // 2, bwd_peak=act + work),
            Choice.SELECTIVE: BlockCost(saved=sel, held=sel + weights_copy, fwd_peak=act, bwd_peak=act + work + weights_copy, recompute_seconds=gpu_sel, host_seconds=rng.uniform(0, 3) * 1e-3),
            Choice.FULL: BlockCost(saved=full, held=full + weights_copy, fwd_peak=act, bwd_peak=act + work, recompute_flops=1e12, recompute_seconds=gpu_full, host_seconds=rng.uniform(0, 1) * 1e-3),
        },
        head=HeadCost(fwd_peak=rng.randint(100, 2000) * MiB, bwd_peak=rng.randint(50, 500) * MiB, after_bwd=rng.randint(20, 200) * MiB, embed_bwd_peak=rng.randint(50, 500) * MiB),
        step_flops=1e13,
        step_seconds=rng.uniform(5, 50) * 1e-3 * n,
        step_host_seconds=rng.uniform(1, 60) * 1e-3 * n,
        batch=batch,
        seq=1024,
    )


def brute_force(profile: Profile, budget: int) -> float | None:
    """Least estimated step time over all 3^n per-block assignments, in any order, that fit."""
    best = None
    for assignment in itertools.product(list(Choice), repeat=profile.n_blocks):
        if peak_bytes(profile, assignment) > budget:
            continue
        cost = step_seconds(profile, {c: assignment.count(c) for c in Choice})
        best = cost if best is None else min(best, cost)
    return best


def budgets(profile: Profile, k: int = 12) -> list[int]:
    lo = peak_bytes(profile, choices_for(profile.n_blocks, 0, 0))
    hi = peak_bytes(profile, choices_for(0, 0, profile.n_blocks))
    return sorted({lo - MiB, lo, hi, hi + MiB, *(lo + (hi - lo) * i // k for i in range(1, k))})


@pytest.mark.parametrize("seed", range(40))
def test_planner_is_optimal_against_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    profile = synthetic(rng, n=rng.randint(1, 5))
    for budget in budgets(profile):
        expected = brute_force(profile, budget)
        if expected is None:
            with pytest.raises(BudgetError):
                choose(profile, budget_bytes=budget)
            continue
        plan = choose(profile, budget_bytes=budget)
        assert plan.breakdown.reserved_peak <= budget
        assert step_seconds(profile, plan.counts) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("seed", range(10))
def test_planner_is_monotone_in_the_budget(seed: int) -> None:
    rng = random.Random(100 + seed)
    profile = synthetic(rng, n=rng.randint(4, 24))
    costs = []
    feasible_seen = False
    for budget in budgets(profile, k=30):
        try:
            plan = choose(profile, budget_bytes=budget)
        except BudgetError:
            assert not feasible_seen, "a larger budget lost a plan a smaller one had"
            continue
        feasible_seen = True
        costs.append(step_seconds(profile, plan.counts))
    assert feasible_seen
    assert all(b <= a for a, b in zip(costs, costs[1:]))


def test_counts_cover_every_split() -> None:
    assert sorted(all_counts(3)) == sorted(c for c in itertools.product(range(4), repeat=3) if sum(c) == 3)


def test_generous_budget_keeps_everything_and_tight_one_recomputes() -> None:
    profile = synthetic(random.Random(7), n=8)
    keep_all = peak_bytes(profile, choices_for(0, 0, 8))
    assert choose(profile, budget_bytes=keep_all).counts[Choice.KEEP] == 8
    tight = choose(profile, budget_bytes=peak_bytes(profile, choices_for(8, 0, 0)))
    assert tight.counts[Choice.KEEP] < 8


def test_overheads_enter_the_reserved_peak() -> None:
    profile = synthetic(random.Random(3), n=4)
    plain = breakdown(profile, choices_for(0, 0, 4))
    padded = breakdown(profile, choices_for(0, 0, 4), overheads=Overheads(workspace=64 * MiB, fragmentation=0.02))
    assert padded.allocated_peak == plain.allocated_peak + 64 * MiB
    assert padded.reserved_peak == padded.allocated_peak + int(padded.allocated_peak * 0.02)


def test_inputs_kept_blocks_do_not_save_live_on_only_while_a_recomputing_block_is_to_go_back() -> None:
    """An encoder's output handed to every block, of which kept blocks save only casts: a
    recomputing block holds it (its inputs) until its own backward, and the phases after."""
    K, F = Choice.KEEP, Choice.FULL
    base = synthetic(random.Random(5), n=4)
    # the loss's backward as the peak, in each plan below
    base = replace(base, head=replace(base.head, bwd_peak=8000 * MiB, after_bwd=10 * MiB))
    profile = replace(base, head=replace(base.head, unkept_shared=96 * MiB))
    for choices in ((K, K, K, K), (F, K, K, K), (K, K, K, F)):
        plain, with_input = breakdown(base, choices), breakdown(profile, choices)
        assert with_input.transient_phase == plain.transient_phase == "loss backward"
        assert with_input.allocated_peak - plain.allocated_peak == (0 if choices == (K, K, K, K) else 96 * MiB), choices
    # the last block recomputed: once its backward is done, no block holds the input
    last = (K, K, K, F)
    late = replace(profile, head=replace(profile.head, bwd_peak=0, after_bwd=9000 * MiB))
    late_base = replace(base, head=replace(base.head, bwd_peak=0, after_bwd=9000 * MiB))
    assert breakdown(late, last).transient_phase == "backward of block 3"
    assert breakdown(late, last).allocated_peak - breakdown(late_base, last).allocated_peak == 96 * MiB
    assert breakdown(late, (K, K, F, K)).allocated_peak - breakdown(late_base, (K, K, F, K)).allocated_peak == 96 * MiB


def test_allocator_room_is_the_larger_of_its_two_rules() -> None:
    profile = replace(synthetic(random.Random(3), n=4), largest_allocation=300 * MiB)
    choices = choices_for(0, 0, 4)
    by_largest = breakdown(profile, choices, overheads=Overheads(largest_room=0.9, fragmentation=1e-9))
    assert by_largest.allocator_overhead == int(300 * MiB * 0.9)
    by_fraction = breakdown(profile, choices, overheads=Overheads(largest_room=0.9, fragmentation=0.5))
    assert by_fraction.allocator_overhead == int(by_fraction.allocated_peak * 0.5) > by_largest.allocator_overhead


def test_sharding_divides_weights_grads_and_optimizer_state() -> None:
    profile = synthetic(random.Random(5), n=4)
    one = breakdown(profile, choices_for(4, 0, 0), world_size=1)
    four = breakdown(profile, choices_for(4, 0, 0), world_size=4)
    assert four.optimizer * 4 == pytest.approx(one.optimizer, rel=1e-6)
    assert four.reserved_peak < one.reserved_peak


def test_impossible_budget_says_how_short_and_what_fits() -> None:
    profile = synthetic(random.Random(11), n=6, batch=8)

    def at(batch: int) -> Profile:
        # activations scale with the batch in this synthetic model
        from dataclasses import replace

        f = batch / 8
        opts = {c: replace(o, saved=int(o.saved * f), held=int(o.held * f), fwd_peak=int(o.fwd_peak * f), bwd_peak=int(o.bwd_peak * f)) for c, o in profile.options.items()}
        return replace(profile, options=opts, batch=batch)

    least = peak_bytes(profile, choices_for(6, 0, 0))
    budget = least - 256 * MiB
    with pytest.raises(BudgetError) as info:
        choose(profile, budget_bytes=budget, profile_at=at)
    msg = str(info.value)
    assert "256.0 MiB short" in msg
    assert "would fit: batch " in msg and "sharding over 2 GPUs" in msg
    suggested = int(msg.split("would fit: batch ")[1].split()[0])
    assert peak_bytes(at(suggested), choices_for(6, 0, 0)) <= budget < peak_bytes(at(suggested + 1), choices_for(6, 0, 0))


def test_measured_block_times_replace_the_roofline() -> None:
    from trainstack.memplan.memory import with_measured_times

    profile = synthetic(random.Random(13), n=6)
    timed = with_measured_times(profile, {Choice.KEEP: 0.010, Choice.SELECTIVE: 0.016, Choice.FULL: 0.013})
    assert timed.options[Choice.SELECTIVE].recompute_seconds == pytest.approx(0.006)
    assert timed.options[Choice.FULL].recompute_seconds == pytest.approx(0.003)
    assert timed.step_host_seconds == 0 and all(o.host_seconds == 0 for o in timed.options.values())
    # selective now costs more than full: a tight budget is met with full recompute only
    plan = choose(timed, budget_bytes=peak_bytes(timed, choices_for(6, 0, 0)))
    assert plan.counts[Choice.SELECTIVE] == 0


def _kept_under_budget(profile: Profile, budget: float, seconds_per_block: float) -> Profile:
    """The profile with kept blocks as the compiler leaves them under an activation memory
    budget: saved bytes scaled by it, each block slower by the ops recomputed inside it."""
    from dataclasses import replace

    keep = profile.options[Choice.KEEP]
    full = profile.options[Choice.FULL]
    saved = full.saved + int((keep.saved - full.saved) * budget)
    kept = replace(keep, saved=saved, held=saved, fwd_peak=keep.fwd_peak - keep.saved + saved, bwd_peak=keep.bwd_peak - keep.saved + saved)
    extra = (1 - budget) * seconds_per_block
    options = {**profile.options, Choice.KEEP: kept}
    options = {c: replace(o, recompute_seconds=max(0.0, o.recompute_seconds - extra)) if c is not Choice.KEEP else o for c, o in options.items()}
    return replace(profile, options=options, step_seconds=profile.step_seconds + profile.n_blocks * extra, step_host_seconds=0.0)


def test_over_compiler_budgets_the_fastest_plan_that_fits_wins() -> None:
    from trainstack.memplan.planner import choose_over_budgets

    base = synthetic(random.Random(17), n=8)
    full_cost = base.options[Choice.FULL].recompute_seconds
    # in-block recompute under the compiler's budget is cheap next to recomputing a block whole
    profiles = {b: _kept_under_budget(base, b, seconds_per_block=0.05 * full_cost) for b in (1.0, 0.5, 0.0)}
    generous = peak_bytes(profiles[1.0], choices_for(0, 0, 8))
    plan = choose_over_budgets(profiles, budget_bytes=generous)
    assert (plan.compiler_budget, plan.counts[Choice.KEEP]) == (1.0, 8)  # nothing to save: no recompute at all

    half = peak_bytes(profiles[0.5], choices_for(0, 0, 8))
    plan = choose_over_budgets(profiles, budget_bytes=half)
    assert plan.compiler_budget == 0.5 and plan.counts[Choice.KEEP] == 8 and plan.peak_bytes <= half
    assert "kept blocks compiled under activation memory budget 0.5" in plan.summary()
    for budget, profile in profiles.items():  # no single budget's own best plan is faster
        try:
            assert step_seconds(plan.profile, plan.counts) <= step_seconds(profile, choose(profile, budget_bytes=half).counts)
        except BudgetError:
            continue

    least = min(peak_bytes(p, choices_for(*counts)) for p in profiles.values() for counts in all_counts(8))
    assert choose_over_budgets(profiles, budget_bytes=least).peak_bytes == least
    with pytest.raises(BudgetError, match="short of the smallest plan"):
        choose_over_budgets(profiles, budget_bytes=least - 1)


@pytest.mark.parametrize("seed", range(12))
def test_plan_is_never_predicted_slower_than_a_uniform_option_that_fits(seed: int) -> None:
    from trainstack.memplan.planner import every_nth

    rng = random.Random(300 + seed)
    profile = synthetic(rng, n=rng.randint(4, 24))
    uniform = [every_nth(profile.n_blocks, e) for e in range(1, profile.n_blocks + 1)]
    for budget in budgets(profile, k=20):
        fitting = [u for u in uniform if peak_bytes(profile, u) <= budget]
        if not fitting:
            continue
        plan = choose(profile, budget_bytes=budget)
        assert plan.peak_bytes <= budget
        best_uniform = min(step_seconds(profile, {c: u.count(c) for c in Choice}) for u in fitting)
        assert step_seconds(profile, plan.counts) <= best_uniform
        for u in fitting:  # the same counts as a fitting uniform option: its very layout
            if {c: u.count(c) for c in Choice} == plan.counts:
                assert plan.choices in [v for v in fitting if v.count(Choice.FULL) == u.count(Choice.FULL)]


def test_placements_spread_like_every_n_then_recomputed_first() -> None:
    from trainstack.memplan.planner import every_nth, placements

    layouts = list(placements(4, 0, 12))
    assert layouts[0] == every_nth(16, 4) and layouts[-1] == choices_for(4, 0, 12)
    assert all(sorted(layout) == sorted(choices_for(4, 0, 12)) for layout in layouts)
    assert len(set(layouts)) == len(layouts)
    # 5 of 24 recomputed: every-5 (0, 5, ..., 20), then the even spread (0, 4, 9, 14, 19)
    five = list(placements(5, 0, 19))
    assert five[0] == every_nth(24, 5)
    assert [i for i, c in enumerate(five[1]) if c is Choice.FULL] == [0, 4, 9, 14, 19]
    mixed = next(placements(2, 2, 4))
    assert [c for c in mixed if c is not Choice.KEEP] == [Choice.FULL, Choice.FULL, Choice.SELECTIVE, Choice.SELECTIVE]
    assert list(placements(0, 0, 3)) == [choices_for(0, 0, 3)] and list(placements(3, 0, 0)) == [choices_for(3, 0, 0)]
