"""Recompute or offload: the fastest plan that fits the GPU's budget and the host's.

For each rung of ``placement.OFFLOAD_LADDER`` (nothing on the host; the optimizer state; its
master weights too, the step then on the CPU; the parameters too) the recompute planner
chooses the blocks' recompute for what is left of the GPU's budget, and the step is costed:
the micro-batches' compute (``accum`` of them), the host-to-device and device-to-host copies
at the measured pinned bandwidths, and the CPU's optimizer step at its measured rate. Copies
and the CPU step are pipelined by chunks (gradients go down while earlier chunks are
stepped and later parameters come up), so the optimizer step costs the longest of the three;
parameters on the host are copied up a block ahead of its compute and cost only what the
compute does not hide. Of the rungs that fit both budgets the least estimated step time wins,
then the least moved to the host. Where the rates are not measured (no GPU), a rung is taken
only where the ones before it do not fit. Where none fits, the refusal names each rung's
shortfall and what would fit: the least host budget, else the fewest ranks. Pure arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from trainstack.errors import BudgetError
from trainstack.memplan.costs import Overheads, Plan, Profile
from trainstack.memplan.memory import host_bytes, peak_bytes, state_totals, step_seconds
from trainstack.memplan.placement import KINDS, OFFLOAD_LADDER, Layout, Where
from trainstack.memplan.planner import MAX_SHARDS, choices_for, choose, human


@dataclass(frozen=True)
class Rates:
    """What the cost of offload is made of, measured on the machine (memplan.rates)."""

    h2d_bytes_per_s: float | None = None  # pinned host to device
    d2h_bytes_per_s: float | None = None  # device to pinned host
    cpu_step_s_per_byte: float | None = None  # the CPU's AdamW step, per byte of master weights and state
    source: str = "not measured"

    @property
    def measured(self) -> bool:
        return None not in (self.h2d_bytes_per_s, self.d2h_bytes_per_s, self.cpu_step_s_per_byte)

    def to_json(self) -> dict:
        return {
            "h2d_bytes_per_s": self.h2d_bytes_per_s,
            "d2h_bytes_per_s": self.d2h_bytes_per_s,
            "cpu_step_s_per_byte": self.cpu_step_s_per_byte,
            "source": self.source,
        }


@dataclass(frozen=True)
class Placement:
    """What a plan is asked to place: the sharding (None: FSDP2 over several ranks), the kinds
    on the host (None: the planner chooses, climbing the ladder as the budgets need), the
    micro-batches per optimizer step, the host's budget (None: unbounded) and the rates."""

    shard: str | None = None
    offload: frozenset[str] | None = frozenset()
    accum: int = 1
    host_budget_bytes: int | None = None
    rates: Rates = Rates()
    ranks_per_host: int | None = None
    ladder: tuple[frozenset[str], ...] | None = None  # the rungs a framework can run (default: OFFLOAD_LADDER)


@dataclass(frozen=True)
class StepCost:
    """One optimizer step's estimated seconds: ``accum`` micro-batches and the update."""

    compute_s: float  # the micro-batches' forward and backward, recompute included
    h2d_s: float  # host-to-device copies (parameters up; streamed optimizer state up)
    d2h_s: float  # device-to-host copies (gradients down; streamed optimizer state down)
    cpu_optimizer_s: float  # the optimizer's step on the CPU
    exposed_s: float  # of copies and CPU step, what the compute does not hide
    accum: int

    @property
    def total_s(self) -> float:
        return self.compute_s + self.exposed_s

    def to_json(self) -> dict:
        return {
            "compute_s": self.compute_s,
            "h2d_s": self.h2d_s,
            "d2h_s": self.d2h_s,
            "cpu_optimizer_s": self.cpu_optimizer_s,
            "exposed_s": self.exposed_s,
            "total_s": self.total_s,
            "accum": self.accum,
        }


def _seconds(nbytes: int, rate: float | None) -> float:
    return nbytes / rate if rate else 0.0


def step_cost(profile: Profile, counts: dict, layout: Layout, *, accum: int, rates: Rates) -> StepCost:
    """The estimated seconds of one optimizer step of ``accum`` micro-batches under ``layout``."""
    totals = state_totals(profile, layout)
    one = {k: layout.host_bytes(k, totals[k]) if k in layout.offload else layout.gpu_bytes(k, totals[k]) for k in KINDS}
    micro = step_seconds(profile, counts)
    h2d = d2h = cpu = 0.0
    exposed = 0.0
    if layout.where("params") is Where.HOST:  # every block up for its forward and again for its backward
        up = _seconds(2 * totals["params"], rates.h2d_bytes_per_s)
        h2d += accum * up
        exposed += accum * max(0.0, up - micro)
    if layout.where("grads") is Where.HOST:  # each micro-batch's gradients down as they are made
        down = _seconds(one["grads"], rates.d2h_bytes_per_s)
        d2h += accum * down
        exposed += accum * max(0.0, down - micro)
    if layout.cpu_step:
        grads_down = 0.0 if "grads" in layout.offload else _seconds(one["grads"], rates.d2h_bytes_per_s)
        params_up = 0.0 if "params" in layout.offload else _seconds(one["params"], rates.h2d_bytes_per_s)
        cpu = (one["master"] + one["optimizer"]) * (rates.cpu_step_s_per_byte or 0.0)
        d2h, h2d = d2h + grads_down, h2d + params_up
        exposed += max(grads_down, cpu, params_up)
    elif "optimizer" in layout.offload:  # the GPU steps on state streamed up and back down
        up, down = _seconds(one["optimizer"], rates.h2d_bytes_per_s), _seconds(one["optimizer"], rates.d2h_bytes_per_s)
        h2d, d2h = h2d + up, d2h + down
        exposed += max(up, down)
    return StepCost(compute_s=accum * micro, h2d_s=h2d, d2h_s=d2h, cpu_optimizer_s=cpu, exposed_s=exposed, accum=accum)


def _rung_name(offload: frozenset[str]) -> str:
    return "nothing on the host" if not offload else "on the host: " + ", ".join(k for k in KINDS if k in offload)


def _would_fit(
    profile: Profile,
    short_of_host: list[tuple[int, frozenset[str]]],
    rungs: tuple[frozenset[str], ...],
    *,
    shard: str,
    world_size: int,
    ranks_per_host: int | None,
    budget_bytes: int,
    host_budget_bytes: int | None,
    accum: int,
    overheads: Overheads,
) -> str:
    """What would fit where nothing does: the least host memory that a rung the GPU fits needs,
    else the fewest ranks whose shards fit both budgets (FSDP2 where nothing is sharded), every block recomputed, ``ranks_per_host`` on each host (default all)."""
    if short_of_host:
        need, rung = min(short_of_host, key=lambda item: item[0])
        return f"; would fit: a host budget of at least {human(need)} ({_rung_name(rung)})"
    sharding = "fsdp2" if shard == "none" else shard
    ranks = world_size * 2
    while ranks <= MAX_SHARDS:
        for rung in rungs:
            layout = Layout(sharding, ranks, rung)
            least = peak_bytes(profile, choices_for(profile.n_blocks, 0, 0), overheads=overheads, layout=layout, accum=accum)
            host = min(ranks_per_host or ranks, ranks) * host_bytes(profile, layout)
            if least <= budget_bytes and (host_budget_bytes is None or host <= host_budget_bytes):
                return f"; would fit: sharding over {ranks} ranks ({sharding}, {_rung_name(rung)}, every block recomputed: {human(least)} per GPU)"
        ranks *= 2
    return f"; no sharding over up to {MAX_SHARDS} ranks fits either"


def choose_with_offload(
    profile: Profile,
    *,
    budget_bytes: int,
    host_budget_bytes: int | None,
    shard: str,
    world_size: int,
    accum: int = 1,
    rates: Rates = Rates(),
    offload: frozenset[str] | None = None,
    ranks_per_host: int | None = None,
    overheads: Overheads = Overheads(),
    ladder: tuple[frozenset[str], ...] | None = None,
) -> Plan:
    """The fastest plan over the offload ladder (or the one ``offload`` names) that fits
    ``budget_bytes`` per GPU and ``host_budget_bytes`` per host (``ranks_per_host`` ranks on
    each, default all); its ``why`` says what each rung came to."""
    rungs = (ladder or OFFLOAD_LADDER) if offload is None else (frozenset(offload),)
    per_host = ranks_per_host or world_size
    reasons: list[str] = []
    fitting: list[tuple[tuple[float, int], Plan]] = []
    short_of_host: list[tuple[int, frozenset[str]]] = []  # (host bytes needed, rung) of rungs the GPU fits
    for index, rung in enumerate(rungs):
        layout = Layout(shard, world_size, rung)
        needed_host = per_host * host_bytes(profile, layout)
        host_short = host_budget_bytes is not None and needed_host > host_budget_bytes
        host_text = f"the host would need {human(needed_host)} of its {human(host_budget_bytes or 0)}"
        try:
            plan = choose(profile, budget_bytes=budget_bytes, overheads=overheads, layout=layout, accum=accum)
        except BudgetError:
            least = peak_bytes(profile, choices_for(profile.n_blocks, 0, 0), overheads=overheads, layout=layout, accum=accum)
            reasons.append(
                f"{_rung_name(rung)}: does not fit the GPU (every block recomputed: {human(least)})"
                + (f", and {host_text}" if host_short else "")
            )
            continue
        if host_short:
            short_of_host.append((needed_host, rung))
            reasons.append(f"{_rung_name(rung)}: fits the GPU ({plan.summary()}, peak {human(plan.peak_bytes)}), but {host_text}")
            continue
        cost = step_cost(profile, plan.counts, layout, accum=accum, rates=rates)
        costed = (
            f"est. {cost.total_s:.3g} s per step ({cost.exposed_s:.3g} s of copies and CPU step not hidden)"
            if rates.measured
            else f"est. {cost.total_s:.3g} s per step of compute (copies and CPU step not costed)"
        )
        reasons.append(
            f"{_rung_name(rung)}: fits with {plan.summary()}, peak {human(plan.peak_bytes)}, host {human(needed_host)}, {costed}"
        )
        fitting.append(((cost.total_s, index), replace(plan, step_cost=cost)))
        if not rates.measured and offload is None:
            break  # unmeasured copies cost nothing on paper: move no more than the budget needs
    if not fitting:
        raise BudgetError(
            f"no plan fits {human(budget_bytes)} per GPU"
            + (f" and {human(host_budget_bytes)} per host" if host_budget_bytes else "")
            + f" ({shard}, {world_size} rank{'s' if world_size > 1 else ''}, {accum} micro-batch{'es' if accum > 1 else ''}): "
            + "; ".join(reasons)
            + _would_fit(
                profile,
                short_of_host,
                rungs,
                shard=shard,
                world_size=world_size,
                ranks_per_host=ranks_per_host,
                budget_bytes=budget_bytes,
                host_budget_bytes=host_budget_bytes,
                accum=accum,
                overheads=overheads,
            )
        )
    _, best = min(fitting, key=lambda item: item[0])
    if offload is not None:
        basis = "the placement asked for"
    elif not rates.measured:
        basis = "the first rung that fits: copy and CPU rates not measured here"
    else:
        basis = "the least estimated step time" if len(fitting) > 1 else "the only rung that fits"
    where = "" if best.layout.offload else ", nothing on the host"
    chosen = f"chose {best.layout.name()}{where} ({basis})"
    return replace(best, why=f"{chosen}; " + "; ".join(reasons) + f"; rates: {rates.source}")
