"""bf16 parameters with fp32 master weights: the same AdamW as torch's, state kept in fp32."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from trainstack.nn.decoder import Transformer  # noqa: E402
from trainstack.bench.precision import MasterAdamW, to_bf16_with_master  # noqa: E402
from trainstack.nn.modes import parse_mode  # noqa: E402
from trainstack.nn.presets import PRESETS  # noqa: E402
from trainstack.bench.runner import RunSpec, run, set_lr  # noqa: E402


def _grads(seed: int, shapes: list[tuple[int, ...]]) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=gen) for s in shapes]


@pytest.mark.parametrize("compiled", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_master_adamw_matches_torch_adamw(compiled):
    """On fp32 parameters the master update is torch.optim.AdamW's, step for step, with the
    learning rate changed between steps as a schedule does (one compiled update serves all)."""
    shapes = [(7, 5), (5,), (3, 4, 2)]
    init = _grads(0, shapes)
    ref = [torch.nn.Parameter(t.clone()) for t in init]
    ours = [torch.nn.Parameter(t.clone()) for t in init]
    hyper = {"lr": 1e-2, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}
    ref_opt = torch.optim.AdamW(ref, foreach=False, **hyper)
    opt = MasterAdamW(ours, [p.detach().clone() for p in ours], compiled=compiled, **hyper)
    for step in range(5):
        for a, b, g in zip(ref, ours, _grads(step + 1, shapes)):
            a.grad, b.grad = g.clone(), g.clone()
        set_lr(ref_opt, hyper["lr"] / (step + 1))
        set_lr(opt, hyper["lr"] / (step + 1))
        ref_opt.step()
        opt.step()
        opt.zero_grad(set_to_none=True)
    for a, b in zip(ref, ours):
        torch.testing.assert_close(b.detach(), a.detach(), rtol=1e-5, atol=1e-6)
    assert all(p.grad is None for p in ours)


def test_small_updates_survive_in_the_master_weights():
    """An update far below bf16's rounding step moves the fp32 master weight, and after
    enough steps the bf16 parameter too; torch's AdamW on a bf16 parameter loses it."""
    p = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    opt = MasterAdamW([p], [torch.ones(4)], lr=1e-4, weight_decay=0.0)
    plain = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    plain_opt = torch.optim.AdamW([plain], lr=1e-4, weight_decay=0.0)
    for _ in range(100):
        p.grad = torch.ones(4, dtype=torch.bfloat16)
        plain.grad = torch.ones(4, dtype=torch.bfloat16)
        opt.step()
        plain_opt.step()
    torch.testing.assert_close(opt.masters[0], torch.full((4,), 1 - 100 * 1e-4), rtol=0, atol=1e-5)
    assert opt.masters[0].dtype == opt.exp_avgs[0].dtype == opt.exp_avg_sqs[0].dtype == torch.float32
    assert p.dtype == torch.bfloat16 and torch.all(p < 1)
    assert torch.all(plain == 1)  # each 1e-4 step rounds away at 1.0 (bf16 spacing 2**-7)


def test_to_bf16_keeps_buffers_and_exact_masters():
    torch.manual_seed(0)
    model = Transformer(PRESETS["tiny"])
    before = [p.detach().clone() for p in model.parameters()]
    opt = to_bf16_with_master(model, lr=1e-3, compiled=False)
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert model.rope_cos.dtype == model.rope_sin.dtype == torch.float32
    for master, want in zip(opt.masters, before):
        assert torch.equal(master, want)


def test_bf16_mode_trains_and_says_its_precision():
    spec = RunSpec(model="tiny", cfg=PRESETS["tiny"], mode=parse_mode("bf16"), batch=2, seq=32, steps=6, warmup=1, device="cpu", lr=3e-3)
    row = run(spec)
    assert row["status"] == "ok", row
    assert row["mode"] == "eager+bf16"
    assert row["precision"] == "bf16 params, fp32 master weights and AdamW state"
    assert row["loss_final"] < row["loss_first"]
