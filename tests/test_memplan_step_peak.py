"""memplan's whole-step peak against what torch's memory trackers measure on the CPU: one
process (MemTracker, in this process) and FSDP2 over 4 gloo ranks (FSDPMemTracker, one
launch); 2 ranks are in test_memplan_ranks.py. The tiny preset in fp32 with torch's
for-loop AdamW, as the bench trains on a CPU; the prediction within 3% of the peak."""

from __future__ import annotations

from functools import cache

import pytest

from tests.rank_launch import launch, matches_a_schedule, whole_step_plan

# (batch, seq, the phase memplan predicts the peak in), as tests/rank_memory_worker.WHOLE_STEP
CASES = [(2, 64, "loss forward"), (1, 16, "reduce-scatter of block 1")]


@cache
def one_process_peak(batch: int, seq: int) -> tuple[int, dict]:
    """The second step's peak under MemTracker (the first makes AdamW's state), and its bytes by kind."""
    import torch
    from torch.distributed._tools.mem_tracker import MemTracker

    from trainstack.nn.decoder import Transformer
    from trainstack.nn.presets import preset

    torch.manual_seed(0)
    cfg = preset("tiny")
    model = Transformer(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    tokens = torch.randint(0, cfg.vocab_size, (batch, seq + 1), generator=torch.Generator().manual_seed(0))

    def step() -> None:
        model(tokens[:, :-1], tokens[:, 1:]).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    tracker = MemTracker()
    tracker.track_external(model, opt, tokens)
    with tracker:
        step()
    peak = {str(k).split(".")[-1]: v for k, v in tracker.get_tracker_snapshot("peak")[torch.device("cpu")].items()}
    return peak["Total"], peak


@pytest.mark.parametrize(("batch", "seq"), [(2, 64), (1, 16)])
def test_one_process_whole_step_peak_within_3_percent_of_mem_tracker(batch, seq):
    measured, kinds = one_process_peak(batch, seq)
    plan = whole_step_plan(batch, seq, 1)
    assert plan.breakdown.allocated_peak == pytest.approx(measured, rel=0.03)
    if plan.breakdown.transient_phase == "optimizer step":  # the for-loop AdamW's temporaries on top of its state
        assert kinds["OPT"] > plan.breakdown.optimizer


def test_autocast_plan_of_a_fp32_step_is_what_missed_it():
    """The bench on a CPU trains fp32 without autocast: planned as bf16 autocast (smaller
    activations) the same step is predicted more than 3% under its peak."""
    from trainstack.memplan import plan_memory
    from trainstack.memplan.costs import Overheads
    from trainstack.nn.presets import preset

    measured, _ = one_process_peak(2, 64)
    autocast = plan_memory(preset("tiny"), batch=2, seq=64, budget_bytes=1 << 33, overheads=Overheads())
    assert autocast.breakdown.allocated_peak < 0.97 * measured


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory) -> list[dict]:
    return launch(tmp_path_factory.mktemp("four"), 4, "2", "64", "")


@pytest.mark.parametrize(("batch", "seq", "phase"), CASES)
def test_fsdp2_over_4_ranks_whole_step_peak_within_3_percent(four_ranks, batch, seq, phase):
    plan = whole_step_plan(batch, seq, 4)
    assert plan.breakdown.transient_phase == phase
    for rank in four_ranks:
        measured = rank["whole"][f"{batch}x{seq}"]
        assert matches_a_schedule(plan, measured), (measured, plan.breakdown.allocated_peak)


# bench's own host optimizer (bench.host_optimizer: memplan's host rungs on one process) on
# the CPU, whose device memory is the host's: what the step holds beside the optimizer's host
# tensors (its state there, its fp32 gradient chunks and staging buffers) is what a GPU would.
# MemTracker sees the training thread's tensors, not its step worker's: the optimizer rung's
# streamed chunks (the worker's) are checked where the forward sets the peak.
# (rung, batch, seq, micro-batches, the phase memplan predicts the peak in)
HOST_CASES = [
    (("optimizer", "master"), 2, 64, 2, "loss forward"),
    (("optimizer", "master"), 1, 16, 1, "loss forward"),
    (("optimizer",), 2, 64, 2, "loss forward"),
]


@cache
def host_optimizer_step(kinds: frozenset[str], batch: int, seq: int, accum: int) -> tuple[int, int]:
    """The second optimizer step of the tiny preset in bf16 under bench's host optimizer
    (``accum`` micro-batches, the last arming its step): (the peak MemTracker saw less the
    optimizer's host tensors, those tensors' bytes)."""
    import torch
    from torch.distributed._tools.mem_tracker import MemTracker

    from trainstack.bench.host_optimizer import to_bf16_with_host_state
    from trainstack.nn.decoder import Transformer
    from trainstack.nn.presets import preset

    torch.manual_seed(0)
    cfg = preset("tiny")
    model = Transformer(cfg)
    opt = to_bf16_with_host_state(model, lr=1e-3, kinds=kinds)
    data = torch.randint(0, cfg.vocab_size, (accum, batch, seq + 1), generator=torch.Generator().manual_seed(0))

    def step(tracker=None) -> None:
        for j in range(accum):
            if tracker is not None:
                tracker.reset_mod_stats()  # one module called once per micro-batch, as MemTracker asks
            opt.arm(j == accum - 1)
            (model(data[j][:, :-1], data[j][:, 1:]) / accum).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    host = opt.host_tensors()
    tracker = MemTracker()
    tracker.track_external(model, data, *host, *opt.masters)
    with tracker:
        step(tracker)
    peak = tracker.get_tracker_snapshot("peak")[torch.device("cpu")]
    held = sum(t.untyped_storage().nbytes() for t in host)
    return next(v for k, v in peak.items() if str(k).endswith("Total")) - held, held


@pytest.mark.parametrize(("kinds", "batch", "seq", "accum", "phase"), HOST_CASES)
def test_host_optimizer_step_within_3_percent_on_the_device_and_exact_on_the_host(kinds, batch, seq, accum, phase):
    from trainstack.memplan import plan_memory
    from trainstack.memplan.costs import Overheads
    from trainstack.memplan.offload import Placement
    from trainstack.nn.presets import preset

    on_device, on_host = host_optimizer_step(frozenset(kinds), batch, seq, accum)
    plan = plan_memory(preset("tiny"), batch=batch, seq=seq, budget_bytes=1 << 33, precision="bf16",
                       placement=Placement(shard="none", offload=frozenset(kinds), accum=accum), overheads=Overheads())
    assert plan.breakdown.transient_phase == phase
    assert plan.breakdown.allocated_peak == pytest.approx(on_device, rel=0.03)
    assert plan.breakdown.host_bytes == on_host  # the state, and on the CPU's step its chunks and staging buffers


def test_bf16_planned_under_autocast_missed_the_host_optimizers_step():
    """bench's bf16 modes train bf16 parameters without autocast: the same step calibrated
    under autocast (fp32 weights, an fp32 residual stream) is predicted more than 3% over."""
    from trainstack.memplan.decoder import BENCH_AUTOCAST, decoder_on_meta, stored_as
    from trainstack.memplan.memory import breakdown
    from trainstack.memplan.optim import precision_spec
    from trainstack.memplan.api import calibrate_any
    from trainstack.memplan.costs import Choice
    from trainstack.memplan.placement import Layout
    from trainstack.nn.presets import preset

    kinds = frozenset({"optimizer", "master"})
    on_device, _ = host_optimizer_step(kinds, 2, 64, 2)
    cfg = preset("tiny")
    model, tokens = decoder_on_meta(cfg, batch=2, seq=64)
    autocast = stored_as(calibrate_any(model, tokens, precision=BENCH_AUTOCAST, blocks="layers", device="cpu", measure=False),
                         precision_spec("bf16"), cfg, compiled=False)
    predicted = breakdown(autocast, (Choice.KEEP,) * autocast.n_blocks, layout=Layout("none", 1, kinds), accum=2).allocated_peak
    assert predicted > 1.03 * on_device
