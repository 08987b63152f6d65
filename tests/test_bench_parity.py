"""bench --parity: the learnable Markov task, the loss-gap arithmetic, and a parity run of
two modes on the tiny preset (real workers on the CPU)."""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")

from trainstack.bench import parity  # noqa: E402
from trainstack.cli import main  # noqa: E402


def test_markov_tokens_walk_the_fixed_chain():
    shape = (3, 4, 200)
    a = parity.markov_tokens(512, shape, device=torch.device("cpu"), seed=1)
    assert a.shape == shape and a.dtype == torch.long
    assert torch.equal(a, parity.markov_tokens(512, shape, device=torch.device("cpu"), seed=1))
    b = parity.markov_tokens(512, shape, device=torch.device("cpu"), seed=2)
    assert not torch.equal(a, b)
    # each token is followed by at most len(SUCCESSOR_P) tokens, the same table for every seed
    followers: dict[int, set[int]] = {}
    for walk in (a, b):
        rows = walk.reshape(-1, shape[-1])
        for prev, nxt in zip(rows[:, :-1].flatten().tolist(), rows[:, 1:].flatten().tolist()):
            followers.setdefault(prev, set()).add(nxt)
    assert max(len(f) for f in followers.values()) <= len(parity.SUCCESSOR_P)
    assert int(a.max()) < parity.STATES
    assert int(parity.markov_tokens(128, shape, device=torch.device("cpu"), seed=1).max()) < 128  # a smaller vocabulary bounds the chain


def test_entropy_of_the_chain():
    assert parity.entropy_nats() == pytest.approx(-(0.7 * math.log(0.7) + 0.2 * math.log(0.2) + 0.1 * math.log(0.1)))


def test_moving_average():
    assert parity.moving_average([1.0, 2.0, 3.0, 4.0], 2) == [1.0, 1.5, 2.5, 3.5]


def test_loss_gap_is_relative_and_taken_over_the_smoothed_tail():
    a = [10.0 - 0.03 * i for i in range(300)]
    b = [x * 1.02 for x in a]
    b[10] = 100.0  # an early spike, outside the compared tail
    gap = parity.loss_gap(a, b)
    assert gap.window == 15 and gap.tail_from == 200
    assert gap.max_rel == pytest.approx(0.02) and gap.final_rel == pytest.approx(0.02)
    same = parity.loss_gap(a, list(a))
    assert same.max_rel == 0.0
    # apart while they fall, together at the end: the parity figure is the gap after the steps
    late = a[:230] + [x * 1.3 for x in a[230:270]] + a[270:]
    apart = parity.loss_gap(a, late)
    assert apart.final_rel == 0.0 and apart.max_rel == pytest.approx(0.3)
    with pytest.raises(ValueError, match="at least 3"):
        parity.loss_gap([1.0, 2.0], [1.0, 2.0])


def test_parity_report_on_the_tiny_preset(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the workers' tiny products: threads only contend
    argv = ["bench", "-m", "tiny", "--batch", "4", "--seq", "64", "--device", "cpu", "--warmup", "1", "--steps", "60"]
    assert main([*argv, "--parity", "eager,bf16", "--out", str(tmp_path)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "parity eager vs eager+bf16: tiny, batch 4 x seq 64, Markov chain over 256 tokens" in text
    assert "relative loss gap |B - A| / A after 61 steps: " in text and "(largest over steps 41-61: " in text
    assert "AdamW lr 0.001, linear warm-up over 10% of the steps, cosine decay to 0.1 x)" in text
    result = json.loads((tmp_path / "parity-tiny-b4-s64.json").read_text())
    assert result["status"] == "ok" and result["modes"] == ["eager", "eager+bf16"] and result["steps"] == 61
    a, b = (r["losses"] for r in result["rows"])
    assert len(a) == len(b) == 61
    assert a[0] == pytest.approx(b[0], rel=1e-2)  # same seed, same weights, same tokens
    assert result["smoothed"][0][-1] < 0.75 * a[0]  # the task is learnt, unlike uniform tokens
    assert 0 < result["final_rel_gap"] <= result["max_rel_gap"] < 0.05
    assert (tmp_path / "parity-tiny-b4-s64.png").stat().st_size > 10_000


def test_parity_over_seeds_compares_the_mean_curves_and_shows_each_seeds_gap(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    argv = ["bench", "-m", "tiny", "--batch", "2", "--seq", "32", "--device", "cpu", "--warmup", "1", "--steps", "30"]
    assert main([*argv, "--parity", "eager,bf16", "--parity-seeds", "2", "--out", str(tmp_path)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    result = json.loads((tmp_path / "parity-tiny-b2-s32.json").read_text())
    rows = result["rows"]
    assert [(r["mode"], r["seed"]) for r in rows] == [("eager", 0), ("eager+bf16", 0), ("eager", 1), ("eager+bf16", 1)]
    assert rows[0]["losses"][0] != pytest.approx(rows[2]["losses"][0], rel=1e-4)  # another seed: other weights, other batches
    mean_a = [(x + y) / 2 for x, y in zip(rows[0]["losses"], rows[2]["losses"])]
    mean_b = [(x + y) / 2 for x, y in zip(rows[1]["losses"], rows[3]["losses"])]
    assert result["final_rel_gap"] == pytest.approx(parity.loss_gap(mean_a, mean_b).final_rel)
    each = [parity.loss_gap(rows[i]["losses"], rows[i + 1]["losses"]).final_rel for i in (0, 2)]
    assert result["seeds"] == [0, 1] and result["seed_final_rel_gaps"] == pytest.approx(each)
    assert "mean loss of 2 seeds (moving average of 1 steps" in text
    assert f"each seed's own gap (0, 1): {each[0]:.2%}, {each[1]:.2%}" in text
    assert (tmp_path / "parity-tiny-b2-s32.png").stat().st_size > 10_000


@pytest.mark.parametrize(("extra", "message"), [(["--parity-seeds", "2"], "--parity-seeds 2: accepted only with --parity A,B"),
                                                (["--parity", "eager,bf16", "--parity-seeds", "0"], "--parity-seeds 0: accepted: 1 to 16")])
def test_parity_seeds_are_checked_before_anything_runs(extra, message, capsys):
    assert main(["bench", "-m", "tiny", "--device", "cpu", *extra]) == 2
    assert message in " ".join(capsys.readouterr().err.split())


def test_learning_rate_schedule():
    """Warm-up from LR/warm-up steps to LR, then a cosine decay to a tenth of it at the last step."""
    factors = [parity.lr_factor(i, 300) for i in range(300)]
    assert factors[0] == pytest.approx(1 / 30) and factors[29] == 1.0
    assert all(a < b for a, b in zip(factors[:30], factors[1:30]))  # rising through the warm-up
    assert all(a > b for a, b in zip(factors[30:], factors[31:]))  # then falling
    assert factors[-1] == pytest.approx(parity.FINAL_LR_FRACTION)
    assert parity.lr_factor(165, 300) == pytest.approx(0.55, abs=0.01)  # half-way down the cosine
    assert [parity.lr_factor(i, 2) for i in range(2)] == [1.0, pytest.approx(0.1)]  # short runs too


def test_parity_needs_two_modes(capsys):
    assert main(["bench", "-m", "tiny", "--device", "cpu", "--parity", "eager,bf16,compile"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--parity 'eager,bf16,compile': 3 modes; accepted: two modes A,B" in err
