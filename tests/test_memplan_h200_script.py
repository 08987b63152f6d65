"""benchmarks/memplan_h200.py --hf: its comparison arithmetic, and the whole script run on a
CPU (--device cpu --tiny), so that the GPU run meets no Python error."""

from __future__ import annotations

import importlib.util
import json
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
    text = (tmp_path / "memplan_h200_hf_test.txt").read_text()
    data = json.loads((tmp_path / "memplan_h200_hf_test.json").read_text())
    assert "cases 3 over 1 architectures (gpt2); planned runs ok 3, over budget 0, out of memory 0" in text
    assert data["summary"][0].startswith("cases 3 ")
    assert [c["case"] for c in data["cases"]][-1] == "gpt2 b2 s16 layouts"
    assert {r["variant"] for r in data["rows"]} >= {"full", "every-2", "none", "planned", "layout-spread", "layout-first", "layout-last"}
