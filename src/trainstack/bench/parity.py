"""Convergence parity of two modes: same seed, same learnable tokens, loss curves compared.

Uniform random tokens teach a model nothing beyond their frequencies, so any precision
reaches the same loss (log of the vocabulary) and a parity check on them proves nothing.
The parity task is a first-order Markov chain instead: each of ``STATES`` tokens is followed
by one of ``len(SUCCESSOR_P)`` fixed successors with the probabilities ``SUCCESSOR_P``, so
the loss falls from log(vocabulary) towards the chain's entropy as the model learns the
table, and a precision that hurts learning shows as a gap between the curves.

Both modes start from the same weights (one seed) and see the same batches in the same
order; ``bench --parity`` runs them with the same learning rate, so the only difference
is the modes' arithmetic.

The gap is the relative difference |B - A| / A of the two curves' moving averages
(``window`` steps, the same batches in both) at the last step: the loss gap after the
run's steps. How early a model leaves the plateau before it learns the table is sensitive
to any perturbation of the arithmetic, so the curves can be far apart while they fall and
meet again at the floor; the largest gap over the last third of the steps is reported too,
as a measure of that, not as the parity figure.

Both modes follow the same learning-rate schedule (``lr_factor``): a linear warm-up over
the first ``WARMUP_FRACTION`` of the steps, then a cosine decay to ``FINAL_LR_FRACTION`` of
``LR``. With the rate constant from the first step, AdamW's first updates threw a 125m model
to a loss above log(vocabulary) and onto the chain's unigram plateau (about 5.1 nats), and
the step at which a run left it varied by tens of steps between two runs of the same mode
(compile+bf16 at step 120: 2.68 in one H200 run, 3.40 in another), so the gap after 300
steps measured that chance rather than the arithmetic; decaying the rate lets both curves
settle where they end.

With ``seeds`` > 1 each mode runs once per seed (other initial weights, other batches, the
same chain), and the parity figure is the gap between the two modes' mean curves over the
seeds: where one process's run leaves the plateau at its own step, that chance averages out
of the means, and each seed's own gap is reported beside it as the spread.

The chain visits ``STATES`` = 256 tokens: a batch of 4 x 1024 tokens holds about 16
transitions out of each state, four times as many as with 1024 states, where a 125m
model was still about 20% above the floor after 300 steps and the gap after the run
measured how far each curve had got rather than where it settles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

STATES = 256  # tokens the chain visits (the vocabulary's first ones)
SUCCESSOR_P = (0.7, 0.2, 0.1)  # probabilities of a token's successors
TABLE_SEED = 20240601  # the chain itself: the same for every run and rank
MAX_SEEDS = 16  # --parity-seeds
TAIL_FRACTION = 1 / 3  # the gap is taken over the last third of the steps
LR = 1e-3  # AdamW's peak learning rate for both modes: the chain is learnt within a few hundred steps
WARMUP_FRACTION = 0.1  # of the steps: the rate rises linearly to LR
FINAL_LR_FRACTION = 0.1  # of LR, reached by the cosine decay at the last step
SCHEDULE = f"linear warm-up over {WARMUP_FRACTION:.0%} of the steps, cosine decay to {FINAL_LR_FRACTION:g} x"


def lr_factor(step: int, steps: int) -> float:
    """The fraction of the peak rate at ``step`` (0-based) of ``steps``: linear warm-up, then
    cosine decay to ``FINAL_LR_FRACTION`` at the last step."""
    warmup = max(1, round(steps * WARMUP_FRACTION))
    if step < warmup:
        return (step + 1) / warmup
    span = steps - 1 - warmup  # steps after the first of the decay
    progress = 1.0 if span <= 0 else (step - warmup) / span
    return FINAL_LR_FRACTION + (1 - FINAL_LR_FRACTION) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def entropy_nats() -> float:
    """The chain's entropy rate: the lowest mean loss a model can reach on it."""
    return -sum(p * math.log(p) for p in SUCCESSOR_P)


def markov_tokens(vocab_size: int, shape: tuple[int, ...], *, device, seed: int):
    """Tokens of ``shape`` (..., length), each row a walk on the chain from a random start."""
    import torch

    states = min(STATES, vocab_size)
    table_gen = torch.Generator("cpu").manual_seed(TABLE_SEED)
    successors = torch.randint(0, states, (states, len(SUCCESSOR_P)), generator=table_gen).to(device)
    gen = torch.Generator(device).manual_seed(seed)
    *rows_shape, length = shape
    rows = math.prod(rows_shape)
    cumulative = torch.tensor(SUCCESSOR_P, dtype=torch.float64).cumsum(0)[:-1].to(device)
    choice = torch.bucketize(torch.rand(rows, length, generator=gen, device=device, dtype=torch.float64), cumulative)
    tokens = torch.empty(rows, length, dtype=torch.long, device=device)
    tokens[:, 0] = torch.randint(0, states, (rows,), generator=gen, device=device)
    for t in range(1, length):
        tokens[:, t] = successors[tokens[:, t - 1], choice[:, t]]
    return tokens.view(*shape)


def moving_average(values: list[float], window: int) -> list[float]:
    """Trailing mean over up to ``window`` values (fewer at the start)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


@dataclass(frozen=True)
class Gap:
    window: int
    tail_from: int  # first step (0-based) of the compared tail
    max_rel: float  # largest |B - A| / A over the tail of the moving averages
    at_step: int
    final_rel: float  # |B - A| / A of the moving averages at the last step: the parity figure
    smoothed_a: list[float]
    smoothed_b: list[float]


def loss_gap(losses_a: list[float], losses_b: list[float], window: int | None = None) -> Gap:
    """The relative gap between two loss curves of the same length (see the module)."""
    n = min(len(losses_a), len(losses_b))
    if n < 3:
        raise ValueError(f"{n} steps: a parity needs at least 3")
    window = window or max(1, n // 20)
    a, b = moving_average(losses_a[:n], window), moving_average(losses_b[:n], window)
    tail = min(n - 1, int(n * (1 - TAIL_FRACTION)))
    gaps = [abs(b[i] - a[i]) / abs(a[i]) for i in range(tail, n)]
    worst = max(range(len(gaps)), key=gaps.__getitem__)
    return Gap(window, tail, gaps[worst], tail + worst, gaps[-1], a, b)


def mean_curve(curves: list[list[float]]) -> list[float]:
    """The step-wise mean of loss curves, as long as the shortest."""
    n = min(len(c) for c in curves)
    return [sum(c[i] for c in curves) / len(curves) for i in range(n)]


def parity_result(rows: list[dict]) -> dict:
    """The parity summary of result rows in pairs (A, B), one pair per seed, each row with its
    per-step ``losses``; over several seeds the figure is the gap of the mean curves."""
    a, b = rows[0], rows[1]
    seeds = len(rows) // 2
    result = {
        "modes": [a["mode"], b["mode"]],
        "model": a["model"],
        "batch": a["batch"],
        "seq": a["seq"],
        "task": f"Markov chain over {min(STATES, a.get('config', {}).get('vocab_size', STATES))} tokens, successor probabilities {list(SUCCESSOR_P)}",
        "lr": LR,
        "lr_schedule": SCHEDULE,
        "entropy_nats": entropy_nats(),
        "seeds": [r.get("seed", 0) for r in rows[0::2]],
        "rows": rows,
    }
    if not all(r.get("status") == "ok" and r.get("losses") for r in rows):
        failed = [f"{r['mode']}: {r.get('status')} {r.get('error') or ''}".strip() for r in rows if r.get("status") != "ok"]
        return result | {"status": "error", "error": "; ".join(failed) or "no loss curve"}
    gap = loss_gap(mean_curve([r["losses"] for r in rows[0::2]]), mean_curve([r["losses"] for r in rows[1::2]]))
    each = [loss_gap(rows[i]["losses"], rows[i + 1]["losses"]).final_rel for i in range(0, 2 * seeds, 2)]
    return result | {
        "status": "ok",
        "steps": len(gap.smoothed_a),
        "window": gap.window,
        "tail_from": gap.tail_from,
        "final_rel_gap": gap.final_rel,  # the parity figure: the gap after the run's steps (of the seeds' mean curves)
        "max_rel_gap": gap.max_rel,
        "max_rel_gap_step": gap.at_step,
        "seed_final_rel_gaps": each,  # each seed's own gap: the spread the mean leaves out
        "smoothed": [gap.smoothed_a, gap.smoothed_b],
    }


def describe(result: dict) -> list[str]:
    """The lines printed for a parity run."""
    a, b = result["modes"]
    head = f"parity {a} vs {b}: {result['model']}, batch {result['batch']} x seq {result['seq']}, {result['task']} (entropy floor {result['entropy_nats']:.3f} nats)"
    if result["status"] != "ok":
        return [head, f"parity not measured: {result['error']}"]
    sa, sb = (s[-1] for s in result["smoothed"])
    first = result["rows"][0]["losses"][0]
    lines = [
        head,
        f"loss (moving average of {result['window']} steps, AdamW lr {result['lr']:g}, {result.get('lr_schedule', 'constant')}): {a} {first:.3f} -> {sa:.4f}, {b} -> {sb:.4f} after {result['steps']} steps",
        f"relative loss gap |B - A| / A after {result['steps']} steps: {result['final_rel_gap']:.2%} "
        f"(largest over steps {result['tail_from'] + 1}-{result['steps']}: {result['max_rel_gap']:.2%}, step {result['max_rel_gap_step'] + 1})",
    ]
    each = result.get("seed_final_rel_gaps") or []
    if len(each) > 1:
        lines[1] = lines[1].replace("loss (moving average", f"mean loss of {len(each)} seeds (moving average", 1)
        lines.append(f"each seed's own gap ({', '.join(str(s) for s in result['seeds'])}): {', '.join(f'{g:.2%}' for g in each)}")
    return lines
