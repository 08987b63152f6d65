"""bench's host optimizer (memplan's offload rungs on one process), on the CPU: with bench.precision's
update it trains to exactly the losses of the ``bf16`` mode it offloads, whether the step waits for
the backward or starts during the last micro-batch's; torch's fused kernel stays within rounding of
it; the bench row says where each kind of state lived and how much of the step ran during the
backward."""

from __future__ import annotations

import pytest
import torch

from tests.benchrun import bench
from trainstack.bench.host_optimizer import HOST_RUNGS, HostAdamW, block_parameters, chunks_of, to_bf16_with_host_state
from trainstack.bench.precision import to_bf16_with_master
from trainstack.nn.decoder import Transformer
from trainstack.nn.presets import PRESETS

STEPS, ACCUM = 8, 2


def _train(make_opt, *, arm: bool) -> list[float]:
    torch.manual_seed(0)
    model = Transformer(PRESETS["tiny"])
    opt = make_opt(model)
    gen = torch.Generator().manual_seed(1)
    data = torch.randint(0, PRESETS["tiny"].vocab_size, (STEPS * ACCUM, 2, 33), generator=gen)
    losses = []
    for step in range(STEPS):
        for j in range(ACCUM):
            if arm and isinstance(opt, HostAdamW):
                opt.arm(j == ACCUM - 1)
            tokens = data[step * ACCUM + j]
            loss = model(tokens[:, :-1], tokens[:, 1:])
            (loss / ACCUM).backward()
        losses.append(loss.item())
        opt.step()
        opt.zero_grad(set_to_none=True)
    return losses


@pytest.fixture(scope="module")
def reference() -> list[float]:
    return _train(lambda m: to_bf16_with_master(m, lr=1e-3, compiled=False), arm=False)


@pytest.mark.parametrize("kinds", HOST_RUNGS, ids=lambda k: "+".join(sorted(k)))
@pytest.mark.parametrize("arm", [False, True], ids=["after-backward", "during-backward"])
def test_the_reference_update_gives_the_bf16_modes_losses_exactly(reference, kinds, arm):
    # chunks of 1000 elements: every large parameter crosses several
    losses = _train(lambda m: to_bf16_with_host_state(m, lr=1e-3, kinds=kinds, kernel="reference", chunk_elements=1000), arm=arm)
    assert losses == reference
    assert losses[-1] < losses[0]


def test_the_fused_kernel_stays_within_rounding_and_the_state_lives_on_the_host(reference):
    holder = {}

    def make(model):
        holder["opt"] = opt = to_bf16_with_host_state(model, lr=1e-3, kinds=HOST_RUNGS[-1], chunk_elements=4096)
        return opt

    losses = _train(make, arm=True)
    assert losses == pytest.approx(reference, rel=1e-4)
    opt = holder["opt"]
    assert all(m.device.type == "cpu" and m.dtype == torch.float32 for m in opt.masters + opt.exp_avgs + opt.exp_avg_sqs)
    assert all(p.dtype == torch.bfloat16 for p in opt.params)
    # the blocks' parameters started during the last backward; the embedding, final norm and head after it
    stats = opt.history[-1]
    assert 0 < stats.early_chunks < stats.chunks == sum(len(c) for c in opt.chunks)
    assert opt.where() == {"params": "gpu", "grads": "gpu", "master": "host", "optimizer": "host"}


def test_chunks_cover_a_parameter_once_and_blocks_exclude_shared_parameters():
    chunks = chunks_of(10_001, 3, size=2_500)
    assert [(c.start, c.stop) for c in chunks] == [(0, 2500), (2500, 5000), (5000, 7500), (7500, 10000), (10000, 10001)]
    model = Transformer(PRESETS["tiny"])
    params = list(model.parameters())
    early = block_parameters(model, params)
    names = [n for n, _ in model.named_parameters()]
    assert {names[i] for i in early} == {n for n in names if n.startswith("layers.")}
    model.layers[0].attention_norm.weight = model.norm.weight  # one parameter in a block and outside: waits for the end
    params = list(model.parameters())
    assert not any(params[i] is model.norm.weight for i in block_parameters(model, params))


def test_a_rung_that_is_not_the_host_optimizers_is_refused():
    with pytest.raises(ValueError, match="accepted"):
        HostAdamW([torch.nn.Parameter(torch.zeros(2))], [torch.zeros(2)], kinds=frozenset({"params"}))


def test_bench_runs_bf16_offload_beside_bf16(tmp_path):
    rows = bench(tmp_path, "--batch", "2", "--modes", "bf16,bf16+offload", "--ablation")
    plain, offloaded = rows
    assert [r["mode"] for r in rows] == ["eager+bf16", "eager+bf16+offload"] and all(r["status"] == "ok" for r in rows)
    assert offloaded["loss_final"] == pytest.approx(plain["loss_final"], rel=1e-4)
    assert offloaded["state_lived"] == {"params": "gpu", "grads": "gpu", "master": "host", "optimizer": "host"}
    assert "host memory" in offloaded["precision"] and "bench.host_optimizer" in offloaded["optimizer"]
    host = offloaded["host_optimizer"]
    assert host["chunks"] > host["chunks_during_backward"] > 0 and host["cpu_ms"] > 0
    assert offloaded["framework"] == "none"
