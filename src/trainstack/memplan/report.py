"""The plan as a rich table and as JSON."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from trainstack.memplan.costs import CHOICE_ORDER, Choice, Plan
from trainstack.memplan.planner import human

GiB = 1 << 30


def _gib(n: int) -> str:
    return human(n)


def headline(plan: Plan) -> str:
    b = plan.breakdown
    return (
        (
            f"predicted peak {_gib(b.reserved_peak)} of {_gib(plan.budget_bytes)} budget "
            f"(allocated {_gib(b.allocated_peak)}, set by {b.transient_phase}); "
            f"plan: {plan.summary()}; recompute overhead {plan.recompute_flops_fraction:.1%} of step FLOPs "
            f"(est. {plan.recompute_time_fraction:.1%} of step time)"
        )
        + (
            f"; {plan.layout.name()}, host {_gib(b.host_bytes)} per rank"
            if plan.layout is not None and (plan.layout.offload or plan.world_size > 1)
            else ""
        )
        + (f"\nwhy: {plan.why}" if plan.why else "")
    )


def blocks_table(plan: Plan) -> Table:
    table = Table(title="Plan: what each block keeps for backward")
    for col in ("blocks", "choice", "saved per block", "recompute FLOPs per block", "count"):
        table.add_column(col, justify="right" if col != "choice" else "left")
    start = 0
    prof = plan.profile
    for choice in CHOICE_ORDER:
        n = plan.counts[choice]
        if not n:
            continue
        cost = prof.options[choice]
        span = f"{start}" if n == 1 else f"{start}-{start + n - 1}"
        table.add_row(span, str(choice), _gib(cost.saved), f"{cost.recompute_flops / 1e12:.2f} TFLOP", str(n))
        start += n
    return table


def breakdown_table(plan: Plan) -> Table:
    b = plan.breakdown
    table = Table(title=f"Predicted peak ({b.transient_phase})")
    table.add_column("part")
    table.add_column("bytes", justify="right")
    rows: list[tuple[str, int]] = [
        (f"weights and buffers ({plan.profile.precision})", b.weights),
        ("gradients live at the peak", b.grads),
        (f"optimizer state ({plan.profile.optimizer})", b.optimizer),
        ("saved activations, all blocks", b.saved_activations),
        *((f"  saved per block, {c}", b.saved_per_block[c]) for c in (Choice.KEEP, Choice.SELECTIVE, Choice.FULL)),
        (f"transient of the peak phase ({b.transient_phase})", b.transient),
        *((f"  largest {name}", v) for name, v in b.transients.items()),
        ("library workspace", b.workspace),
        ("allocated peak", b.allocated_peak),
        ("allocator overhead", b.allocator_overhead),
        ("reserved peak (must fit the budget)", b.reserved_peak),
    ]
    for kind, placed in b.per_kind.items():
        rows.append((f"{kind}: {placed['where']} (GPU / host bytes per rank)", placed["gpu_bytes"]))
        if placed["host_bytes"]:
            rows.append((f"  {kind} on the host", placed["host_bytes"]))
    if b.host_bytes:
        rows.append(("host memory per rank (offloaded state, staging)", b.host_bytes))
    for name, value in rows:
        table.add_row(name, _gib(value))
    return table


def to_json(plan: Plan) -> dict[str, Any]:
    b = plan.breakdown
    return {
        "choices": [str(c) for c in plan.choices],
        "counts": {str(c): n for c, n in plan.counts.items()},
        "budget_bytes": plan.budget_bytes,
        "world_size": plan.world_size,
        "predicted_reserved_bytes": b.reserved_peak,
        "predicted_allocated_bytes": b.allocated_peak,
        "peak_phase": b.transient_phase,
        "breakdown": {
            "weights": b.weights,
            "grads": b.grads,
            "optimizer": b.optimizer,
            "saved_activations": b.saved_activations,
            "saved_per_block": {str(c): v for c, v in b.saved_per_block.items()},
            "transient": b.transient,
            "transients": b.transients,
            "workspace": b.workspace,
            "allocator_overhead": b.allocator_overhead,
        },
        "recompute_flops_fraction": plan.recompute_flops_fraction,
        "recompute_time_fraction": plan.recompute_time_fraction,
        "compiler_budget": plan.compiler_budget,
        "layout": plan.layout.to_json() if plan.layout is not None else None,
        "accum": plan.accum,
        "per_rank": b.per_kind,
        "host_bytes_per_rank": b.host_bytes,
        "step_cost": plan.step_cost.to_json() if plan.step_cost is not None else None,
        "why": plan.why or None,
    }
