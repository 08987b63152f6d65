#!/usr/bin/env python3
"""Memplan on one GPU: predicted against measured peak memory, and planned recompute
against the best uniform recompute and against torch.compile's activation memory budget.

For each case (preset, batch, seq, budget) one model is trained a few steps per variant,
with the process capped at the budget (an allocation beyond it fails as on a smaller GPU):

  planned      memplan's plan for the budget
  full         every block recomputed
  every-N      every N-th block recomputed (N around the largest that memplan predicts fits)
  none         no recompute (expected to run out of memory at the tighter budgets)
  planned+compile  memplan's plan for compiled blocks (plan_memory(compiled=True): real
               compiled blocks measured and timed per choice, the kept one also under each
               of memplan's compiler budgets), applied, the blocks compiled as bench does
  compile@r    blocks compiled with torch._functorch.config.activation_memory_budget = r,
               r bisected to the fastest whose measured peak is within planned+compile's

Every variant that runs is run twice, the second time in reverse order (planned+compile
and the best compile@r too), and its figures are the median over both runs' timed steps
and the higher of their peaks; "retries" counts the allocator's frees-and-retries at the
cap (torch.cuda.memory_stats num_alloc_retries), which cost time near a budget.

The training step is bench's: bf16 autocast over fp32 weights, fused AdamW, zero_grad to
None, cuDNN/flash attention. Reported per variant: measured max allocated and max reserved,
the memory model's prediction for the same choices and its error, tokens/s (median step).
First the GPU's bf16 matmul rate and copy bandwidth are measured, and the host's time per
op (eager, under full and under selective recompute): the roofline memplan falls back on
without a GPU. Uncapped runs then show what the memory model cannot see (library
workspaces, allocator overhead) against the overheads it assumes (memplan/overheads.py).
Each case's plan takes its blocks' bytes from one real block measured per choice by the
allocator, and its recompute costs from that block timed per choice, as plan_memory does
on a GPU; each case starts with an untimed warm-up run.

Any model (``--hf``): Hugging Face causal LMs built with ``from_config`` on the GPU (Llama,
Qwen2 with tied embeddings and QKV biases, Mistral, GPT-2; no download), trained as bench
trains them (``HfCausalLM``: bf16 autocast over fp32 weights, fused AdamW, the chunked
loss). Each shape (architecture, batch, seq) is planned by ``memplan.plan``'s calibration
(``calibrate_any``: fake tensors, one real block per choice measured and timed) at budgets a
fraction of the way from its predicted fully recomputed peak to its predicted peak without
recompute (so no recompute runs out of memory). The uniform options (full, every-N, none)
are screened once per shape, uncapped: one fits a budget where its measured reserved peak is
within it. At each budget the plan and the fitting uniform options (the one that recomputes
the fewest blocks, and the screen's fastest) run interleaved, ABBA, each capped at the budget;
a uniform option with the plan's very layout is the plan itself (ratio 1) and is not run
again. The first shape's last plan is also run with its counts placed three ways (every-N
or spread, recomputed first, recomputed last), and the cases --hf-compile names are compiled:
planned+compile (memplan's plan for compiled blocks, then the blocks and the loss compiled)
against compile@r (no recompute, blocks compiled under activation_memory_budget r, the largest
r whose measured peak is within planned+compile's), each graph compiled once, then ten runs of
each interleaved ABBA (hf_compiled says how). Results: OUT/NAME.txt and .json
(NAME: --name, else hf_COMMIT), written after each case; the grid without --hf: OUT/grid.txt and .json.

Usage: python benchmarks/memplan_h200.py [--out benchmarks/results/memplan_h200] [--time-budget 300] [--skip-compile]
       python benchmarks/memplan_h200.py --hf [--hf-shapes llama:4:2048,gpt2:8:1024] [--hf-compile gpt2:4:2048:0.45]
                                         [--time-budget 240] [--compile-time 120] [--name hf_grid]
       python benchmarks/memplan_h200.py --hf --device cpu --tiny --hf-shapes gpt2:2:64 --out /tmp/smoke  (smoke run)
"""

from __future__ import annotations

import os

os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

import argparse
import gc
import json
import re
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch

from trainstack.bench import device as dev
from trainstack.nn.decoder import Block, Transformer, rope_tables
from trainstack.nn.presets import PRESETS
from trainstack.memplan.wrappers import apply_choices, compile_block, unwrap, wrap
from trainstack.memplan import measure_compiled_blocks, measure_real_block
from trainstack.memplan.decoder import block_op_counts, calibrate
from trainstack.memplan.tracking import Roofline
from trainstack.memplan.memory import breakdown
from trainstack.memplan.overheads import default_overheads
from trainstack.memplan.costs import Choice, Overheads
from trainstack.memplan.planner import choose, choose_over_budgets
from trainstack.errors import BudgetError
from trainstack.fsutil import atomic_write_text

GiB = 1 << 30
MiB = 1 << 20
WARMUP, STEPS = 2, 5
# where --hf trains: "cuda", or "cpu" (--device cpu: a smoke run of the script itself, with
# --tiny configs; no memory is measured and no figure means anything)
DEVICE = "cuda"

# (preset, batch, seq, budget GiB): budgets between "everything recomputed" and "nothing".
CASES = [
    ("125m", 8, 2048, 5),
    ("125m", 8, 2048, 8),
    ("125m", 16, 2048, 8),
    ("125m", 8, 4096, 12),
    ("1b", 4, 4096, 32),
    ("1b", 4, 4096, 45),
    ("1b", 8, 2048, 36),
    ("1b", 2, 8192, 50),
    ("3b", 2, 4096, 62),
    ("3b", 2, 4096, 75),
    ("3b", 4, 4096, 80),
    ("3b", 1, 8192, 70),
]
COMPILE_CASE = ("1b", 4, 4096, 45)


@dataclass
class Row:
    case: str
    variant: str
    choices: str
    status: str  # ok | oom | error
    predicted_allocated: int | None = None
    predicted_reserved: int | None = None
    allocated: int | None = None
    reserved: int | None = None
    tokens_per_s: float | None = None
    step_s: list[float] = field(default_factory=list)
    note: str = ""
    alloc_retries: int = 0  # times the allocator hit the cap, freed its cache and tried again
    repeats: int = 1
    run_tokens_per_s: list[float] = field(default_factory=list)  # each run's own (interleaved repeats)

    @property
    def error(self) -> float | None:
        if self.predicted_allocated is None or not self.allocated:
            return None
        return self.predicted_allocated / self.allocated - 1


def _median_time(fn, *, events: bool) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        if events:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1000)
        else:  # host time: the GPU work is too small to matter
            t = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def measure_ceilings() -> Roofline:
    """GPU: bf16 8192^3 matmul rate, device copy bandwidth (read + write). Host: per-op issue
    time of a 125m block's forward+backward at a size too small to keep the GPU busy, kept,
    fully recomputed and selectively recomputed (per op of its forward, as counted by calibration)."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    src = torch.randn(GiB // 4, device="cuda")
    dst = torch.empty_like(src)
    flops = 2 * 8192**3 / _median_time(lambda: a @ b, events=True)
    bw = 2 * src.nbytes / _median_time(lambda: dst.copy_(src), events=True)
    del a, b, src, dst
    cfg, shape = PRESETS["125m"], (1, 64)
    fwd_ops, bwd_ops = block_op_counts(cfg, batch=shape[0], seq=shape[1], device="cuda")
    with torch.device("cuda"):
        block = Block(cfg)
        cos, sin = rope_tables(cfg)
    x = torch.randn(*shape, cfg.dim, device="cuda", requires_grad=True)

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = block(x, cos[: shape[1]], sin[: shape[1]])
        y.sum().backward()

    host = {}
    with dev.sdpa_context(torch.device("cuda")):
        for choice in (Choice.KEEP, Choice.FULL, Choice.SELECTIVE):
            wrap(block, choice)
            host[choice] = _median_time(lambda: [step() for _ in range(10)], events=False) / 10
    unwrap(block)
    del block, x
    torch.cuda.empty_cache()
    return Roofline(
        flops_per_s=flops,
        bytes_per_s=bw,
        host_op_s=host[Choice.KEEP] / (fwd_ops + bwd_ops),
        full_op_s=max(0.0, host[Choice.FULL] - host[Choice.KEEP]) / fwd_ops,
        selective_op_s=max(0.0, host[Choice.SELECTIVE] - host[Choice.KEEP]) / fwd_ops,
    )


def uniform_every(n: int, every: int) -> tuple[Choice, ...]:
    """Bench's ac-every-N: blocks 0, N, 2N, ... fully recomputed."""
    return tuple(Choice.FULL if i % every == 0 else Choice.KEEP for i in range(n))


LETTERS = {Choice.KEEP: "k", Choice.SELECTIVE: "s", Choice.FULL: "f"}


def describe(choices: tuple[Choice, ...]) -> str:
    return "".join(LETTERS[c] for c in choices)


def parse_choices(text: str) -> tuple[Choice, ...]:
    by_letter = {letter: c for c, letter in LETTERS.items()}
    return tuple(by_letter[letter] for letter in text)


def cap(budget: int | None) -> None:
    if DEVICE != "cuda":
        return
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(1.0 if budget is None else min(1.0, budget / total))


def clean() -> None:
    gc.collect()
    if DEVICE == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def train(model, opt, batches, *, warmup: int = WARMUP, steps: int = STEPS) -> tuple[int, int, list[float], int]:
    """bench's step; returns (max allocated, max reserved, step seconds, allocator retries) over the timed steps."""

    device = torch.device(DEVICE)
    cuda = device.type == "cuda"

    def step(i: int) -> None:
        tokens = batches[i % len(batches)]
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    with dev.sdpa_context(device):
        for i in range(warmup):
            step(i)
        retries_before = 0
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            retries_before = torch.cuda.memory_stats().get("num_alloc_retries", 0)
        timer = dev.StepTimer(device)
        timer.mark()
        for i in range(warmup, warmup + steps):
            step(i)
            timer.mark()
        seconds = timer.step_seconds()
    if not cuda:  # nothing measured: the smoke run's peaks are 0
        return 0, 0, seconds, 0
    retries = torch.cuda.memory_stats().get("num_alloc_retries", 0) - retries_before
    return torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved(), seconds, retries


class Case:
    """One model and optimizer, trained under several recompute choices at one budget."""

    def __init__(self, preset: str, batch: int, seq: int, budget: int | None, roofline: Roofline, overheads: Overheads, *, timed: bool = True) -> None:
        self.preset, self.batch, self.seq, self.budget = preset, batch, seq, budget
        self.cfg = PRESETS[preset]
        self.name = f"{preset} b{batch} s{seq} " + (f"{budget / GiB:.0f}GiB" if budget else "uncapped")
        self.overheads = overheads
        with dev.sdpa_context(torch.device("cuda")):
            try:
                self.profile = calibrate(self.cfg, batch=batch, seq=seq, device="cuda", roofline=roofline, label=preset)
            except Exception as exc:  # noqa: BLE001 - fake CUDA tensors unsupported: calibrate on fake CPU ones
                print(f"calibration on fake cuda tensors failed ({exc!r}); using fake cpu tensors", flush=True)
                self.profile = calibrate(self.cfg, batch=batch, seq=seq, device="cpu", roofline=roofline, label=preset)
            # the blocks' bytes (and times) from one real block, as plan_memory takes them on a GPU
            self.profile = measure_real_block(self.profile, self.cfg, batch=batch, seq=seq, timed=timed)
        clean()
        cap(None)
        torch.manual_seed(0)
        with torch.device("cuda"):
            self.model = Transformer(self.cfg)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=3e-4, fused=True)
        self.batches = torch.randint(0, self.cfg.vocab_size, (2, batch, seq + 1), device="cuda")

    def predicted(self, choices: tuple[Choice, ...]):
        return breakdown(self.profile, choices, overheads=self.overheads)

    def run(self, variant: str, choices: tuple[Choice, ...] | None, note: str = "") -> Row:
        """Train with ``choices`` (None: the blocks as they are, e.g. compiled) under the budget."""
        if choices is not None:
            apply_choices(self.model, choices)
        self.opt.zero_grad(set_to_none=True)
        clean()
        cap(self.budget)
        pred = self.predicted(choices) if choices is not None else None
        row = Row(self.name, variant, describe(choices) if choices else "", "ok", note=note)
        if pred is not None:
            row.predicted_allocated, row.predicted_reserved = pred.allocated_peak, pred.reserved_peak
        try:
            row.allocated, row.reserved, row.step_s, row.alloc_retries = train(self.model, self.opt, self.batches)
            self.settle(row)
        except torch.OutOfMemoryError as exc:
            row.status, row.note = "oom", (note + " " + str(exc).splitlines()[0][:120]).strip()
        finally:
            self.opt.zero_grad(set_to_none=True)
            cap(None)
            clean()
        return row

    def settle(self, row: Row) -> None:
        """tokens/s from the median of the row's steps; "over" where it reserved past the budget."""
        row.tokens_per_s = self.batch * self.seq / statistics.median(row.step_s)
        if self.budget is not None and row.reserved > self.budget:
            row.status = "over"

    def fold(self, row: Row, again: Row) -> None:
        """Fold a repeat of ``row``'s run into it: every timed step, the higher peaks."""
        if again.status != "ok":
            row.status, row.note = again.status, (row.note + f" (repeat: {again.status} {again.note})").strip()
            return
        row.step_s += again.step_s
        row.allocated, row.reserved = max(row.allocated, again.allocated), max(row.reserved, again.reserved)
        row.alloc_retries += again.alloc_retries
        row.repeats += 1
        self.settle(row)

    def close(self) -> None:
        del self.model, self.opt, self.batches
        clean()


def measure_overheads(roofline: Roofline, rows: list[Row]) -> dict:
    """Uncapped runs: measured minus predicted allocated (library workspace), reserved / allocated - 1."""
    residuals, ratios = [], []
    for preset, batch, seq in (("125m", 8, 2048), ("1b", 4, 4096)):
        case = Case(preset, batch, seq, None, roofline, Overheads(), timed=False)
        n = case.cfg.n_layers
        for choice in (Choice.KEEP, Choice.SELECTIVE, Choice.FULL):
            row = case.run(f"{choice} (uncapped)", (choice,) * n)
            rows.append(row)
            if row.status == "ok":
                residuals.append(row.allocated - row.predicted_allocated)
                ratios.append(row.reserved / row.allocated - 1)
        case.close()
    return {"workspace_min": min(residuals), "workspace_max": max(residuals), "reserved_over_allocated_max": max(ratios)}


def run_grid(case_spec, roofline: Roofline, overheads: Overheads, rows: list[Row], *, compile_too: bool = True) -> dict:
    preset, batch, seq, budget_gib = case_spec
    budget = budget_gib * GiB
    case = Case(preset, batch, seq, budget, roofline, overheads)
    n = case.cfg.n_layers
    summary: dict = {"case": case.name, "budget": budget}
    try:
        plan = choose(case.profile, budget_bytes=budget, overheads=overheads)
    except BudgetError as exc:
        summary["planned"] = f"no plan: {exc}"
        case.close()
        return summary
    case.run("warm-up", (Choice.FULL,) * n)  # untimed: the first run of a case pays for clocks and allocator
    planned = case.run("planned", plan.choices, note=plan.summary())
    rows.append(planned)
    summary.update(planned=planned, plan=plan.summary())
    uniform = [case.run("full", (Choice.FULL,) * n)]
    fitting = [e for e in range(2, n + 1) if case.predicted(uniform_every(n, e)).reserved_peak <= budget]
    start = max(fitting) if fitting else 2
    # the largest N predicted to fit, then larger N (fewer recomputed blocks) while they still fit
    for every in range(start, min(n, start + 3) + 1):
        row = case.run(f"every-{every}", uniform_every(n, every))
        uniform.append(row)
        if row.status != "ok":
            break
    if start > 2 and not any(r.status == "ok" for r in uniform[1:]):
        uniform.append(case.run(f"every-{start - 1}", uniform_every(n, start - 1)))
    rows.extend(uniform)
    none = case.run("none", (Choice.KEEP,) * n)
    rows.append(none)
    # the same runs again in reverse order: drift in clocks or temperature over the case
    # falls on every variant alike, and each figure is the median of both runs' steps
    for row in reversed([planned, *uniform, none]):
        if row.status == "ok":
            case.fold(row, case.run(row.variant, parse_choices(row.choices)))
    ok = [r for r in uniform if r.status == "ok"]
    summary["best_uniform"] = max(ok, key=lambda r: r.tokens_per_s) if ok else None
    summary["none"] = none
    if compile_too and case_spec == COMPILE_CASE and planned.status == "ok":
        try:
            plan = plan_compiled(case)
            compiled = planned_compiled(case, plan)
            rows.append(compiled)
            summary["planned+compile"] = compiled
            summary["compile"] = compile_budget(case, compiled if compiled.status == "ok" else planned, rows)
            if compiled.status == "ok":  # once more, after the compiler's runs
                case.fold(compiled, planned_compiled(case, plan))
        except Exception:  # noqa: BLE001 - report the compiler's failure, keep the other figures
            traceback.print_exc()
            rows.append(Row(case.name, "compile", "", "error", note=traceback.format_exc().splitlines()[-1][:160]))
    case.close()
    return summary


def compile_budget(case: Case, planned: Row, rows: list[Row], rounds: int = 3) -> Row | None:
    """Bisect activation_memory_budget for the fastest compiled run whose peak is within
    ``planned``'s; the best one is run once more (after the others) and folded in."""
    apply_choices(case.model, (Choice.KEEP,) * case.cfg.n_layers)
    lo, hi, best, best_r = 0.0, 1.0, None, None
    r = 0.5
    for _ in range(rounds):
        row = compiled_at(case, r)
        rows.append(row)
        fits = row.status == "ok" and row.allocated <= planned.allocated
        if fits and (best is None or row.tokens_per_s > best.tokens_per_s):
            best, best_r = row, r
        lo, hi = (r, hi) if fits else (lo, r)
        r = (lo + hi) / 2
    if best is not None:
        case.fold(best, compiled_at(case, best_r))
    return best


def compiled_at(case: Case, r: float) -> Row:
    """The blocks compiled in place with torch._functorch.config.activation_memory_budget = r."""
    import torch._dynamo
    import torch._functorch.config as fconfig

    torch._dynamo.reset()
    fconfig.activation_memory_budget = r
    try:
        for i, block in enumerate(case.model.layers):
            case.model.layers[i] = unwrap(block)
            case.model.layers[i].compile()
        return case.run(f"compile@{r:.3f}", None)
    finally:
        fconfig.activation_memory_budget = 1.0
        for block in case.model.layers:
            block._compiled_call_impl = None
        torch._dynamo.reset()


def plan_compiled(case: Case):
    """memplan's plan for compiled blocks, as plan_memory(compiled=True) makes it: real
    compiled blocks measured and timed per choice and per compiler budget of the kept ones."""
    profiles = measure_compiled_blocks(case.profile, case.cfg, batch=case.batch, seq=case.seq)
    clean()
    return choose_over_budgets(profiles, budget_bytes=case.budget, overheads=case.overheads)


def planned_compiled(case: Case, plan) -> Row:
    """``plan`` applied, each block compiled as bench compiles it (compile_block, with the
    plan's compiler budget for kept blocks); the model's blocks restored afterwards."""
    import torch._dynamo

    apply_choices(case.model, plan.choices)
    originals = list(case.model.layers)
    torch._dynamo.reset()
    try:
        for i, block in enumerate(originals):
            case.model.layers[i] = compile_block(block, plan.compiler_budget)
        row = case.run("planned+compile", None, note=plan.summary() + " (planned for compiled blocks)")
    finally:
        for i, block in enumerate(originals):
            case.model.layers[i] = block
        torch._dynamo.reset()
    pred = breakdown(plan.profile, plan.choices, overheads=case.overheads)
    row.choices, row.predicted_allocated, row.predicted_reserved = describe(plan.choices), pred.allocated_peak, pred.reserved_peak
    return row


def gib(n: int | None) -> str:
    return "-" if n is None else f"{n / GiB:7.2f}"


def table(rows: list[Row]) -> str:
    head = f"{'case':24} {'variant':16} {'status':6} {'pred alloc':>10} {'meas alloc':>10} {'error':>7} {'pred rsv':>8} {'meas rsv':>8} {'tokens/s':>10} {'runs':>4} {'retries':>7}  note"
    lines = [head, "-" * len(head)]
    for r in rows:
        err = "-" if r.error is None else f"{r.error:+.1%}"
        tps = "-" if r.tokens_per_s is None else f"{r.tokens_per_s:10.0f}"
        lines.append(f"{r.case:24} {r.variant:16} {r.status:6} {gib(r.predicted_allocated):>10} {gib(r.allocated):>10} {err:>7} {gib(r.predicted_reserved):>8} {gib(r.reserved):>8} {tps:>10} {r.repeats:>4} {r.alloc_retries:>7}  {r.note}")
    return "\n".join(lines)


def verdicts(summaries: list[dict]) -> list[str]:
    """One line per case: planned against the best uniform option and the compiler's budget, as ratios."""
    lines = []
    for s in summaries:
        p = s.get("planned")
        if not isinstance(p, Row):
            lines.append(f"{s['case']}: {p}")
            continue
        if p.status != "ok":
            lines.append(f"{s['case']}: planned {p.status} ({p.note})")
            continue
        within = "within" if p.reserved <= s["budget"] else "OVER"
        parts = [f"planned {p.tokens_per_s:.0f} tok/s ({s['plan']}), reserved {p.reserved / GiB:.2f} GiB {within} budget, prediction error {p.error:+.1%}"]
        u = s.get("best_uniform")
        parts.append(f"best uniform {u.variant} {u.tokens_per_s:.0f} tok/s, planned/uniform {p.tokens_per_s / u.tokens_per_s:.3f}" if u else "no uniform option fits")
        parts.append(f"none: {s['none'].status}")
        if "compile" in s:
            c = s["compile"]
            parts.append(f"{c.variant} {c.tokens_per_s:.0f} tok/s at {c.allocated / GiB:.2f} GiB, planned/compile {p.tokens_per_s / c.tokens_per_s:.3f}" if c else "no compiled run within the planned peak")
            pc = s.get("planned+compile")
            if c and pc is not None and pc.status == "ok":
                parts.append(
                    f"planned+compile {pc.tokens_per_s:.0f} tok/s ({pc.note}) at {pc.allocated / GiB:.2f} GiB, prediction error {pc.error:+.1%}, "
                    f"(planned+compile)/compile {pc.tokens_per_s / c.tokens_per_s:.3f}"
                )
        lines.append(f"{s['case']}: " + "; ".join(parts))
    return lines


def write(out: Path, header: list[str], rows: list[Row], summaries: list[dict], skipped: list, roofline: Roofline, overheads: Overheads, seconds: float) -> str:
    text = "\n".join([*header, "", table(rows), "", *verdicts(summaries)])
    if skipped:
        text += "\nnot run (time budget spent): " + ", ".join(f"{p} b{b} s{s} {g}GiB" for p, b, s, g in skipped)
    text += f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}, {seconds:.0f} s"
    out.mkdir(parents=True, exist_ok=True)
    (out / "grid.txt").write_text(text + "\n", encoding="utf-8")
    data = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "roofline": roofline.__dict__,
        "overheads": {"workspace": overheads.workspace, "fragmentation": overheads.fragmentation, "largest_room": overheads.largest_room},
        "rows": [{**r.__dict__, "error": r.error} for r in rows],
    }
    (out / "grid.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return text


# Hugging Face shapes: (architecture, batch, seq); budgets at these fractions of the way from
# the predicted fully recomputed peak to the predicted peak without recompute.
HF_SHAPES = [("llama", 4, 2048), ("qwen2", 4, 2048), ("mistral", 8, 1024), ("gpt2", 4, 2048)]
HF_FRACTIONS = (0.15, 0.45, 0.8)
HF_EVERY = (2, 3, 4, 6)
# the compiled comparison: (architecture, batch, seq, budget fraction)
HF_COMPILE = [("gpt2", 4, 2048, 0.45)]
HF_WARMUP, HF_SCREEN_STEPS, HF_STEPS = 2, 3, 6
# the compiled comparison: runs of each variant (interleaved ABBA) and timed steps a run; the
# timed steps of a run that only measures a peak; rounds of bisecting the compiler's budget
COMPILED_SEGMENTS, COMPILED_STEPS, PEAK_STEPS, BISECT_ROUNDS = 10, 8, 2, 5
TINY = False  # --tiny: six-block configs of the same families (with --device cpu, the smoke run)


def hf_config(arch: str):
    """Config shapes of public models (TinyLlama-1.1B, Qwen2-0.5B, a 12-layer Mistral, GPT-2 medium), from_config only;
    with ``TINY``, six-block configs of the same families (the smoke run on a CPU)."""
    import transformers as t

    if TINY:
        small = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
        tiny = {
            "llama": lambda: t.LlamaConfig(**small),
            "qwen2": lambda: t.Qwen2Config(**small, tie_word_embeddings=True),
            "mistral": lambda: t.MistralConfig(**small, sliding_window=None),
            "gpt2": lambda: t.GPT2Config(vocab_size=512, n_embd=64, n_layer=6, n_head=4, n_positions=512),
        }
        return tiny[arch]()
    if arch == "llama":
        return t.LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=4096)
    if arch == "qwen2":
        return t.Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True, max_position_embeddings=4096)
    if arch == "mistral":
        return t.MistralConfig(vocab_size=32768, hidden_size=2048, intermediate_size=5632, num_hidden_layers=12, num_attention_heads=16, num_key_value_heads=8, sliding_window=None, max_position_embeddings=4096)
    if arch == "gpt2":
        return t.GPT2Config(vocab_size=50257, n_embd=1024, n_layer=24, n_head=16, n_positions=2048)
    raise ValueError(arch)


def fold(row: Row, again: Row, tokens: int, budget: int | None) -> Row:
    """Fold a repeat of ``row``'s run into it: every timed step, the higher peaks, the run's tokens/s kept apart."""
    if again.status != "ok" or row.status not in ("ok", "over"):
        row.status = again.status if row.status == "ok" else row.status
        row.note = (row.note + f" (repeat: {again.status} {again.note})").strip()
        return row
    row.step_s += again.step_s
    row.run_tokens_per_s += again.run_tokens_per_s
    row.allocated, row.reserved = max(row.allocated, again.allocated), max(row.reserved, again.reserved)
    row.alloc_retries += again.alloc_retries
    row.repeats += 1
    row.tokens_per_s = tokens / statistics.median(row.step_s)
    if budget is not None and row.reserved > budget:
        row.status = "over"
    return row


def pair_ratios(a: Row, b: Row) -> list[float]:
    """a/b tokens/s of each interleaved pair of runs (run k of a against run k of b)."""
    return [x / y for x, y in zip(a.run_tokens_per_s, b.run_tokens_per_s)]


class HfShape:
    """One Hugging Face model at one (batch, seq): calibrated once, uniform options screened once."""

    def __init__(self, arch: str, batch: int, seq: int) -> None:
        import transformers

        from trainstack.nn.hf_model import HfCausalLM
        from trainstack.memplan import calibrate_any

        self.arch, self.batch, self.seq = arch, batch, seq
        self.name = f"{arch} b{batch} s{seq}"
        clean()
        cap(None)
        torch.manual_seed(0)
        with torch.device(DEVICE):
            hf = transformers.AutoModelForCausalLM.from_config(hf_config(arch), attn_implementation="sdpa").float()
        self.model = HfCausalLM(hf, arch).train()
        t0 = time.perf_counter()
        with dev.sdpa_context(torch.device(DEVICE)):
            self.profile = calibrate_any(self.model, self.model.example_batch(batch, seq), label=self.name)
        self.calibration_s = time.perf_counter() - t0
        self.overheads = default_overheads()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=3e-4, fused=DEVICE == "cuda")
        self.batches = torch.randint(0, hf.config.vocab_size, (2, batch, seq + 1), device=DEVICE)
        self.params = sum(p.numel() for p in self.model.parameters())
        self.n = self.profile.n_blocks

    def predicted(self, choices: tuple[Choice, ...]):
        return breakdown(self.profile, choices, overheads=self.overheads)

    def run(self, case: str, variant: str, choices: tuple[Choice, ...], budget: int | None, note: str = "", *, steps: int | None = None, compiled: bool = False) -> Row:
        """Train ``steps`` timed steps with ``choices`` under ``budget``. ``compiled``: the
        blocks are already set up (choices applied, then compiled), and the memory model,
        which plans eager blocks, predicts nothing for them."""
        if not compiled:
            apply_choices(self.model, choices, self.profile.blocks, self.profile.first_block)
        self.opt.zero_grad(set_to_none=True)
        clean()
        cap(budget)
        row = Row(case, variant, describe(choices), "ok", note=note)
        if not compiled:
            pred = self.predicted(choices)
            row.predicted_allocated, row.predicted_reserved = pred.allocated_peak, pred.reserved_peak
        try:
            row.allocated, row.reserved, row.step_s, row.alloc_retries = train(self.model, self.opt, self.batches, warmup=HF_WARMUP, steps=HF_STEPS if steps is None else steps)
            row.tokens_per_s = self.batch * self.seq / statistics.median(row.step_s)
            row.run_tokens_per_s = [row.tokens_per_s]
            if budget is not None and row.reserved > budget:
                row.status = "over"
        except torch.OutOfMemoryError as exc:
            row.status, row.note = "oom", (note + " " + str(exc).splitlines()[0][:120]).strip()
        finally:
            self.opt.zero_grad(set_to_none=True)
            cap(None)
            clean()
        return row

    def interleaved(self, case: str, variants: list[tuple[str, tuple[Choice, ...], str]], budget: int | None) -> list[Row]:
        """ABBA: the variants in order, then in reverse, each ``HF_STEPS`` timed steps; a
        variant's row pools both runs' steps (tokens/s from their median) and keeps each run's
        tokens/s, so that clock or temperature drift over the case falls on all alike."""
        rows: dict[str, Row] = {}
        for variant, choices, note in [*variants, *reversed(variants)]:
            row = self.run(case, variant, choices, budget, note=note)
            rows[variant] = fold(rows[variant], row, self.batch * self.seq, budget) if variant in rows else row
        return [rows[v[0]] for v in variants]

    def close(self) -> None:
        del self.model, self.opt, self.batches
        clean()


def hf_grid(spec: tuple[str, int, int], rows: list[Row], summaries: list[dict], *, save, placement: bool = False, compile_fractions: tuple[float, ...] = (), compile_until: float = float("inf"), fractions: tuple[float, ...] = HF_FRACTIONS) -> None:
    """One shape: the uniform options screened uncapped; at each budget the plan against the
    fitting uniform options, interleaved (ABBA) and all capped at the budget; then, where
    asked, the placement of the last plan's counts (uncapped) and the compiled comparison.
    ``save()`` after each case, so that a run stopped part way keeps what it measured."""
    from trainstack.memplan.planner import choices_for, placements

    arch, batch, seq = spec
    shape = HfShape(arch, batch, seq)
    n = shape.n
    print(f"{shape.name}: {shape.params / 1e9:.2f}B parameters, {n} blocks at {shape.profile.blocks}, calibrated in {shape.calibration_s:.1f} s", flush=True)
    keep, full = (shape.predicted((c,) * n).reserved_peak for c in (Choice.KEEP, Choice.FULL))
    shape.run(shape.name, "warm-up", (Choice.FULL,) * n, None, steps=1)  # untimed: the first run pays for clocks and allocator
    screen = [shape.run(shape.name, "full", (Choice.FULL,) * n, None, note="uncapped screen", steps=HF_SCREEN_STEPS)]
    screen += [shape.run(shape.name, f"every-{e}", uniform_every(n, e), None, note="uncapped screen", steps=HF_SCREEN_STEPS) for e in HF_EVERY if e < n]
    none = shape.run(shape.name, "none", (Choice.KEEP,) * n, None, note="uncapped screen", steps=HF_SCREEN_STEPS)
    rows.extend([*screen, none])
    later = []  # (summary, case, budget) of the cases compared compiled, after the others
    last_plan = None
    for fraction in fractions:
        budget = int(full + fraction * (keep - full))
        case = f"{shape.name} {budget / GiB:.1f}GiB"
        summary: dict = {"case": case, "budget": budget, "fraction": fraction, "calibration_s": shape.calibration_s}
        try:
            plan = choose(shape.profile, budget_bytes=budget, overheads=shape.overheads)
        except BudgetError as exc:
            summaries.append({**summary, "planned": f"no plan: {exc}"})
            continue
        fits = [r for r in screen if r.status == "ok" and r.reserved <= budget]
        # the fitting uniform option that recomputes the fewest blocks, and the screen's fastest
        rivals = {r.variant: r for r in (min(fits, key=lambda r: r.choices.count("f")), max(fits, key=lambda r: r.tokens_per_s))} if fits else {}
        same = [v for v, r in rivals.items() if parse_choices(r.choices) == plan.choices]
        others = [(v, parse_choices(r.choices), f"capped at {budget / GiB:.1f} GiB") for v, r in rivals.items() if v not in same]
        measured = shape.interleaved(case, [("planned", plan.choices, plan.summary()), *others], budget)
        planned, uniform = measured[0], measured[1:]
        rows.extend(measured)
        summary.update(planned=planned, plan=plan.summary(), same_as=same, uniform=uniform, none_fits=none.status == "ok" and none.reserved <= budget)
        summaries.append(summary)
        save()
        last_plan = plan
        if fraction in compile_fractions and planned.status == "ok":
            later.append((summary, case, budget))
    if placement and last_plan is not None:
        # the same counts placed three ways: the planner's own choice of layout (every-N, else
        # spread), the recomputed blocks first, and last
        counts = tuple(last_plan.counts[c] for c in (Choice.FULL, Choice.SELECTIVE, Choice.KEEP))
        first = choices_for(*counts)
        layouts = [("layout-spread", next(placements(*counts)), "uncapped"), ("layout-first", first, "uncapped"), ("layout-last", tuple(reversed(first)), "uncapped")]
        layout_rows = shape.interleaved(f"{shape.name} layouts", layouts, None)
        rows.extend(layout_rows)
        summaries.append({"case": f"{shape.name} layouts", "layouts": layout_rows})
        save()
    for summary, case, budget in later:
        if time.perf_counter() > compile_until:
            summary["compiled"] = {"case": case, "error": "not run: time budget spent"}
            continue
        try:
            summary["compiled"] = hf_compiled(shape, case, budget, rows, until=compile_until, save=save)
        except Exception:  # noqa: BLE001 - report the compiler's failure, keep the other figures
            traceback.print_exc()
            rows.append(Row(case, "compile", "", "error", note=traceback.format_exc().splitlines()[-1][:160]))
            summary["compiled"] = {"case": case, "error": rows[-1].note}
        save()
    shape.close()


def mean_rate(step_s: list[float], tokens: int) -> float:
    """Tokens/s over ``step_s``: all their tokens over all their time (the mean step, which a
    bimodal step time does not tip as it tips the median)."""
    return tokens * len(step_s) / sum(step_s)


def paired_interval(a: list[float], b: list[float], *, draws: int = 4000, seed: int = 0) -> tuple[float, float, float]:
    """The mean of the paired ratios a[k]/b[k] and its 95% bootstrap interval (percentiles of
    the mean over ``draws`` resamples of the pairs, seeded: the same figures give the same interval)."""
    import random

    ratios = [x / y for x, y in zip(a, b)]
    if not ratios:
        raise ValueError("no pairs")
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return statistics.fmean(ratios), means[int(0.025 * draws)], means[min(draws - 1, int(0.975 * draws))]


def abba(variants: list[str], segments: int) -> list[str]:
    """``segments`` runs of each variant, interleaved ABBA (A B B A A B ...), so that drift
    over the comparison falls on both alike and run k of one sits beside run k of the other."""
    order: list[str] = []
    while len(order) < segments * len(variants):
        order += variants if len(order) // len(variants) % 2 == 0 else list(reversed(variants))
    return order


def hf_compiled(shape: HfShape, case: str, budget: int, rows: list[Row], until: float = float("inf"), save=lambda: None) -> dict:
    """planned+compile against compile@r: the compiler's activation memory budget tuned to the same peak.

    planned+compile is memplan's plan for compiled blocks (the real block measured compiled,
    the kept one also under each compiler budget, as bench and ``run --compile --memplan``
    plan), applied, then every block and the loss compiled as bench compiles them. compile@r
    plans no recompute and compiles every block under activation_memory_budget r, the
    largest r whose measured peak is within planned+compile's: r = 1 (the default
    partitioner) where it fits, else bisected on the peak alone (a compiled graph fixes it)
    for ``BISECT_ROUNDS`` rounds, each a short run; a new round starts only before ``until``
    (time.perf_counter()). Then the two run ``COMPILED_SEGMENTS`` times each, interleaved
    ABBA, each run ``COMPILED_STEPS`` timed steps after ``HF_WARMUP`` untimed ones, all capped
    at ``budget``. Every graph is compiled before the timing starts, and switching between
    them recompiles nothing. A run's tokens/s is its tokens over its time; the ratio is the
    pooled one, with the mean of the pairs' ratios and its 95% bootstrap interval beside it.
    ``save()`` after each run."""
    import torch._dynamo.config as dynamo_config

    from trainstack.memplan import calibrate_any_compiled
    from trainstack.memplan.planner import choose_over_budgets
    from trainstack.memplan.wrappers import block_list

    layers = block_list(shape.model, shape.profile.blocks)
    originals = list(layers)
    all_keep = (Choice.KEEP,) * shape.n
    tokens = shape.batch * shape.seq

    def compiled(variant: str, choices: tuple[Choice, ...], keep_budget: float | None, note: str, steps: int) -> Row:
        apply_choices(shape.model, choices, shape.profile.blocks, shape.profile.first_block)
        for i, block in enumerate(originals):
            layers[i] = compile_block(block, keep_budget)
        t0 = time.perf_counter()
        try:
            row = shape.run(case, variant, choices, budget, note=note, steps=steps, compiled=True)
        except Exception as exc:  # noqa: BLE001 - a budget the compiler cannot partition under is a result, not a crash
            row = Row(case, variant, "", "error", note=f"{note}; the compile failed: {type(exc).__name__}: {str(exc).strip().splitlines()[-1][:120]}")
        finally:
            for i, block in enumerate(originals):
                layers[i] = block
        if row.status == "ok":
            row.tokens_per_s = mean_rate(row.step_s, tokens)
            row.run_tokens_per_s = [row.tokens_per_s]
        print(f"{case} {variant}: {row.status} {row.tokens_per_s or 0:.0f} tok/s, {gib(row.allocated).strip()} GiB allocated ({note}{'; ' if note else ''}{time.perf_counter() - t0:.1f} s)", flush=True)
        save()
        return row

    name = "recompile_limit" if hasattr(dynamo_config, "recompile_limit") else "cache_size_limit"
    apply_choices(shape.model, all_keep, shape.profile.blocks, shape.profile.first_block)
    t0 = time.perf_counter()
    profiles = calibrate_any_compiled(shape.model, shape.model.example_batch(shape.batch, shape.seq), compiled=True, label=shape.name)
    plan = choose_over_budgets(profiles, budget_bytes=budget, overheads=shape.overheads)
    print(f"{case}: plan for compiled blocks {plan.summary()} in {time.perf_counter() - t0:.0f} s", flush=True)
    for r, profile in profiles.items():  # what each compiler budget offered the planner
        keep = profile.step_seconds - profile.head_seconds
        print(f"{case}: budget {r:g}: kept block {1e3 * keep / profile.n_blocks:.3f} ms, saves {gib(profile.options[Choice.KEEP].saved).strip()} GiB; {_budget_plan(profile, budget, shape.overheads)}", flush=True)
    torch._dynamo.reset()
    shape.model.compile_loss()
    result: dict = {"case": case, "plan": plan.summary(), "tried": []}
    try:
        with dynamo_config.patch({name: 64}):
            # the first run compiles the plan's graphs and measures its peak
            first = compiled("planned+compile", plan.choices, plan.compiler_budget, plan.summary() + ", compiled; first run", PEAK_STEPS)
            rows.append(first)
            result["planned+compile"] = first
            if first.status != "ok":
                return result
            best_r, lo, hi, r = None, 0.0, 1.0, 1.0
            for k in range(BISECT_ROUNDS + 1):
                if k and time.perf_counter() > until:
                    break
                row = compiled(f"compile@{r:.3f}", all_keep, r, f"activation_memory_budget {r:g}; peak", PEAK_STEPS)
                rows.append(row)
                result["tried"].append(row)
                if row.status == "error":
                    break  # the compiler cannot partition under this budget: the ones tried before stand
                if row.status == "ok" and row.allocated <= first.allocated:
                    best_r, lo = r, r
                    if r == 1.0:
                        break  # the default partitioner fits: nothing to tune
                else:
                    hi = r
                r = (lo + hi) / 2
            result["budget_r"] = best_r
            if best_r is None:
                return result
            variants = {
                "planned+compile": (plan.choices, plan.compiler_budget, plan.summary() + ", compiled"),
                f"compile@{best_r:.3f}": (all_keep, best_r, f"activation_memory_budget {best_r:g}"),
            }
            timed: dict[str, Row] = {}
            for variant in abba(list(variants), COMPILED_SEGMENTS):
                choices, keep_budget, note = variants[variant]
                row = compiled(variant, choices, keep_budget, note if variant not in timed else "", COMPILED_STEPS)
                timed[variant] = fold(timed[variant], row, tokens, budget) if variant in timed else row
            for row in timed.values():
                if row.status == "ok":
                    row.tokens_per_s = mean_rate(row.step_s, tokens)
                rows.append(row)
            result["planned+compile"], result["compile"] = timed.values()
            pc, rival = result["planned+compile"], result["compile"]
            if pc.status == "ok" and rival.status == "ok":
                result["ratio"] = pc.tokens_per_s / rival.tokens_per_s
                result["pairs"] = pair_ratios(pc, rival)
                result["interval"] = paired_interval(pc.run_tokens_per_s, rival.run_tokens_per_s)
    finally:
        shape.model.loss_chunk_fn = None
        apply_choices(shape.model, all_keep, shape.profile.blocks, shape.profile.first_block)
        torch._dynamo.reset()
        clean()
    return result


def _budget_plan(profile, budget: int, overheads) -> str:
    from trainstack.memplan.memory import step_seconds

    try:
        p = choose(profile, budget_bytes=budget, overheads=overheads)
    except BudgetError:
        return "no plan fits"
    return f"plan {p.summary()}, {1e3 * step_seconds(p.profile, p.counts):.1f} ms, peak {gib(p.peak_bytes).strip()} GiB"


def _ratio_text(a: Row, b: Row) -> str:
    pairs = pair_ratios(a, b)
    spread = f" (ABBA pairs {', '.join(f'{x:.3f}' for x in pairs)})" if len(pairs) > 1 else ""
    return f"{a.tokens_per_s / b.tokens_per_s:.3f}{spread}"


def best_uniform_ratio(s: dict) -> float | None:
    """planned / the best fitting uniform option of one case: the fastest measured beside it
    (capped, ABBA), a uniform option of planned's very layout counting as planned itself."""
    p = s.get("planned")
    if not isinstance(p, Row) or p.status != "ok":
        return None
    rivals = [u.tokens_per_s for u in s["uniform"] if u.status == "ok"]
    if s["same_as"]:
        rivals.append(p.tokens_per_s)
    return p.tokens_per_s / max(rivals) if rivals else None


def compiled_ratio(c: dict) -> str:
    """One compiled comparison in a line: the ratio and its interval, or why there is none."""
    pc, best = c.get("planned+compile"), c.get("compile")
    if "error" in c:
        return str(c["error"])
    if not isinstance(pc, Row) or pc.status != "ok":
        return f"planned+compile {getattr(pc, 'status', 'not run')}"
    if not isinstance(best, Row):
        return "no compile@r within planned+compile's peak"
    if best.status != "ok":
        return f"compile@{c['budget_r']:g} {best.status} under the cap"
    mean, lo, hi = c["interval"]
    return (
        f"(planned+compile)/compile@{c['budget_r']:g} {c['ratio']:.3f} over {len(c['pairs'])} interleaved pairs "
        f"(mean of the pairs' ratios {mean:.3f}, 95% interval {lo:.3f} to {hi:.3f}; pairs {min(c['pairs']):.3f} to {max(c['pairs']):.3f})"
    )


def compiled_text(c: dict) -> str:
    """The compiled comparison of one case: the plan, both variants' tokens/s and peaks, the ratio, the bisection."""
    pc, best = c.get("planned+compile"), c.get("compile")
    parts = [f"plan {c['plan']}"] if "plan" in c else []
    if isinstance(pc, Row):
        parts.append(f"planned+compile {pc.status} {pc.tokens_per_s or 0:.0f} tok/s at {gib(pc.allocated).strip()} GiB allocated")
    if isinstance(best, Row):
        parts.append(f"compile@{c['budget_r']:g} {best.status} {best.tokens_per_s or 0:.0f} tok/s at {gib(best.allocated).strip()} GiB")
    parts.append(compiled_ratio(c))
    tried = ", ".join(f"r={t.variant.split('@')[1]} {t.status} {gib(t.allocated).strip()} GiB" for t in c.get("tried", []))
    return "; ".join(parts) + (f"; bisection on the peak: {tried}" if tried else "")


def hf_verdicts(summaries: list[dict]) -> list[str]:
    lines = []
    for s in summaries:
        if "layouts" in s:
            ok = [r for r in s["layouts"] if r.status == "ok"]
            if ok:
                lines.append(f"{s['case']} (same counts, uncapped, ABBA): " + "; ".join(f"{r.variant} {r.tokens_per_s:.0f} tok/s ({r.choices}), /spread {_ratio_text(r, ok[0])}" for r in ok))
            continue
        p = s.get("planned")
        if not isinstance(p, Row):
            lines.append(f"{s['case']}: {p}")
            continue
        if p.status != "ok":
            lines.append(f"{s['case']}: planned {p.status} ({p.note})")
            continue
        err = "-" if p.error is None else f"{p.error:+.1%}"
        parts = [f"planned {p.tokens_per_s:.0f} tok/s ({s['plan']}, {p.choices}), reserved {gib(p.reserved).strip()} GiB within budget, prediction error {err}"]
        if s["same_as"]:
            parts.append(f"the same layout as {', '.join(s['same_as'])}: planned/uniform 1 by identity")
        for u in s["uniform"]:
            parts.append(f"{u.variant} {u.tokens_per_s:.0f} tok/s, planned/{u.variant} {_ratio_text(p, u)}" if u.status == "ok" else f"{u.variant} {u.status} under the cap")
        if not s["same_as"] and not s["uniform"]:
            parts.append("no uniform option fits")
        parts.append("none fits" if s["none_fits"] else "none does not fit")
        lines.append(f"{s['case']}: " + "; ".join(parts))
        c = s.get("compiled")
        if isinstance(c, dict):
            lines.append(f"{s['case']} compiled: {compiled_text(c)}")
    return lines


def commit_name() -> str:
    """The checkout's short commit (marked -dirty with uncommitted changes under src/ or
    benchmarks/), or "unknown" where there is no git checkout."""
    import subprocess

    def git(*args: str) -> str:
        try:
            done = subprocess.run(["git", *args], cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return "unknown"
    return commit + ("-dirty" if git("status", "--porcelain", "--untracked-files=no", "--", "src", "benchmarks") else "")


def hf_main(args) -> int:
    specs = [(a, int(b), int(q)) for a, b, q in (x.split(":") for x in args.hf_shapes.split(","))] if args.hf_shapes else HF_SHAPES
    if args.skip_compile:
        compile_specs = []
    elif args.hf_compile:
        compile_specs = [(a, int(b), int(q), float(f)) for a, b, q, f in (x.split(":") for x in args.hf_compile.split(","))]
    else:
        compile_specs = HF_COMPILE
    budget_fractions = tuple(float(f) for f in args.hf_fractions.split(",")) if args.hf_fractions else HF_FRACTIONS
    t0 = time.perf_counter()
    rows: list[Row] = []
    summaries: list[dict] = []
    skipped: list = []
    import transformers

    device_name = torch.cuda.get_device_name() if DEVICE == "cuda" else DEVICE
    name = args.name or f"hf_{args.commit or commit_name()}"
    header = [
        "$ python3 " + " ".join(["benchmarks/memplan_h200.py", *sys.argv[1:]]),
        f"{device_name} torch {torch.__version__} transformers {transformers.__version__}: memplan.plan on Hugging Face models (from_config)",
        f"uniform options screened uncapped ({HF_SCREEN_STEPS} timed steps); planned and the fitting uniform options (the one recomputing fewest blocks, "
        f"the screen's fastest) interleaved ABBA, capped at the budget, {HF_STEPS} timed steps a run ({2 * HF_STEPS} a variant); tokens/s from the median step",
        f"compiled: planned+compile and compile@r (r the largest whose peak fits within planned+compile's) {COMPILED_SEGMENTS} runs each, interleaved ABBA, "
        f"capped at the budget, {COMPILED_STEPS} timed steps a run; tokens/s from the mean step (all tokens over all time)",
    ]
    if DEVICE != "cuda":
        header.append(f"smoke run on {DEVICE}: no memory measured, tokens/s of a CPU; no figure here means anything")

    def save() -> None:
        hf_write(args.out, name, header, rows, summaries, skipped, time.perf_counter() - t0)

    for i, spec in enumerate(specs):
        if time.perf_counter() - t0 > args.time_budget:
            skipped.append(spec)
            continue
        first = len(rows)
        fractions = tuple(f for a, b, q, f in compile_specs if (a, b, q) == spec)
        try:
            hf_grid(spec, rows, summaries, save=save, placement=i == 0 and not args.skip_layouts, compile_fractions=fractions, compile_until=t0 + args.time_budget + args.compile_time,
                    fractions=budget_fractions)
        except Exception:  # noqa: BLE001 - one broken shape must not lose the others' figures
            traceback.print_exc()
            summaries.append({"case": f"{spec}", "planned": "error: " + traceback.format_exc().splitlines()[-1]})
            clean()
        print(table(rows[first:]), flush=True)
        save()
    print(hf_write(args.out, name, header, rows, summaries, skipped, time.perf_counter() - t0))
    print(f"wrote {args.out / name}.txt and .json")
    return 0


def hf_totals(rows: list[Row], summaries: list[dict]) -> list[str]:
    """The summary lines: cases, planned ok/over/OOM, prediction error, planned/best uniform, compiled."""
    errors = [abs(r.error) for r in rows if r.error is not None and r.status == "ok"]
    cases = [s for s in summaries if "layouts" not in s]
    planned = [s["planned"] for s in cases if isinstance(s.get("planned"), Row)]
    archs = sorted({s["case"].split()[0] for s in cases})
    ratios = [r for r in (best_uniform_ratio(s) for s in cases) if r is not None]
    pairs = [x for s in cases if isinstance(s.get("planned"), Row) and s["planned"].status == "ok" for u in s["uniform"] if u.status == "ok" for x in pair_ratios(s["planned"], u)]
    identical = sum(bool(s.get("same_as")) for s in cases if isinstance(s.get("planned"), Row))
    compiled = [s["compiled"] for s in cases if isinstance(s.get("compiled"), dict)]
    lines = [
        f"cases {len(cases)} over {len(archs)} architectures ({', '.join(archs)}); planned runs ok {sum(p.status == 'ok' for p in planned)}, "
        f"over budget {sum(p.status == 'over' for p in planned)}, out of memory {sum(p.status == 'oom' for p in planned)}, "
        f"no plan or error {len(cases) - len(planned)}",
        f"prediction error (allocated peak) over {len(errors)} eager runs: max {max(errors):.2%}" if errors else "no prediction error measured",
        (
            f"planned/best fitting uniform over {len(ratios)} cases: min {min(ratios):.3f}, median {statistics.median(ratios):.3f}; below 1: {sum(r < 1 for r in ratios)}"
            f" ({identical} cases planned a uniform option's very layout)" + (f"; single ABBA run pairs {min(pairs):.3f} to {max(pairs):.3f}" if pairs else "")
        )
        if ratios
        else "no planned/uniform ratio",
    ]
    intervals = [c["interval"] for c in compiled if "interval" in c]
    for c in compiled:
        lines.append(f"compiled, {c.get('case', '')}: {compiled_ratio(c)}")
    if intervals:
        lines.append(
            f"(planned+compile)/compile@r at the same peak over {len(intervals)} cases: "
            f"{min(c['ratio'] for c in compiled if 'interval' in c):.3f} to {max(c['ratio'] for c in compiled if 'interval' in c):.3f}; "
            f"below 1 beyond the 95% interval: {sum(hi < 1 for _, _, hi in intervals)}; above 1 beyond it: {sum(lo > 1 for _, lo, _ in intervals)}"
        )
    return lines


def hf_write(out: Path, name: str, header: list[str], rows: list[Row], summaries: list[dict], skipped: list, seconds: float) -> str:
    text = "\n".join([*header, "", table(rows), "", *hf_verdicts(summaries), "", *hf_totals(rows, summaries)])
    if skipped:
        text += "\nnot run (time budget spent): " + ", ".join(f"{a} b{b} s{q}" for a, b, q in skipped)
    device_name = torch.cuda.get_device_name() if DEVICE == "cuda" else DEVICE
    text += f"\n{device_name}, torch {torch.__version__}, {seconds:.0f} s"
    out.mkdir(parents=True, exist_ok=True)
    # atomic: a run stopped while writing keeps the last complete files
    atomic_write_text(out / f"{name}.txt", text + "\n")

    def plain(v: object) -> object:
        if isinstance(v, Row):
            return {**v.__dict__, "error": v.error}
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return v

    data = {
        "command": header[0][2:],
        "device": device_name,
        "torch": torch.__version__,
        "seconds": round(seconds, 1),
        "summary": hf_totals(rows, summaries),
        "rows": [plain(r) for r in rows],
        "cases": [plain(s) for s in summaries],
        "skipped": [list(s) for s in skipped],
    }
    atomic_write_text(out / f"{name}.json", json.dumps(data, indent=2, default=str) + "\n")
    return text


def main() -> int:
    global DEVICE, TINY, HF_STEPS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/memplan_h200"))
    ap.add_argument("--time-budget", type=float, default=300.0, help="seconds; later cases are skipped once spent")
    ap.add_argument("--skip-compile", action="store_true", help="leave out the torch.compile memory-budget comparison")
    ap.add_argument("--cases", default="", help="run only these cases, e.g. '125m:8:2048:8,1b:4:4096:45' (preset:batch:seq:GiB)")
    ap.add_argument("--hf", action="store_true", help="the grid of Hugging Face models planned by memplan.plan")
    ap.add_argument("--hf-shapes", default="", help="with --hf, only these shapes, e.g. 'llama:4:2048,gpt2:8:1024' (arch:batch:seq)")
    ap.add_argument("--hf-compile", default="", help="with --hf, the compiled comparison at these cases, e.g. 'gpt2:4:2048:0.45' (arch:batch:seq:budget fraction)")
    ap.add_argument("--hf-fractions", default="", help=f"with --hf, the budgets as fractions of the way from full recompute's peak to none's (default {','.join(map(str, HF_FRACTIONS))})")
    ap.add_argument("--compile-time", type=float, default=120.0, help="with --hf, seconds past --time-budget within which the compiled comparison may still start a run")
    ap.add_argument("--skip-layouts", action="store_true", help="with --hf, leave out the placement comparison (the first shape's last plan placed three ways)")
    ap.add_argument("--commit", default="", help="with --hf, the commit in the result files' default name (hf_COMMIT.txt/.json); default: git's")
    ap.add_argument("--name", default="", help="with --hf, the result files' name in --out (NAME.txt/.json), e.g. hf_compiled_gpt2; default hf_COMMIT")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="with --hf: cpu runs the script itself (a smoke check, with --tiny)")
    ap.add_argument("--tiny", action="store_true", help="with --hf, six-block configs of the same families")
    ap.add_argument("--steps", type=int, default=HF_STEPS, help=f"with --hf, timed steps a run of the compared variants (default {HF_STEPS})")
    args = ap.parse_args()
    if args.name and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", args.name):
        ap.error(f"--name {args.name!r}: a file name of letters, digits, '.', '_' or '-' (e.g. hf_compiled_gpt2)")
    if args.hf:
        DEVICE, TINY, HF_STEPS = args.device, args.tiny, args.steps
        if DEVICE == "cuda" and not torch.cuda.is_available():
            print("skip: no GPU")
            return 0
        return hf_main(args)
    cases = [c for c in CASES if not args.cases or ":".join(map(str, c)) in args.cases.split(",")]
    if not torch.cuda.is_available():
        print("skip: no GPU")
        return 0
    t0 = time.perf_counter()
    rows: list[Row] = []
    roofline = measure_ceilings()
    header = [
        f"{torch.cuda.get_device_name()} torch {torch.__version__}: bf16 matmul {roofline.flops_per_s / 1e12:.0f} TFLOP/s, copy {roofline.bytes_per_s / 1e12:.2f} TB/s",
        f"host per op: eager {roofline.host_op_s * 1e6:.2f} us, full recompute +{roofline.full_op_s * 1e6:.2f} us, "
        f"selective +{roofline.selective_op_s * 1e6:.2f} us (per op of a block's forward)",
    ]
    print(*header, sep="\n", flush=True)
    measured = measure_overheads(roofline, rows)
    overheads = default_overheads()
    header.append(
        f"uncapped: measured - predicted allocated {measured['workspace_min'] / MiB:.1f} to {measured['workspace_max'] / MiB:.1f} MiB "
        f"(model's workspace {overheads.workspace / MiB:.0f} MiB), reserved/allocated - 1 up to {measured['reserved_over_allocated_max']:.3f} "
        f"(model's room above the allocated peak: {overheads.largest_room:g} x the step's largest allocation, "
        f"at least {overheads.fragmentation:.3f} x the peak)"
    )
    print(header[-1], flush=True)
    summaries: list[dict] = []
    skipped: list = []
    for spec in cases:
        if time.perf_counter() - t0 > args.time_budget:
            skipped.append(spec)
            continue
        first = len(rows)
        try:
            summaries.append(run_grid(spec, roofline, overheads, rows, compile_too=not args.skip_compile))
        except Exception:  # noqa: BLE001 - one broken case must not lose the others' figures
            traceback.print_exc()
            summaries.append({"case": f"{spec}", "planned": "error: " + traceback.format_exc().splitlines()[-1]})
            clean()
        print(table(rows[first:]), flush=True)
        write(args.out, header, rows, summaries, skipped, roofline, overheads, time.perf_counter() - t0)
    print(write(args.out, header, rows, summaries, skipped, roofline, overheads, time.perf_counter() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
