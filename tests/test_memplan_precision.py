"""memplan for the bench's bf16 modes: bf16 parameters and gradients, AdamW on fp32 master
copies (bench.precision). The static bytes predicted are those the real optimizer holds."""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from trainstack.nn.decoder import Transformer  # noqa: E402
from trainstack.bench.precision import to_bf16_with_master  # noqa: E402
from trainstack.nn.presets import preset  # noqa: E402
from trainstack.memplan import MASTER_UPDATE_TEMPORARIES, plan_memory  # noqa: E402

BUDGET = 64 * 2**30  # room for anything: the breakdown, not the choice, is under test


def _storage(tensors) -> int:
    return sum(t.untyped_storage().nbytes() for t in tensors)


def test_bf16_static_bytes_are_what_the_master_optimizer_really_holds():
    cfg = preset("tiny")
    plan = plan_memory(cfg, batch=2, seq=64, budget_bytes=BUDGET, device="cpu", time_blocks=False, precision="bf16")
    model = Transformer(cfg)
    opt = to_bf16_with_master(model, lr=1e-3, compiled=False)
    params = list(model.parameters())
    assert all(p.dtype == torch.bfloat16 for p in params)
    assert plan.breakdown.weights == _storage(params) + _storage(model.buffers())
    assert plan.breakdown.optimizer == _storage([*opt.masters, *opt.exp_avgs, *opt.exp_avg_sqs])
    assert "bf16 parameters, fp32 master weights" in plan.profile.precision


def test_bf16_costs_more_memory_at_the_loss_than_autocast_and_eager_adds_the_master_update():
    cfg = preset("tiny")
    common = dict(batch=2, seq=64, budget_bytes=BUDGET, device="cpu", time_blocks=False)
    autocast = plan_memory(cfg, **common)
    eager = plan_memory(cfg, **common, precision="bf16")
    compiled = plan_memory(cfg, **common, precision="bf16", compiled=True)
    n_params = sum(p.numel() for p in Transformer(cfg).parameters())
    # fp32 weights + two fp32 moments (12 bytes a parameter) against bf16 weights + fp32 master and moments (14)
    static = lambda plan: plan.breakdown.weights + plan.breakdown.optimizer  # noqa: E731
    assert static(eager) - static(autocast) == 2 * n_params
    assert eager.profile.step_scratch == MASTER_UPDATE_TEMPORARIES * 4 * cfg.vocab_size * cfg.dim
    assert compiled.profile.step_scratch == 0 and autocast.profile.step_scratch == 0


def test_the_verb_plans_a_preset_in_bf16_and_refuses_an_unknown_precision_in_one_line():
    run = [sys.executable, "-m", "trainstack.cli", "memplan", "--preset", "tiny", "--batch", "2", "--seq", "64", "--budget", "8GiB"]
    ok = subprocess.run([*run, "--precision", "bf16", "--json"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert '"precision": "bf16"' in ok.stdout
    refused = subprocess.run([*run, "--precision", "fp16"], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2
    assert refused.stderr.strip().count("\n") == 0
    assert "--precision: 'fp16' is not a precision of the presets; accepted: autocast-bf16, bf16, fp32" in refused.stderr


def test_fp32_plans_a_preset_without_autocast():
    """fp32 weights computing in fp32 save more than under bf16 autocast: the blocks are
    calibrated without it, their state unchanged."""
    from trainstack.memplan.costs import Overheads

    common = dict(batch=2, seq=64, budget_bytes=1 << 33, overheads=Overheads())
    autocast, fp32 = plan_memory(preset("tiny"), **common), plan_memory(preset("tiny"), **common, precision="fp32")
    assert fp32.breakdown.saved_per_block["keep"] > autocast.breakdown.saved_per_block["keep"]
    assert (fp32.breakdown.weights, fp32.breakdown.optimizer) == (autocast.breakdown.weights, autocast.breakdown.optimizer)
