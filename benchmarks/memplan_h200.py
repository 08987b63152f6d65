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
recompute (so no recompute runs out of memory); each planned run is capped at its budget.
The uniform options (full, every-N, none) run once per shape, uncapped: one fits a budget
where its measured reserved peak is within it; planned is compared with the fastest that fits.

Usage: python benchmarks/memplan_h200.py [--out benchmarks/results] [--time-budget 300] [--skip-compile]
       python benchmarks/memplan_h200.py --hf [--hf-shapes llama:4:2048,gpt2:8:1024] [--time-budget 240]
"""

from __future__ import annotations

import os

os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

import argparse
import gc
import json
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch

from trainstack.bench import device as dev
from trainstack.bench.model import Block, Transformer, rope_tables
from trainstack.bench.presets import PRESETS
from trainstack.memplan.wrappers import apply_choices, compile_block, unwrap, wrap
from trainstack.memplan import measure_compiled_blocks, measure_real_block
from trainstack.memplan.calibrate import Roofline, block_op_counts, calibrate
from trainstack.memplan.memory import breakdown
from trainstack.memplan.overheads import default_overheads
from trainstack.memplan.plan import Choice, Overheads
from trainstack.memplan.planner import choose, choose_over_budgets
from trainstack.errors import BudgetError

GiB = 1 << 30
MiB = 1 << 20
WARMUP, STEPS = 2, 5

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
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(1.0 if budget is None else min(1.0, budget / total))


def clean() -> None:
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def train(model, opt, batches, *, warmup: int = WARMUP, steps: int = STEPS) -> tuple[int, int, list[float], int]:
    """bench's step; returns (max allocated, max reserved, step seconds, allocator retries) over the timed steps."""

    def step(i: int) -> None:
        tokens = batches[i % len(batches)]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    with dev.sdpa_context(torch.device("cuda")):
        for i in range(warmup):
            step(i)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        retries_before = torch.cuda.memory_stats().get("num_alloc_retries", 0)
        timer = dev.StepTimer(torch.device("cuda"))
        timer.mark()
        for i in range(warmup, warmup + steps):
            step(i)
            timer.mark()
        seconds = timer.step_seconds()
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
    (out / "memplan_h200.txt").write_text(text + "\n", encoding="utf-8")
    data = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "roofline": roofline.__dict__,
        "overheads": {"workspace": overheads.workspace, "fragmentation": overheads.fragmentation, "largest_room": overheads.largest_room},
        "rows": [{**r.__dict__, "error": r.error} for r in rows],
    }
    (out / "memplan_h200.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return text


# Hugging Face shapes: (architecture, batch, seq); budgets at these fractions of the way from
# the predicted fully recomputed peak to the predicted peak without recompute.
HF_SHAPES = [("llama", 4, 2048), ("llama", 2, 4096), ("qwen2", 4, 2048), ("mistral", 8, 1024), ("gpt2", 8, 1024), ("gpt2", 4, 2048)]
HF_FRACTIONS = (0.15, 0.45, 0.8)
HF_EVERY = (2, 3, 4, 6)


def hf_config(arch: str):
    """Config shapes of public models (TinyLlama-1.1B, Qwen2-0.5B, a 12-layer Mistral, GPT-2 medium), from_config only."""
    import transformers as t

    if arch == "llama":
        return t.LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=4096)
    if arch == "qwen2":
        return t.Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True, max_position_embeddings=4096)
    if arch == "mistral":
        return t.MistralConfig(vocab_size=32768, hidden_size=2048, intermediate_size=5632, num_hidden_layers=12, num_attention_heads=16, num_key_value_heads=8, sliding_window=None, max_position_embeddings=4096)
    if arch == "gpt2":
        return t.GPT2Config(vocab_size=50257, n_embd=1024, n_layer=24, n_head=16, n_positions=2048)
    raise ValueError(arch)


class HfShape:
    """One Hugging Face model at one (batch, seq): calibrated once, uniform options run once."""

    def __init__(self, arch: str, batch: int, seq: int) -> None:
        import transformers

        from trainstack.bench.hf_model import HfCausalLM
        from trainstack.memplan import calibrate_any

        self.arch, self.batch, self.seq = arch, batch, seq
        self.name = f"{arch} b{batch} s{seq}"
        clean()
        cap(None)
        torch.manual_seed(0)
        with torch.device("cuda"):
            hf = transformers.AutoModelForCausalLM.from_config(hf_config(arch), attn_implementation="sdpa").float()
        self.model = HfCausalLM(hf, arch).train()
        t0 = time.perf_counter()
        with dev.sdpa_context(torch.device("cuda")):
            self.profile = calibrate_any(self.model, self.model.example_batch(batch, seq), label=self.name)
        self.calibration_s = time.perf_counter() - t0
        self.overheads = default_overheads()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=3e-4, fused=True)
        self.batches = torch.randint(0, hf.config.vocab_size, (2, batch, seq + 1), device="cuda")
        self.params = sum(p.numel() for p in self.model.parameters())
        self.n = self.profile.n_blocks

    def predicted(self, choices: tuple[Choice, ...]):
        return breakdown(self.profile, choices, overheads=self.overheads)

    def run(self, case: str, variant: str, choices: tuple[Choice, ...], budget: int | None, note: str = "") -> Row:
        apply_choices(self.model, choices, self.profile.blocks, self.profile.first_block)
        self.opt.zero_grad(set_to_none=True)
        clean()
        cap(budget)
        pred = self.predicted(choices)
        row = Row(case, variant, describe(choices), "ok", pred.allocated_peak, pred.reserved_peak, note=note)
        try:
            row.allocated, row.reserved, row.step_s, row.alloc_retries = train(self.model, self.opt, self.batches, warmup=HF_WARMUP, steps=HF_STEPS)
            row.tokens_per_s = self.batch * self.seq / statistics.median(row.step_s)
            if budget is not None and row.reserved > budget:
                row.status = "over"
        except torch.OutOfMemoryError as exc:
            row.status, row.note = "oom", (note + " " + str(exc).splitlines()[0][:120]).strip()
        finally:
            self.opt.zero_grad(set_to_none=True)
            cap(None)
            clean()
        return row

    def close(self) -> None:
        del self.model, self.opt, self.batches
        clean()


HF_WARMUP, HF_STEPS = 2, 4


def hf_grid(spec: tuple[str, int, int], rows: list[Row], summaries: list[dict]) -> None:
    """One shape: the uniform options uncapped, then the plan at each budget, capped."""
    arch, batch, seq = spec
    shape = HfShape(arch, batch, seq)
    n = shape.n
    print(f"{shape.name}: {shape.params / 1e9:.2f}B parameters, {n} blocks at {shape.profile.blocks}, calibrated in {shape.calibration_s:.1f} s", flush=True)
    keep, full = (shape.predicted((c,) * n).reserved_peak for c in (Choice.KEEP, Choice.FULL))
    shape.run(shape.name, "warm-up", (Choice.FULL,) * n, None)  # untimed: the first run pays for clocks and allocator
    uniform = [shape.run(shape.name, "full", (Choice.FULL,) * n, None, note="uncapped")]
    uniform += [shape.run(shape.name, f"every-{e}", uniform_every(n, e), None, note="uncapped") for e in HF_EVERY if e < n]
    none = shape.run(shape.name, "none", (Choice.KEEP,) * n, None, note="uncapped")
    rows.extend([*uniform, none])
    for fraction in HF_FRACTIONS:
        budget = int(full + fraction * (keep - full))
        case = f"{shape.name} {budget / GiB:.1f}GiB"
        summary: dict = {"case": case, "budget": budget, "fraction": fraction, "calibration_s": shape.calibration_s}
        try:
            plan = choose(shape.profile, budget_bytes=budget, overheads=shape.overheads)
        except BudgetError as exc:
            summaries.append({**summary, "planned": f"no plan: {exc}"})
            continue
        planned = shape.run(case, "planned", plan.choices, budget, note=plan.summary())
        rows.append(planned)
        fits = [r for r in uniform if r.status == "ok" and r.reserved <= budget]
        summary.update(planned=planned, plan=plan.summary(), best_uniform=max(fits, key=lambda r: r.tokens_per_s) if fits else None, none=none)
        summary["none_fits"] = none.status == "ok" and none.reserved <= budget
        summaries.append(summary)
    shape.close()


def hf_verdicts(summaries: list[dict]) -> list[str]:
    lines = []
    for s in summaries:
        p = s.get("planned")
        if not isinstance(p, Row):
            lines.append(f"{s['case']}: {p}")
            continue
        if p.status != "ok":
            lines.append(f"{s['case']}: planned {p.status} ({p.note})")
            continue
        parts = [f"planned {p.tokens_per_s:.0f} tok/s ({s['plan']}), reserved {p.reserved / GiB:.2f} GiB within budget, prediction error {p.error:+.1%}"]
        u = s.get("best_uniform")
        parts.append(f"best uniform that fits {u.variant} {u.tokens_per_s:.0f} tok/s, planned/uniform {p.tokens_per_s / u.tokens_per_s:.3f}" if u else "no uniform option fits")
        parts.append("none fits" if s["none_fits"] else "none does not fit")
        lines.append(f"{s['case']}: " + "; ".join(parts))
    return lines


def hf_main(args) -> int:
    specs = [(a, int(b), int(q)) for a, b, q in (x.split(":") for x in args.hf_shapes.split(","))] if args.hf_shapes else HF_SHAPES
    t0 = time.perf_counter()
    rows: list[Row] = []
    summaries: list[dict] = []
    skipped: list = []
    import transformers

    header = [f"{torch.cuda.get_device_name()} torch {torch.__version__} transformers {transformers.__version__}: memplan.plan on Hugging Face models (from_config)"]
    for spec in specs:
        if time.perf_counter() - t0 > args.time_budget:
            skipped.append(spec)
            continue
        first = len(rows)
        try:
            hf_grid(spec, rows, summaries)
        except Exception:  # noqa: BLE001 - one broken shape must not lose the others' figures
            traceback.print_exc()
            summaries.append({"case": f"{spec}", "planned": "error: " + traceback.format_exc().splitlines()[-1]})
            clean()
        print(table(rows[first:]), flush=True)
        hf_write(args.out, header, rows, summaries, skipped, time.perf_counter() - t0)
    print(hf_write(args.out, header, rows, summaries, skipped, time.perf_counter() - t0))
    return 0


def hf_write(out: Path, header: list[str], rows: list[Row], summaries: list[dict], skipped: list, seconds: float) -> str:
    errors = [abs(r.error) for r in rows if r.error is not None and r.status == "ok"]
    planned = [s["planned"] for s in summaries if isinstance(s.get("planned"), Row)]
    ratios = [s["planned"].tokens_per_s / s["best_uniform"].tokens_per_s for s in summaries if isinstance(s.get("planned"), Row) and s["planned"].status == "ok" and s.get("best_uniform")]
    totals = [
        f"cases {len(summaries)}; planned runs ok {sum(p.status == 'ok' for p in planned)}, over budget {sum(p.status == 'over' for p in planned)}, out of memory {sum(p.status == 'oom' for p in planned)}",
        f"prediction error over {len(errors)} runs: max {max(errors):.2%}" if errors else "no prediction errors",
        f"planned/best fitting uniform: min {min(ratios):.3f}, median {statistics.median(ratios):.3f}" if ratios else "no planned/uniform ratio",
    ]
    text = "\n".join([*header, "", table(rows), "", *hf_verdicts(summaries), "", *totals])
    if skipped:
        text += "\nnot run (time budget spent): " + ", ".join(f"{a} b{b} s{q}" for a, b, q in skipped)
    text += f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}, {seconds:.0f} s"
    out.mkdir(parents=True, exist_ok=True)
    (out / "memplan_h200_hf.txt").write_text(text + "\n", encoding="utf-8")
    data = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "rows": [{**r.__dict__, "error": r.error} for r in rows],
        "cases": [{k: (v.__dict__ if isinstance(v, Row) else v) for k, v in s.items()} for s in summaries],
    }
    (out / "memplan_h200_hf.json").write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--time-budget", type=float, default=300.0, help="seconds; later cases are skipped once spent")
    ap.add_argument("--skip-compile", action="store_true", help="leave out the torch.compile memory-budget comparison")
    ap.add_argument("--cases", default="", help="run only these cases, e.g. '125m:8:2048:8,1b:4:4096:45' (preset:batch:seq:GiB)")
    ap.add_argument("--hf", action="store_true", help="the grid of Hugging Face models planned by memplan.plan")
    ap.add_argument("--hf-shapes", default="", help="with --hf, only these shapes, e.g. 'llama:4:2048,gpt2:8:1024' (arch:batch:seq)")
    args = ap.parse_args()
    if args.hf:
        if not torch.cuda.is_available():
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
