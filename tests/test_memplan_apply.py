"""apply(): recompute changes memory, never results: loss and gradients stay bit-identical."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from trainstack.nn.decoder import Transformer  # noqa: E402
from trainstack.nn.presets import PRESETS  # noqa: E402
from trainstack.memplan import apply, plan_memory  # noqa: E402
from trainstack.memplan.wrappers import apply_choices, choice_of, unwrap  # noqa: E402
from trainstack.memplan.costs import Choice, Overheads  # noqa: E402

TINY = PRESETS["tiny"]
K, S, F = Choice.KEEP, Choice.SELECTIVE, Choice.FULL


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(TINY)


@pytest.fixture(scope="module")
def tokens() -> torch.Tensor:
    return torch.randint(0, TINY.vocab_size, (2, 97), generator=torch.Generator().manual_seed(1))


def loss_and_grads(model: torch.nn.Module, tokens: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(tokens[:, :-1], tokens[:, 1:])
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return loss.detach(), grads


@pytest.mark.parametrize("choices", [(F, F), (S, S), (F, K), (S, K), (F, S)])
def test_loss_and_grads_are_identical(model, tokens, choices) -> None:
    reference_loss, reference = loss_and_grads(model, tokens)
    planned = apply_choices(copy.deepcopy(model), choices)
    loss, grads = loss_and_grads(planned, tokens)
    assert torch.equal(loss, reference_loss)
    assert grads.keys() == reference.keys()  # parameter names unchanged
    for name, g in reference.items():
        assert torch.equal(grads[name], g), name


class DropoutBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)
        self.dropout = torch.nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.dropout(torch.relu(self.linear(x)))


@pytest.mark.parametrize("choice", [F, S])
def test_recompute_replays_the_dropout_masks_of_the_forward(choice) -> None:
    torch.manual_seed(0)
    reference = torch.nn.Module()
    reference.layers = torch.nn.ModuleList(DropoutBlock() for _ in range(2))
    planned = apply_choices(copy.deepcopy(reference), (choice, choice))
    x = torch.randn(4, 16)
    grads = []
    for model in (reference, planned):
        torch.manual_seed(7)
        out = x
        for block in model.layers:
            out = block(out)
        out.square().sum().backward()
        grads.append([p.grad for p in model.parameters()])
    for got, want in zip(grads[1], grads[0]):
        assert torch.equal(got, want)


def test_apply_a_real_plan_and_undo_it(model, tokens) -> None:
    from trainstack.memplan.planner import choices_for
    from trainstack.memplan.decoder import calibrate
    from trainstack.memplan.memory import peak_bytes

    profile = calibrate(TINY, batch=2, seq=96, device="cpu")
    budget = peak_bytes(profile, choices_for(1, 0, 1)) + 1024  # room for one kept block, not two
    plan = plan_memory(TINY, batch=2, seq=96, budget_bytes=budget, device="cpu", overheads=Overheads())
    assert plan.counts[Choice.KEEP] < TINY.n_layers
    planned = apply(copy.deepcopy(model), plan)
    assert tuple(choice_of(b) for b in planned.layers) == plan.choices
    reference_loss, _ = loss_and_grads(model, tokens)
    assert torch.equal(loss_and_grads(planned, tokens)[0], reference_loss)
    for block in planned.layers:
        unwrap(block)
    assert all(choice_of(b) is K and "forward" not in vars(b) for b in planned.layers)


def test_a_plan_for_another_depth_is_refused(model) -> None:
    with pytest.raises(ValueError, match="3 blocks"):
        apply_choices(copy.deepcopy(model), (K, K, K))


def test_apply_stays_the_function_after_the_wrappers_module_is_imported() -> None:
    import trainstack.memplan
    import trainstack.memplan.wrappers  # noqa: F401

    assert callable(trainstack.memplan.apply) and trainstack.memplan.apply.__module__ == "trainstack.memplan"


@pytest.mark.slow
def test_a_kept_block_compiled_under_a_memory_budget_saves_less_and_computes_the_same() -> None:
    from trainstack.nn.decoder import Block, rope_tables
    from trainstack.memplan.wrappers import compile_block

    cfg, seq = PRESETS["tiny"], 64
    cos, sin = (t[:seq] for t in rope_tables(cfg))
    torch.manual_seed(0)
    block = Block(cfg)
    x = torch.randn(2, seq, cfg.dim)

    def saved_and_grads(module):
        nbytes = []

        def pack(t):
            nbytes.append(t.untyped_storage().nbytes())
            return t

        xi = x.clone().requires_grad_(True)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            y = module(xi, cos, sin)
        y.square().sum().backward()
        grads = [xi.grad] + [p.grad.clone() for p in block.parameters()]
        block.zero_grad(set_to_none=True)
        return sum(nbytes), y.detach(), grads

    default_saved, y1, g1 = saved_and_grads(compile_block(block))
    budget_saved, y0, g0 = saved_and_grads(compile_block(block, 0.0))
    assert budget_saved < 0.6 * default_saved  # the partitioner recomputed inside the block
    torch.testing.assert_close(y0, y1, rtol=1e-5, atol=1e-5)
    for a, b in zip(g0, g1):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
