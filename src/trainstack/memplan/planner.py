"""The planner: which blocks keep, recompute selectively or recompute fully, to fit a budget.

Blocks are identical, so the step time depends on the count of each choice alone: all
(n+1)(n+2)/2 counts are scored (GPU roofline or host dispatch, whichever is longer; measured
block times where the blocks were timed), and of those that fit the one with the least
estimated step time wins, then the smaller peak. A count fits when one of its placements
does: the recomputed blocks first (the least peak), spread evenly, or the uniform every-N
layouts themselves (blocks 0, N, 2N, ... recomputed), so every uniform option that fits is
a candidate and the plan is never predicted slower than one. The placement of the winning
counts is, of those that fit, an every-N layout first, then the even spread, then
recomputed-first: the same blocks a uniform option of the same counts recomputes. Exhaustive
over counts, hence optimal for the model, and monotone in the budget: a larger budget admits
every plan a smaller one did.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

from trainstack.errors import BudgetError
from trainstack.memplan.costs import CHOICE_ORDER, Choice, Overheads, Plan, Profile
from trainstack.memplan.memory import breakdown, peak_bytes, recompute_fractions, step_seconds
from trainstack.memplan.placement import Layout, layout_for

GiB = 1 << 30
ProfileAt = Callable[[int], Profile]
MAX_SHARDS = 1024


def human(nbytes: int) -> str:
    return f"{nbytes / GiB:.2f} GiB" if abs(nbytes) >= GiB else f"{nbytes / (1 << 20):.1f} MiB"


def choices_for(full: int, selective: int, keep: int) -> tuple[Choice, ...]:
    return (Choice.FULL,) * full + (Choice.SELECTIVE,) * selective + (Choice.KEEP,) * keep


def all_counts(n: int) -> Iterator[tuple[int, int, int]]:
    """Every (full, selective, keep) with full + selective + keep == n."""
    for full in range(n + 1):
        for selective in range(n - full + 1):
            yield full, selective, n - full - selective


def _seconds(profile: Profile, counts: tuple[int, int, int]) -> float:
    return step_seconds(profile, dict(zip(CHOICE_ORDER, counts)))


def every_nth(n: int, every: int) -> tuple[Choice, ...]:
    """The uniform option every-N: blocks 0, N, 2N, ... fully recomputed, the rest kept."""
    return tuple(Choice.FULL if i % every == 0 else Choice.KEEP for i in range(n))


def _spread_positions(n: int, recomputed: int) -> Iterator[tuple[int, ...]]:
    """Positions of ``recomputed`` blocks out of ``n`` spread evenly: each every-N layout with
    that many (the smallest N first), then the even spread floor(i * n / recomputed)."""
    if recomputed == 0:
        yield ()
        return
    for every in range(1, n + 1):
        if -(-n // every) == recomputed:
            yield tuple(range(0, n, every))
    yield tuple(i * n // recomputed for i in range(recomputed))


def placements(full: int, selective: int, keep: int) -> Iterator[tuple[Choice, ...]]:
    """The layouts of these counts the planner considers, in its order of preference: spread
    like every-N (the full blocks on the first spread positions, selective on the rest),
    then recomputed blocks first."""
    n = full + selective + keep
    seen = set()
    for positions in _spread_positions(n, full + selective):
        layout = [Choice.KEEP] * n
        for k, i in enumerate(positions):
            layout[i] = Choice.FULL if k < full else Choice.SELECTIVE
        if tuple(layout) not in seen:
            seen.add(tuple(layout))
            yield tuple(layout)
    first = choices_for(full, selective, keep)
    if first not in seen:
        yield first


def _counts_of(choices: tuple[Choice, ...]) -> tuple[int, int, int]:
    full, selective, keep = (choices.count(c) for c in CHOICE_ORDER)
    return full, selective, keep


def choose(
    profile: Profile,
    *,
    budget_bytes: int,
    world_size: int = 1,
    overheads: Overheads = Overheads(),
    profile_at: ProfileAt | None = None,
    layout: Layout | None = None,
    accum: int = 1,
) -> Plan:
    """The plan of least recompute cost whose predicted reserved peak fits ``budget_bytes``.

    Candidates: every count in its recomputed-first layout and every uniform every-N layout;
    the winning counts then take their preferred layout that fits (see ``placements``).
    ``profile_at(batch)`` calibrates another batch size; with it, an impossible budget names
    the largest batch that would fit.
    """
    n = profile.n_blocks
    layout = layout or layout_for(None, world_size)
    world_size = layout.world_size

    def peak(choices: tuple[Choice, ...]) -> int:
        return peak_bytes(profile, choices, overheads=overheads, layout=layout, accum=accum)

    candidates = [choices_for(*counts) for counts in all_counts(n)]
    candidates += [every_nth(n, every) for every in range(1, n + 1)]
    best: tuple[tuple[float, int], tuple[int, int, int]] | None = None
    for choices in candidates:
        p = peak(choices)
        if p > budget_bytes:
            continue
        counts = _counts_of(choices)
        key = (_seconds(profile, counts), p)
        if best is None or key < best[0]:
            best = (key, counts)
    if best is None:
        default = layout == layout_for(None, world_size) and accum == 1
        raise BudgetError(
            _shortfall(profile, budget_bytes, world_size, overheads, profile_at if default else None, layout=layout, accum=accum)
        )
    chosen = next(c for c in placements(*best[1]) if peak(c) <= budget_bytes)
    return make_plan(profile, chosen, budget_bytes=budget_bytes, world_size=world_size, overheads=overheads, layout=layout, accum=accum)


def choose_over_budgets(profiles: dict[float, Profile], **kwargs: object) -> Plan:
    """``choose`` for each profile, keyed by the compiler's activation memory budget of the
    kept blocks; of the plans that fit, the least estimated step time wins, then the smaller
    peak, then the larger budget. BudgetError when none fits."""
    plans, error = [], None
    for budget, profile in profiles.items():
        try:
            plans.append(replace(choose(profile, **kwargs), compiler_budget=budget))  # type: ignore[arg-type]  # choose's keyword arguments as the caller gave them, typed there
        except BudgetError as exc:
            error = error or exc
    if not plans:
        raise error or ValueError("no profile to plan from")
    return min(plans, key=lambda p: (step_seconds(p.profile, p.counts), p.peak_bytes, -(p.compiler_budget or 0.0)))


def make_plan(
    profile: Profile,
    choices: tuple[Choice, ...],
    *,
    budget_bytes: int,
    world_size: int = 1,
    overheads: Overheads = Overheads(),
    layout: Layout | None = None,
    accum: int = 1,
) -> Plan:
    flops_fraction, time_fraction = recompute_fractions(profile, choices)
    layout = layout or layout_for(None, world_size)
    return Plan(
        choices=choices,
        breakdown=breakdown(profile, choices, overheads=overheads, layout=layout, accum=accum),
        layout=layout,
        accum=accum,
        budget_bytes=budget_bytes,
        world_size=layout.world_size,
        recompute_flops_fraction=flops_fraction,
        recompute_time_fraction=time_fraction,
        profile=profile,
    )


def _shortfall(
    profile: Profile,
    budget: int,
    world_size: int,
    overheads: Overheads,
    profile_at: ProfileAt | None,
    *,
    layout: Layout | None = None,
    accum: int = 1,
) -> str:
    least = peak_bytes(profile, choices_for(profile.n_blocks, 0, 0), world_size=world_size, overheads=overheads, layout=layout, accum=accum)
    label = f"{profile.label}: " if profile.label else ""
    msg = (
        f"{label}budget {human(budget)} is {human(least - budget)} short of the smallest plan "
        f"(every block fully recomputed: {human(least)}) at batch {profile.batch}{f', seq {profile.seq}' if profile.seq else ''}, "
        f"{world_size} GPU{'s' if world_size > 1 else ''}"
    )
    fixes = []
    batch = _largest_batch(profile_at, profile, budget, world_size, overheads)
    if batch:
        fixes.append(f"batch {batch}")
    shards = _fewest_shards(profile, budget, world_size, overheads)
    if shards:
        fixes.append(f"sharding over {shards} GPUs (FSDP)")
    if not fixes:
        fixes.extend(_batch_and_shards(profile_at, profile, budget, world_size, overheads))
    return msg + ("; would fit: " + " or ".join(fixes) if fixes else f"; not even batch 1 sharded over {MAX_SHARDS} GPUs fits")


def _batch_and_shards(profile_at: ProfileAt | None, profile: Profile, budget: int, world_size: int, overheads: Overheads) -> list[str]:
    """A smaller batch together with more GPUs, when neither alone fits."""
    w = world_size * 2
    while w <= MAX_SHARDS:
        batch = _largest_batch(profile_at, profile, budget, w, overheads)
        if batch:
            return [f"batch {batch} sharded over {w} GPUs (FSDP)"]
        w *= 2
    return []


def _largest_batch(profile_at: ProfileAt | None, profile: Profile, budget: int, world_size: int, overheads: Overheads) -> int:
    """The largest smaller batch whose fully recomputed plan fits, by bisection (peak grows with batch)."""
    if profile_at is None or profile.batch <= 1:
        return 0
    full = choices_for(profile.n_blocks, 0, 0)

    def fits(b: int) -> bool:
        return peak_bytes(profile_at(b), full, world_size=world_size, overheads=overheads) <= budget

    lo, hi = 0, profile.batch - 1  # invariant: lo fits (0 trivially), hi+1 does not
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def _fewest_shards(profile: Profile, budget: int, world_size: int, overheads: Overheads) -> int:
    full = choices_for(profile.n_blocks, 0, 0)
    w = world_size * 2
    while w <= MAX_SHARDS:
        if peak_bytes(profile, full, world_size=w, overheads=overheads) <= budget:
            return w
        w *= 2
    return 0
