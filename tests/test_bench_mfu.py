"""The FLOPs-per-token formula against a hand count, the peak table, MFU."""

from __future__ import annotations

import re

import pytest

from trainstack.bench.mfu import FORMULA, FORMULA_CAUSAL, flops_per_token, flops_per_token_causal, mfu
from trainstack.bench.peaks import gpu_peaks, peak_for
from trainstack.nn.presets import PRESETS


def test_flops_per_token_by_hand_for_1b():
    # 1b: d=2048, L=16, 32 heads of 64, 8 KV heads (kv dim 512), FFN 8192, vocab 128256
    attention = 2048 * 2048 + 2048 * 512 + 2048 * 512 + 2048 * 2048  # q, k, v, o
    ffn = 3 * 2048 * 8192  # w1, w3, w2
    norms = 2 * 2048
    n = 16 * (attention + ffn + norms) + 2048 + 2048 * 128256  # blocks, final norm, output projection
    assert PRESETS["1b"].non_embedding_params() == n == 1_235_814_400
    # 6N for the matrix products, 12*L*d*T for attention scores and values at T = 4096
    assert flops_per_token(PRESETS["1b"], 4096) == 6 * n + 12 * 16 * 2048 * 4096 == 9_025_499_136


def test_mfu_against_a_hand_computation():
    h200 = peak_for("NVIDIA H200")
    # 60,000 tokens/s of 1b at T=4096: 60e3 * 9.025499136e9 / 989e12
    assert mfu(60_000, PRESETS["1b"], 4096, h200) == pytest.approx(0.547553, rel=1e-5)


@pytest.mark.parametrize(
    ("device", "table_name", "tflops"),
    [
        ("NVIDIA H200", "H200 SXM", 989),
        ("NVIDIA H200 NVL", "H200 NVL", 835),
        ("NVIDIA GH200 480GB", "GH200", 989),
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 989),
        ("NVIDIA H100 PCIe", "H100 PCIe", 756),
        ("NVIDIA A100-SXM4-80GB", "A100", 312),
        ("NVIDIA L4", "L4", 121),
        ("NVIDIA L40S", "L40S", 362),
    ],
)
def test_peak_table(device, table_name, tflops):
    row = peak_for(device)
    assert (row.name, row.bf16_tflops) == (table_name, tflops)
    assert row.source.startswith("https://")


def test_unknown_gpu_has_no_peak_and_no_mfu():
    assert peak_for("Tesla T4") is None
    assert mfu(1000.0, PRESETS["tiny"], 64, None) is None


def test_every_table_row_is_complete():
    assert all(row.bf16_tflops > 0 and row.match for row in gpu_peaks())


def _formula_value(formula: str, *, n: int, layers: int, dim: int, seq: int) -> int:
    """The arithmetic a formula string states (``6*N + 12*L*d*T``), evaluated by hand."""
    expression = re.search(r"(\d+\*N(?: \+ \d+\*L\*d\*T)?)", formula).group(1)
    total = 0
    for term in expression.split(" + "):
        factors = term.split("*")
        value = int(factors[0])
        for name in factors[1:]:
            value *= {"N": n, "L": layers, "d": dim, "T": seq}[name]
        total += value
    return total


@pytest.mark.parametrize("name", ["tiny", "125m", "8b"])
@pytest.mark.parametrize("seq", [64, 8192])
def test_the_printed_formulas_are_the_ones_computed(name, seq):
    """What FORMULA and FORMULA_CAUSAL tell a reader is what flops_per_token and
    flops_per_token_causal compute, on other shapes than the 1b hand count."""
    cfg = PRESETS[name]
    shape = dict(n=cfg.non_embedding_params(), layers=cfg.n_layers, dim=cfg.dim, seq=seq)
    assert flops_per_token(cfg, seq) == _formula_value(FORMULA, **shape)
    assert flops_per_token_causal(cfg, seq) == _formula_value(FORMULA_CAUSAL, **shape)


def test_attention_counts_the_full_score_matrix_twice_the_causal_half():
    # 8b: L=32, d=4096; one more token of context adds 12*L*d FLOPs per token, the causal half 6*L*d
    cfg = PRESETS["8b"]
    assert flops_per_token(cfg, 4097) - flops_per_token(cfg, 4096) == 12 * 32 * 4096 == 1_572_864
    assert flops_per_token_causal(cfg, 4097) - flops_per_token_causal(cfg, 4096) == 6 * 32 * 4096
    # at no context at all both are 6 FLOPs per non-embedding weight
    assert flops_per_token(cfg, 0) == flops_per_token_causal(cfg, 0) == 6 * cfg.non_embedding_params()


def test_the_printed_formulas_count_attention_twice_the_causal_half():
    """What the two printed formulas say, evaluated: equal at no context (6 FLOPs a weight),
    and past it FORMULA's attention term twice FORMULA_CAUSAL's: the full score matrix
    against its causal half, as flops_per_token and flops_per_token_causal compute."""
    def at(formula: str, seq: int) -> int:
        return _formula_value(formula, n=1000, layers=2, dim=8, seq=seq)

    assert at(FORMULA, 0) == at(FORMULA_CAUSAL, 0) == 6000
    assert at(FORMULA, 64) - at(FORMULA, 0) == 2 * (at(FORMULA_CAUSAL, 64) - at(FORMULA_CAUSAL, 0)) == 12 * 2 * 8 * 64
