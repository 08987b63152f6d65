"""GPU code paths on a real CUDA GPU (marker gpu: skipped with 'skip: no GPU' elsewhere).

Run on a GPU machine with `pytest -m gpu --junitxml=...`; its JUnit report is kept in
benchmarks/results/gpu_tests/. Each test drives the CLI as a user would, on jobs of its own.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]

CLI = [sys.executable, "-m", "trainstack.cli"]

# A plain loop whose activations dominate: 8 blocks of 4096 features at 16384 rows (256 MiB a
# tensor), AdamW. Prints each step's loss and, at the end, the allocator's reserved peak.
JOB = """
import sys, torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(*[nn.Sequential(nn.Linear(4096, 4096), nn.GELU()) for _ in range(8)], nn.Linear(4096, 1)).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
x, y = torch.randn(16384, 4096, device="cuda"), torch.randn(16384, 1, device="cuda")
oom_at = int(sys.argv[1]) if len(sys.argv) > 1 else -1
for step in range(4):
    if step == oom_at:
        hold = torch.empty(2**40, dtype=torch.uint8, device="cuda")  # a real allocation failure: 1 TiB
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.6f}", flush=True)
print(f"peak reserved {torch.cuda.max_memory_reserved()}")
"""


def _job(tmp_path: Path, *args: str) -> list[str]:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    return [sys.executable, str(script), *args]


def _peak(stdout: str) -> int:
    found = re.search(r"^peak reserved (\d+)$", stdout, flags=re.M)
    assert found, stdout
    return int(found.group(1))


def _losses(stdout: str) -> list[float]:
    return [float(v) for v in re.findall(r"^step \d+ loss (\S+)$", stdout, flags=re.M)]


def test_memplan_keeps_a_jobs_peak_under_a_budget_below_its_own(tmp_path: Path) -> None:
    alone = subprocess.run(_job(tmp_path), capture_output=True, text=True, cwd=tmp_path, timeout=240)
    assert alone.returncode == 0, alone.stderr[-2000:]
    natural = _peak(alone.stdout)
    budget = int(natural * 0.75)
    planned = subprocess.run([*CLI, "run", "--out", "o", "--memplan", f"{budget}B", "--", *_job(tmp_path)], capture_output=True, text=True, cwd=tmp_path, timeout=240)
    assert planned.returncode == 0, planned.stderr[-3000:]
    assert f"trainstack run: memplan for {budget}B: " in planned.stderr, planned.stderr[-3000:]
    assert _peak(planned.stdout) <= budget, (natural, budget, planned.stderr[-3000:])
    ours, theirs = _losses(planned.stdout), _losses(alone.stdout)
    assert len(ours) == len(theirs) == 4
    assert all(abs(a - b) <= 1e-3 * abs(b) for a, b in zip(ours, theirs)), (ours, theirs)


def test_a_real_cuda_oom_leaves_the_snapshot_its_view_and_the_jobs_own_error(tmp_path: Path) -> None:
    done = subprocess.run([*CLI, "run", "--out", "o", "--oom-snapshot", "--", *_job(tmp_path, "2")], capture_output=True, text=True, cwd=tmp_path, timeout=240)
    assert done.returncode != 0
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1024.00 GiB" in done.stderr, done.stderr[-3000:]
    names = sorted(p.name for p in (tmp_path / "o").rglob("oom-rank0.*"))
    assert names == ["oom-rank0.html", "oom-rank0.pickle", "oom-rank0.txt"], names
    html = (tmp_path / "o").rglob("oom-rank0.html").__next__().read_text()
    assert "<html" in html.lower() and "job.py" in html  # the largest live allocations, by the job's own stack


def test_bench_trains_on_the_gpu_and_reports_mfu(tmp_path: Path) -> None:
    done = subprocess.run([*CLI, "bench", "--preset", "tiny", "--device", "cuda", "--modes", "eager,compile+bf16", "--ablation", "--steps", "3", "--warmup", "2", "--out", str(tmp_path), "--json"],
                          capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {row["mode"]: row for row in json.loads(done.stdout)["rows"]}
    assert set(rows) == {"eager", "compile+bf16"}
    for row in rows.values():
        assert row["status"] == "ok" and row["tokens_per_s_per_gpu"] > 0
        assert isinstance(row["mfu"], float) and 0 < row["mfu"] < 1, row.get("mfu")
        assert row["mem_allocated_gib"] > 0
