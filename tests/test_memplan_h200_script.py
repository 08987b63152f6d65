"""benchmarks/memplan_h200.py --hf: its comparison arithmetic, and the whole script run on a
CPU (--device cpu --tiny), so that the GPU run meets no Python error."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "memplan_h200.py"


@pytest.fixture(scope="module")
def bench():
    return _load("memplan_h200")


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _row(bench, variant: str, tps: float, status: str = "ok"):
    return bench.Row("c", variant, "fk", status, 100, 110, 100, 105, tps, [2.0 / tps] if tps else [], run_tokens_per_s=[tps] if tps else [])


def test_fold_pools_steps_and_keeps_each_run(bench) -> None:
    a, b = _row(bench, "planned", 1.0), _row(bench, "planned", 2.0)
    b.reserved = 200
    bench.fold(a, b, tokens=2, budget=150)
    assert a.repeats == 2 and a.run_tokens_per_s == [1.0, 2.0] and a.reserved == 200
    assert a.status == "over"  # the repeat reserved past the budget
    c = _row(bench, "planned", 1.0)
    bench.fold(c, _row(bench, "planned", 0, status="oom"), tokens=2, budget=None)
    assert c.status == "oom"


def test_best_uniform_ratio_counts_the_identical_layout_as_planned(bench) -> None:
    p = _row(bench, "planned", 100.0)
    assert bench.best_uniform_ratio({"planned": p, "uniform": [_row(bench, "every-4", 80.0)], "same_as": ["every-2"]}) == 1.0
    assert bench.best_uniform_ratio({"planned": p, "uniform": [_row(bench, "every-4", 125.0)], "same_as": ["every-2"]}) == 0.8
    assert bench.best_uniform_ratio({"planned": p, "uniform": [_row(bench, "every-4", 0, status="oom")], "same_as": []}) is None
    assert bench.best_uniform_ratio({"planned": p, "uniform": [], "same_as": ["full"]}) == 1.0


def test_the_script_runs_on_a_cpu(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), "--hf", "--device", "cpu", "--tiny", "--hf-shapes", "gpt2:2:16", "--skip-compile", "--steps", "1", "--out", str(tmp_path), "--commit", "test"])
    module = _load("memplan_h200_run")
    try:
        assert module.main() == 0
    finally:
        sys.modules.pop("memplan_h200_run", None)
    text = (tmp_path / "hf_test.txt").read_text()
    data = json.loads((tmp_path / "hf_test.json").read_text())
    assert "cases 3 over 1 architectures (gpt2); planned runs ok 3, over budget 0, out of memory 0" in text
    assert data["summary"][0].startswith("cases 3 ")
    assert [c["case"] for c in data["cases"]][-1] == "gpt2 b2 s16 layouts"
    assert {r["variant"] for r in data["rows"]} >= {"full", "every-2", "none", "planned", "layout-spread", "layout-first", "layout-last"}


def test_abba_interleaves_so_each_run_sits_beside_its_pair(bench) -> None:
    assert bench.abba(["a", "b"], 4) == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert bench.abba(["a", "b"], 3) == ["a", "b", "b", "a", "a", "b"]
    order = bench.abba(["a", "b"], 10)
    assert order.count("a") == order.count("b") == 10


def test_mean_rate_is_all_tokens_over_all_time(bench) -> None:
    # a bimodal run: the median step is the slow one, the rate is the mean's
    assert bench.mean_rate([0.076, 0.088, 0.088], tokens=1000) == pytest.approx(3000 / 0.252)


def test_paired_interval_brackets_the_mean_and_is_seeded(bench) -> None:
    a = [100.0, 104.0, 98.0, 101.0, 103.0, 99.0]
    b = [100.0, 100.0, 100.0, 100.0, 100.0, 100.0]
    mean, lo, hi = bench.paired_interval(a, b)
    assert mean == pytest.approx(1.0083333, rel=1e-6)
    assert lo < mean < hi and lo >= 0.98 and hi <= 1.04
    assert bench.paired_interval(a, b) == (mean, lo, hi)
    # a steady 10% gap: the whole interval above 1
    assert bench.paired_interval([110.0, 111.0, 109.0, 110.0], [100.0] * 4)[1] > 1.05
    with pytest.raises(ValueError):
        bench.paired_interval([], [])


def test_the_compiled_comparison_runs_on_a_cpu(tmp_path, monkeypatch) -> None:
    """planned+compile against compile@r end to end (inductor on the CPU): every variant's
    graphs compiled once, then ten runs of each interleaved, and the ratio's interval written."""
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), "--hf", "--device", "cpu", "--tiny", "--hf-shapes", "gpt2:2:16", "--hf-fractions", "0.3", "--hf-compile", "gpt2:2:16:0.3", "--skip-layouts", "--steps", "1", "--out", str(tmp_path), "--name", "hf_compiled_gpt2"])
    module = _load("memplan_h200_compiled")
    try:
        assert module.main() == 0
    finally:
        sys.modules.pop("memplan_h200_compiled", None)
    data = json.loads((tmp_path / "hf_compiled_gpt2.json").read_text())
    compiled = data["cases"][0]["compiled"]
    assert compiled["planned+compile"]["repeats"] == compiled["compile"]["repeats"] == 10
    assert len(compiled["pairs"]) == 10 and len(compiled["interval"]) == 3
    assert compiled["budget_r"] == 1.0  # no memory measured on a CPU: the default partitioner fits
    assert any("interleaved pairs" in line and "95% interval" in line for line in data["summary"])


def test_switching_between_compiled_variants_compiles_nothing_new() -> None:
    """hf_compiled compiles each variant's graphs once, then switches between the variants
    for every interleaved run: planned (some blocks recomputed, the rest compiled as they are)
    and compile@r (every block kept, compiled under a memory budget). The switch must find
    the graphs compiled before, or the timing would include compilation."""
    from torch import nn
    from torch._dynamo.utils import counters

    from trainstack.memplan.costs import Choice
    from trainstack.memplan.wrappers import apply_choices, compile_block

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.b(torch.nn.functional.gelu(self.a(x)))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList(Block() for _ in range(4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.layers:
                x = layer(x)
            return x.square().mean()

    torch._dynamo.reset()
    model = Model()
    originals = list(model.layers)
    k, f = Choice.KEEP, Choice.FULL
    variants = {"planned": ((f, k, f, k), None), "compile@0.5": ((k,) * 4, 0.5)}

    def run(name: str) -> None:
        choices, budget = variants[name]
        apply_choices(model, choices)
        for i, block in enumerate(originals):
            model.layers[i] = compile_block(block, budget)
        model(torch.randn(8, 16, requires_grad=True)).backward()

    with torch._dynamo.config.patch(recompile_limit=64):
        for name in variants:  # each variant's graphs compiled once
            run(name)
        compiled = counters["stats"]["unique_graphs"]
        for name in ["planned", "compile@0.5", "compile@0.5", "planned"]:
            run(name)
    assert compiled >= 3  # the kept block, the recomputed one, the kept one under the budget
    assert counters["stats"]["unique_graphs"] == compiled
    torch._dynamo.reset()


def test_a_name_that_is_not_a_file_name_is_refused_before_any_work(tmp_path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--hf", "--device", "cpu", "--tiny", "--name", "../hf_grid", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].startswith("memplan_h200.py: error: --name '../hf_grid': a file name of letters")
    assert list(tmp_path.iterdir()) == [] and not (tmp_path.parent / "hf_grid.txt").exists()
