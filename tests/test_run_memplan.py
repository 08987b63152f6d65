"""--memplan plans and applies recompute to the model an unchanged job builds: memplan's own
plan for that model, batch and optimizer, the job's losses unchanged (torch on CPU). The
Trainer job's plan is checked in test_run_profile."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.clirun import clean_env

DATA = Path(__file__).parent / "data" / "run"
PLAIN = DATA / "plain_loop.py"
TRAINSTACK = [sys.executable, "-m", "trainstack.cli", "run"]


def losses(stdout: str) -> list[str]:
    return re.findall(r"^step \d+ loss \S+$", stdout, flags=re.M)


def _plain_loop():
    """tests/data/run/plain_loop.py, the job's own module, imported from its folder."""
    sys.path.insert(0, str(DATA))
    try:
        import plain_loop
    finally:
        sys.path.remove(str(DATA))
    return plain_loop


@pytest.mark.timeout(150)
def test_the_plan_for_a_budget_below_the_unplanned_peak_recomputes_and_keeps_the_losses(tmp_path):
    plain_loop = _plain_loop()
    from trainstack import memplan
    from trainstack.run.planning import job_loss

    model = plain_loop.build()
    x = torch.randn(4096, 64)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    unplanned = memplan.plan(model, x, budget=2**40, optimizer=optimizer, precision="fp32", loss_fn=job_loss)
    budget = unplanned.peak_bytes - 1
    expected = memplan.plan(model, x, budget=budget, optimizer=optimizer, precision="fp32", loss_fn=job_loss)
    assert expected.summary() != unplanned.summary()  # something must be recomputed

    job = [sys.executable, str(PLAIN), "--steps", "3", "--batch", "4096"]
    alone = subprocess.run(job, capture_output=True, text=True, env=clean_env(), cwd=tmp_path, timeout=60)
    planned = subprocess.run([*TRAINSTACK, "--out", "o", "--memplan", f"{budget}B", "--", *job], capture_output=True, text=True, env=clean_env(), cwd=tmp_path, timeout=120)
    assert planned.returncode == alone.returncode == 0, planned.stderr[-2000:]
    assert f"trainstack run: memplan for {budget}B: {expected.summary()}, predicted peak" in planned.stderr
    assert losses(planned.stdout) == losses(alone.stdout) and len(losses(alone.stdout)) == 3


@pytest.mark.timeout(60)
def test_a_model_memplan_cannot_plan_gets_its_reason_and_runs_as_built(tmp_path):
    single = "import torch; m = torch.nn.Linear(4, 4); o = torch.optim.SGD(m.parameters()); m(torch.randn(2, 4)).sum().backward(); o.step(); print('ran')"
    done = subprocess.run([*TRAINSTACK, "--out", "o", "--memplan", "8GiB", "--", sys.executable, "-c", single], capture_output=True, text=True, env=clean_env(), cwd=tmp_path, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ran"
    reason = [line for line in done.stderr.splitlines() if line.startswith("trainstack run: memplan: ")]
    assert len(reason) == 1 and reason[0].endswith("; the model runs as the job built it")


RECORDED_H200_OOM = (  # the job's own error in benchmarks/results/run_h200/run_h200.json (torch 2.11, H200)
    "CUDA out of memory. Tried to allocate 1.95 GiB. GPU 0 has a total capacity of 139.80 GiB of which 115.76 GiB is free. "
    "Including non-PyTorch memory, this process has 24.03 GiB memory in use. 23.99 GiB allowed; Of the allocated memory "
    "21.25 GiB is allocated by PyTorch, and 2.04 GiB is reserved by PyTorch but unallocated."
)


def _plain_plans():
    """A real plan of the plain loop's model below its unplanned peak, and a replanner from its calibration."""
    plain_loop = _plain_loop()
    from trainstack import memplan
    from trainstack.memplan.overheads import default_overheads
    from trainstack.memplan.planner import choose
    from trainstack.run.planning import job_loss

    model = plain_loop.build()
    x = torch.randn(4096, 64)
    unplanned = memplan.plan(model, x, budget=2**40, optimizer="adamw", precision="fp32", loss_fn=job_loss)
    return unplanned, lambda b: choose(unplanned.profile, budget_bytes=b, overheads=default_overheads())


def test_a_probe_over_budget_plans_again_under_the_budget_less_the_measured_error():
    from trainstack.run.fitting import Measured, describe, fit

    unplanned, replan = _plain_plans()
    target = unplanned.peak_bytes  # the prediction fits exactly; the step really needs more
    from trainstack.memplan import Choice
    from trainstack.memplan.memory import peak_bytes
    from trainstack.memplan.overheads import default_overheads

    full = peak_bytes(unplanned.profile, [Choice.FULL] * len(unplanned.choices), overheads=default_overheads())
    error = (unplanned.peak_bytes - full) // 3  # a third of what recompute can save
    probed = []

    def probe(plan):  # the GPU's allocator, standing in: the step needs its prediction plus the error
        probed.append(plan)
        return Measured(plan.peak_bytes + error)

    fitted = fit(unplanned, target, replan=replan, probe=probe)
    assert fitted.fits and len(probed) == 2
    assert probed[0] is unplanned and fitted.plan.peak_bytes <= target - error < unplanned.peak_bytes
    assert fitted.plan.summary() != unplanned.summary()
    assert fitted.plan.peak_bytes + error <= target
    assert describe(fitted).startswith(f"probe {unplanned.summary()} predicted ")


def test_a_probe_that_runs_out_of_memory_recomputes_more_each_round_and_says_when_nothing_fits():
    from trainstack.run.fitting import Measured, asked_bytes, fit

    assert asked_bytes(torch.OutOfMemoryError(RECORDED_H200_OOM)) == int(1.95 * 2**30)
    assert asked_bytes(RuntimeError("something else")) == 0
    unplanned, replan = _plain_plans()
    target = unplanned.peak_bytes
    probed = []

    def probe(plan):  # every plan runs out of memory, one byte over: only a lower bound is known
        probed.append(plan)
        return Measured(target + 1, complete=False)

    fitted = fit(unplanned, target, replan=replan, probe=probe, rounds=20)
    peaks = [p.peak_bytes for p in probed]
    assert peaks == sorted(peaks, reverse=True) and len(set(peaks)) == len(peaks)  # each round recomputes more
    assert not fitted.fits and fitted.why_not and "budget" in fitted.why_not


def test_probes_still_over_after_their_rounds_leave_the_plan_planned_under_the_last_corrected_budget():
    from trainstack.run.fitting import Measured, describe, fit
    from trainstack.run.memview import gib

    unplanned, replan = _plain_plans()
    target = unplanned.peak_bytes
    probed = []

    def probe(plan):  # each plan needs 1 KiB more than predicted, and 1 byte more than the budget
        probed.append(plan)
        return Measured(max(plan.peak_bytes + 1024, target + 1))

    fitted = fit(unplanned, target, replan=replan, probe=probe, rounds=2)
    assert len(probed) == 2 and not fitted.fits and fitted.why_not is None
    assert all(fitted.plan is not p for p in probed) and fitted.plan.peak_bytes < probed[-1].peak_bytes  # planned after the last probe
    assert describe(fitted).endswith(f"still over after 2 probes: {fitted.plan.summary()} predicted {gib(fitted.plan.peak_bytes)} under the corrected budget, not probed")


class FakeAllocator:
    """The CUDA allocator's statistics and the process's cap, standing in on a CPU (the probe's
    arithmetic and restoring are what is tested; the GPU's figures come from the H200 run)."""

    def __init__(self, monkeypatch, *, reserved: int, allocated: int = 0, fraction: float = 0.5):
        self.calls: list[tuple] = []
        self.reserved, self.allocated, self.fraction = reserved, allocated, fraction
        from trainstack.run import fitting, planning

        for module in (planning, fitting):  # where it is defined, and where the probe calls it
            monkeypatch.setattr(module, "memory_fraction", lambda device=None: self.fraction)
        for name in ("synchronize", "reset_peak_memory_stats", "empty_cache"):
            monkeypatch.setattr(torch.cuda, name, lambda *a, _n=name, **k: self.calls.append((_n,)))
        monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, device=None: self.calls.append(("cap", f)))
        monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda device=None: self.reserved)
        monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: self.allocated)


def _probed_model():
    """Blocks with buffers that a forward changes (batch norm) and random state it draws (dropout)."""
    from torch import nn

    from trainstack import memplan
    from trainstack.run.capture import Captured
    from trainstack.run.planning import job_loss

    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.BatchNorm1d(64), nn.Dropout(0.2), nn.GELU()) for _ in range(3)], nn.Linear(64, 1))
    x = torch.randn(256, 64)
    plan = memplan.plan(model, x, budget=2**40, optimizer="adamw", precision="fp32", loss_fn=job_loss)
    return model, Captured(root=model, model=model, args=(x,), kwargs={}), plan


def test_a_probe_step_measures_the_allocator_and_leaves_the_job_as_it_found_it(monkeypatch):
    from trainstack.run.fitting import Measured, probe_step
    from trainstack.run.planning import job_loss

    model, captured, plan = _probed_model()
    fake = FakeAllocator(monkeypatch, reserved=3 * 2**30)
    buffers = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    measured = probe_step(captured, plan, captured.args[0], job_loss)
    assert measured == Measured(3 * 2**30)
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(v, buffers[k]) for k, v in model.state_dict().items())  # running statistics put back
    assert torch.equal(torch.get_rng_state(), rng)  # dropout drew from a forked generator
    caps = [c for c in fake.calls if c[0] == "cap"]
    assert caps == [("cap", 1.0), ("cap", 0.5)]  # lifted for the probe, then the job's own
    restored = fake.calls.index(("cap", 0.5))
    assert fake.calls[restored - 1] == ("empty_cache",)  # what the probe reserved above the cap is given back first
    assert fake.calls[-1] == ("reset_peak_memory_stats",)  # the job's peaks start with its own steps


def test_a_probe_step_that_runs_out_of_memory_gives_a_lower_bound_and_still_restores(monkeypatch):
    from trainstack.run.fitting import Measured, probe_step
    from trainstack.run.planning import job_loss

    model, captured, plan = _probed_model()
    fake = FakeAllocator(monkeypatch, reserved=0, allocated=20 * 2**30)
    buffers = {k: v.clone() for k, v in model.state_dict().items()}

    def loss_then_oom(output, batch):
        job_loss(output, batch).backward()  # gradients exist when the step fails
        raise torch.OutOfMemoryError(RECORDED_H200_OOM)

    assert probe_step(captured, plan, captured.args[0], loss_then_oom) == Measured(20 * 2**30 + int(1.95 * 2**30), complete=False)
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(v, buffers[k]) for k, v in model.state_dict().items())
    assert [c for c in fake.calls if c[0] == "cap"] == [("cap", 1.0), ("cap", 0.5)]


def test_memplan_turns_on_expandable_segments_unless_the_job_set_its_allocator(tmp_path):
    show = "import os, torch; print(os.environ.get('PYTORCH_CUDA_ALLOC_CONF'), os.environ.get('PYTORCH_ALLOC_CONF'))"
    planned = subprocess.run([*TRAINSTACK, "--out", "o", "--memplan", "1GiB", "--", sys.executable, "-c", show], capture_output=True, text=True, env=clean_env(), cwd=tmp_path, timeout=60)
    assert planned.returncode == 0 and planned.stdout.split() == ["expandable_segments:True", "None"], planned.stderr
    own = clean_env(PYTORCH_ALLOC_CONF="max_split_size_mb:128")
    kept = subprocess.run([*TRAINSTACK, "--out", "o", "--memplan", "1GiB", "--", sys.executable, "-c", show], capture_output=True, text=True, env=own, cwd=tmp_path, timeout=60)
    assert kept.returncode == 0 and kept.stdout.split() == ["None", "max_split_size_mb:128"], kept.stderr
    profiled = subprocess.run([*TRAINSTACK, "--out", "o", "--profile-steps", "1:2", "--", sys.executable, "-c", show], capture_output=True, text=True, env=clean_env(), cwd=tmp_path, timeout=60)
    assert profiled.returncode == 0 and profiled.stdout.split() == ["None", "None"], profiled.stderr


COMPILED_JOB = """
import sys, torch
sys.path.insert(0, {data!r})
import plain_loop
model = plain_loop.build()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(64, 64), torch.randn(64, 1)
for step in range(3):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    print(f"step {{step}} loss {{loss.item():.4f}}", flush=True)
from torch._dynamo.utils import counters
compiled = sum(getattr(m, "_compiled_call_impl", None) is not None for m in model)
print(f"compiled modules {{compiled}} graphs {{counters['stats']['unique_graphs']}}")
"""


@pytest.mark.timeout(150)
def test_compile_compiles_the_blocks_of_a_plain_loop_and_it_trains(tmp_path):
    job = [sys.executable, "-c", COMPILED_JOB.format(data=str(DATA))]
    env = clean_env(TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    alone = subprocess.run(job, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    compiled = subprocess.run([*TRAINSTACK, "--out", "o", "--compile", "--", *job], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=140)
    assert alone.returncode == compiled.returncode == 0, compiled.stderr[-2000:]
    assert "compiled modules 0 graphs 0" in alone.stdout
    assert "trainstack run: compiled 4 blocks of Sequential" in compiled.stderr
    shown = re.search(r"compiled modules (\d+) graphs (\d+)", compiled.stdout)
    assert shown and int(shown.group(1)) == 4 and int(shown.group(2)) >= 1, compiled.stdout
    eager, fused = losses(alone.stdout), losses(compiled.stdout)
    assert len(eager) == len(fused) == 3
    for a, b in zip(eager, fused):
        assert abs(float(a.split()[-1]) - float(b.split()[-1])) < 1e-3
    assert float(fused[-1].split()[-1]) < float(fused[0].split()[-1])  # it trains


@pytest.mark.timeout(240)
def test_a_job_that_shards_its_model_with_fsdp2_and_offloads_gets_the_per_rank_plan_applied(tmp_path):
    """Under torchrun over 2 gloo ranks, a job that shards its decoder with FSDP2 and a
    CPUOffloadPolicy: each rank plans for that layout (its shard, the state on the host) and
    recomputes the blocks the per-rank plan chooses; the job trains through the plan."""
    import math
    import shutil

    from trainstack.memplan import plan_memory
    from trainstack.memplan.offload import Placement
    from trainstack.memplan.placement import KINDS
    from trainstack.nn.presets import preset
    from tests.rank_launch import free_port

    torchrun = shutil.which("torchrun") or pytest.skip("torchrun not on PATH")
    placed = Placement(shard="fsdp2", offload=frozenset(KINDS))
    unplanned = plan_memory(preset("tiny"), batch=2, seq=64, budget_bytes=2**40, world_size=2, placement=placed)
    budget = unplanned.peak_bytes - 1
    expected = plan_memory(preset("tiny"), batch=2, seq=64, budget_bytes=budget, world_size=2, placement=placed)
    assert expected.summary() != unplanned.summary()  # something must be recomputed
    one_process = plan_memory(preset("tiny"), batch=2, seq=64, budget_bytes=2**40)
    assert expected.peak_bytes < one_process.peak_bytes  # the per-rank plan is not one process's

    job = [torchrun, "--nnodes", "1", "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
           str(DATA / "fsdp2_loop.py"), "--steps", "2", "--offload"]
    done = subprocess.run([*TRAINSTACK, "--out", "o", "--memplan", f"{budget}B", "--", *job], capture_output=True, text=True,
                          env=clean_env(OMP_NUM_THREADS="1"), cwd=tmp_path, timeout=200)
    assert done.returncode == 0, done.stderr[-3000:]
    line = f"trainstack run: memplan for {budget}B: {expected.summary()}, predicted peak {expected.peak_bytes / 2**30:.2f} GiB per rank ({expected.layout.name()})"
    assert done.stderr.count(line) == 2, done.stderr[-3000:]  # each rank
    assert "on the host: params, grads, master, optimizer" in line
    blocks = re.findall(r"^blocks (\S+)$", done.stdout, flags=re.M)
    assert blocks == [",".join(str(c) for c in expected.choices)]
    assert len(losses(done.stdout)) == 2 and all(math.isfinite(float(x.split()[-1])) for x in losses(done.stdout))
