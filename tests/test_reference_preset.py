"""The field's reference configuration as presets: Llama 3.1 8B (and Llama 3.2 1B, 3B) at
sequence 8192, memplan choosing what to recompute to fit one H200, and the FLOP count
named both ways (attention's full T x T as Megatron-LM and NeMo count it, and the causal half)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from trainstack.bench.mfu import flops_per_token, flops_per_token_causal
from trainstack.nn import defaults
from trainstack.nn.presets import REFERENCE_SEQ, REFERENCES, SHAPES, preset

H200 = 141 * 10**9  # one H200's 141 GB


def test_reference_presets_are_the_llama_shapes_at_8192():
    assert REFERENCE_SEQ == 8192
    for name, base in REFERENCES.items():
        assert SHAPES[name] == SHAPES[base] and defaults.seq(None, preset=name) == 8192
    assert defaults.seq(None, preset="8b") == 2048 and defaults.seq(None, preset="tiny") == 256
    cfg = preset("llama3.1-8b")
    assert (cfg.dim, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.ffn_dim, cfg.vocab_size) == (4096, 32, 32, 8, 14336, 128256)
    assert 8.0e9 < cfg.total_params() < 8.1e9  # Llama 3.1 8B: 8.03 B


def test_flops_both_ways_at_8192():
    cfg = preset("llama3.1-8b")
    n = cfg.non_embedding_params()
    full, causal = flops_per_token(cfg, 8192), flops_per_token_causal(cfg, 8192)
    assert full == 6 * n + 12 * 32 * 4096 * 8192  # Megatron-LM / NeMo: 12 * layers * width * seq per token
    assert causal == 6 * n + 6 * 32 * 4096 * 8192
    assert full / causal == pytest.approx(1.0 + 6 * 32 * 4096 * 8192 / causal)
    assert 1.05 < full / causal < 1.15  # at 8192 the two counts differ by about 10%


def test_memplan_fits_the_8b_reference_in_one_h200():
    """The real planner on the CPU (fake-tensor calibration): the 8B preset at 8192 under 141 GB."""
    done = subprocess.run(
        [sys.executable, "-m", "trainstack", "memplan", "--preset", "llama3.1-8b", "--batch", "1", "--budget", "141GB", "--compiled", "--json"],
        check=False, capture_output=True, text=True, timeout=600, env=os.environ,
    )
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["seq"] == 8192  # the reference's sequence, unasked
    choices = plan["choices"]
    assert len(choices) == 32 and set(choices) <= {"keep", "selective", "full"}
    assert any(c != "keep" for c in choices)  # the optimizer's state alone leaves too little to keep every block
    assert plan["predicted_allocated_bytes"] <= plan["predicted_reserved_bytes"] < H200 == plan["budget_bytes"]


def test_bench_trains_a_reference_preset_at_8192_unasked():
    from trainstack.bench.api import BenchOptions, make_spec

    assert make_spec(BenchOptions(model="llama3.1-8b")).seq == 8192
    assert make_spec(BenchOptions(model="llama3.2-1b", seq=4096)).seq == 4096
    assert make_spec(BenchOptions(model="8b")).seq == 2048  # the plain presets keep their default
