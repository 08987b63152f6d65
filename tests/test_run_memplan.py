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

from tests.test_run_hook import clean_env

DATA = Path(__file__).parent / "test_run_data"
PLAIN = DATA / "plain_loop.py"
TRAINSTACK = [sys.executable, "-m", "trainstack.cli", "run"]


def losses(stdout: str) -> list[str]:
    return re.findall(r"^step \d+ loss \S+$", stdout, flags=re.M)


@pytest.mark.timeout(150)
def test_the_plan_for_a_budget_below_the_unplanned_peak_recomputes_and_keeps_the_losses(tmp_path):
    sys.path.insert(0, str(DATA))
    try:
        import plain_loop
    finally:
        sys.path.remove(str(DATA))
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
