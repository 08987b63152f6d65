"""bench's fp8 modes: the mode parts, which linear layers convert, MFU of float8 rows, the
one-line refusals where float8 training cannot run. Float8 arithmetic itself needs an sm89+
GPU: here torchao's emulation runs the converted model on the CPU; the real path ran on
the H200 (benchmarks/results/bench_h200/fp8; the rows the tests read are a copy under
tests/data/recorded)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from trainstack.bench import fp8  # noqa: E402
from trainstack.bench.device import Dist  # noqa: E402
from trainstack.bench.mfu import flops_per_token, mfu, mfu_fp8  # noqa: E402
from trainstack.bench.peaks import peak_for  # noqa: E402
from trainstack.nn.decoder import ModelConfig, Transformer  # noqa: E402
from trainstack.bench.modes import ModeUnavailable  # noqa: E402
from trainstack.nn.modes import Mode, parse_mode  # noqa: E402
from trainstack.nn.presets import PRESETS  # noqa: E402
from trainstack.bench.report import explain, results_table  # noqa: E402
from trainstack.bench.runner import Measured, RunSpec, summarise  # noqa: E402
from trainstack.cli import main  # noqa: E402
from trainstack.errors import UsageError  # noqa: E402
from tests.clirun import assert_no_traceback  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "data" / "recorded" / "bench_h200" / "fp8"  # a copy of the H200 run's rows
# ffn_dim 8200: the down projection's input (8200) is not a multiple of 16, the fused gate/up (16400) is
ODD_FFN = ModelConfig(dim=2048, n_layers=2, n_heads=16, n_kv_heads=8, ffn_dim=8200, vocab_size=512, max_seq=64)
# one block small enough to train on a CPU with some layers converted in either recipe:
# tensorwise converts all four (each N > 1024); rowwise only the gate/up (K 1088 > 1024, N 4224 > 4096)
SMALL_BLOCK = ModelConfig(dim=1088, n_layers=1, n_heads=8, n_kv_heads=4, ffn_dim=2112, vocab_size=512, max_seq=64)


@pytest.mark.parametrize(
    ("text", "mode", "name"),
    [
        ("fp8", Mode(fp8="tensorwise"), "eager+fp8"),
        ("compile+bf16+fp8", Mode(compile=True, bf16=True, fp8="tensorwise"), "compile+bf16+fp8"),
        ("FP8-TENSORWISE+compile", Mode(compile=True, fp8="tensorwise"), "compile+fp8"),
        ("fp8-rowwise+bf16+compile", Mode(compile=True, bf16=True, fp8="rowwise"), "compile+bf16+fp8-rowwise"),
        ("compile+bf16+fp8+planned", Mode(compile=True, ac="planned", bf16=True, fp8="tensorwise"), "compile+planned+bf16+fp8"),
        ("ac-every-2+fp8-rowwise", Mode(ac="every", every=2, fp8="rowwise"), "ac-every-2+fp8-rowwise"),
        ("bf16+fp8-fastacc+compile", Mode(compile=True, bf16=True, fp8="tensorwise-fastacc"), "compile+bf16+fp8-fastacc"),
    ],
)
def test_fp8_mode_parts(text, mode, name):
    assert parse_mode(text) == mode
    assert parse_mode(text).name == name
    assert parse_mode(name) == mode  # a row's mode name parses back to the same mode


@pytest.mark.parametrize(
    ("text", "message"),
    [("fp8+fp8-rowwise", "more than one fp8 part"), ("fp8-colwise", "unknown mode part 'fp8-colwise'")],
)
def test_bad_fp8_parts_name_what_is_accepted(text, message):
    with pytest.raises(UsageError, match=message) as info:
        parse_mode(text)
    assert "fp8-rowwise" in str(info.value)


def test_conversion_keeps_the_output_projection_and_odd_widths():
    with torch.device("meta"):
        model = Transformer(ODD_FFN)
    plan = fp8.plan_conversion(model, "tensorwise")
    assert plan.converted == (
        "layers.0.attention.wqkv", "layers.0.attention.wo", "layers.0.feed_forward.w13",
        "layers.1.attention.wqkv", "layers.1.attention.wo", "layers.1.feed_forward.w13",
    )  # fmt: skip
    assert plan.kept == {
        "layers.0.feed_forward.w2": "8200x2048 not divisible by 16",
        "layers.1.feed_forward.w2": "8200x2048 not divisible by 16",
        "output": "output projection",
    }
    assert plan.summary() == (
        "float8 tensorwise scaling (torchao): 6 of 9 linear layers; kept in bf16: "
        "layers.*.feed_forward.w2 x2 (8200x2048 not divisible by 16); output (output projection)"
    )


@pytest.mark.parametrize(
    ("recipe", "k", "n", "kept"),
    [
        ("tensorwise", 768, 768, "768x768: too small for float8 tensorwise to pay for its casts (K <= 4096 and N <= 1024)"),
        ("tensorwise", 4096, 1024, "4096x1024: too small for float8 tensorwise to pay for its casts (K <= 4096 and N <= 1024)"),
        ("tensorwise", 768, 1040, None),
        ("tensorwise", 4112, 1024, None),
        ("rowwise", 8192, 2048, "8192x2048: too small for float8 rowwise to pay for its casts (N <= 2048)"),
        ("rowwise", 1024, 16384, "1024x16384: too small for float8 rowwise to pay for its casts (K <= 1024)"),
        ("rowwise", 2048, 3072, "2048x3072: too small for float8 rowwise to pay for its casts (K <= 2048 and N <= 4096)"),
        ("rowwise", 2048, 16384, None),
        ("rowwise", 4096, 4096, None),
    ],
)
def test_size_rule_of_each_recipe(recipe, k, n, kept):
    assert fp8.why_kept(torch.nn.Linear(k, n, bias=False, device="meta"), set(), recipe) == kept


@pytest.mark.parametrize(
    ("preset", "recipe", "converted", "kept"),
    [
        ("8b", "tensorwise", 128, {}),
        ("8b", "rowwise", 128, {}),
        ("3b", "rowwise", 112, {}),
        ("1b", "tensorwise", 64, {}),
        # rowwise on 1b: only the gate/up (2048 -> 16384) is large enough
        ("1b", "rowwise", 16, {"attention.wqkv": "2048x3072", "attention.wo": "2048x2048", "feed_forward.w2": "8192x2048"}),
        # 125m (width 768): the output and down projections are too small for tensorwise
        ("125m", "tensorwise", 24, {"attention.wo": "768x768", "feed_forward.w2": "2048x768"}),
    ],
)
def test_which_preset_layers_convert(preset, recipe, converted, kept):
    with torch.device("meta"):
        model = Transformer(PRESETS[preset])
    plan = fp8.plan_conversion(model, recipe)
    assert len(plan.converted) == converted
    assert plan.kept.pop("output") == "output projection"
    layers = PRESETS[preset].n_layers
    assert len(plan.kept) == layers * len(kept)
    for place, shape in kept.items():
        assert all(plan.kept[f"layers.{i}.{place}"].startswith(f"{shape}: too small for float8 {recipe}") for i in range(layers))


def test_a_model_with_no_layer_to_convert_is_refused_in_one_line():
    # the tiny preset: 2 blocks of width 64, every layer far below either recipe's sizes
    with pytest.raises(ModeUnavailable, match=r"^unavailable: float8 tensorwise would convert none of the model's 9 linear layers \(") as info:
        fp8.convert(Transformer(PRESETS["tiny"]), "tensorwise")
    assert "\n" not in str(info.value)


def test_unknown_recipe_is_refused():
    with pytest.raises(ValueError, match="fp8 recipe 'colwise'; accepted: tensorwise, rowwise, tensorwise-fastacc"):
        fp8.plan_conversion(Transformer(PRESETS["tiny"]), "colwise")


@pytest.mark.parametrize("recipe", fp8.RECIPES)
def test_converted_model_trains_with_emulated_float8(recipe):
    pytest.importorskip("torchao")
    from torchao.float8.float8_linear import Float8Linear

    from trainstack.bench.precision import to_bf16_with_master

    torch.manual_seed(0)
    model = Transformer(SMALL_BLOCK)
    conversion = fp8.convert(model, recipe, emulate=True)
    assert len(conversion.converted) == {"tensorwise": 4, "rowwise": 1, "tensorwise-fastacc": 4}[recipe]
    gemms = {(g.use_fast_accum) for m in model.modules() if isinstance(m, Float8Linear) for g in (m.config.gemm_config_output, m.config.gemm_config_grad_input, m.config.gemm_config_grad_weight)}
    assert gemms == ({True} if recipe.endswith("-fastacc") else {True, False})  # torchao's recipes: fast only in the forward product
    kinds = {name: type(m) for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    assert {n for n, k in kinds.items() if issubclass(k, Float8Linear)} == set(conversion.converted)
    assert {n for n, k in kinds.items() if k is torch.nn.Linear} == set(conversion.kept)
    opt = to_bf16_with_master(model, lr=1e-3, compiled=False)
    tokens = torch.randint(0, SMALL_BLOCK.vocab_size, (2, 33), generator=torch.Generator().manual_seed(0))
    losses = []
    for _ in range(5):
        loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0]  # the same batch five times: float8 layers learn it


def test_float8_needs_a_recent_gpu():
    with pytest.raises(ModeUnavailable, match=r"fp8 needs an NVIDIA GPU of compute capability sm89 or newer; this run is on cpu"):
        fp8.require(torch.device("cpu"))


def test_cli_refuses_fp8_in_one_line_on_a_cpu(capsys):
    assert main(["bench", "--preset", "tiny", "--modes", "compile+bf16+fp8", "--device", "cpu"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--modes compile+bf16+fp8: float8 training needs an NVIDIA GPU of compute capability sm89" in err
    assert_no_traceback(err)


def test_cli_names_the_extra_when_torchao_is_missing(monkeypatch, capsys):
    from trainstack.bench import api

    for module in (fp8, api):  # where it is defined, and where bench's check calls it
        monkeypatch.setattr(module, "torchao_missing", lambda: True)
    assert main(["bench", "--preset", "tiny", "--parity", "bf16,bf16+fp8"]) == 6
    err = " ".join(capsys.readouterr().err.split())
    assert "float8 training needs the 'torchao' package" in err and "trainstack[fp8]" in err
    assert_no_traceback(err)


def test_fp8_peaks():
    h200, a100 = peak_for("NVIDIA H200"), peak_for("NVIDIA A100-SXM4-80GB")
    assert (h200.bf16_tflops, h200.fp8_tflops) == (989, 1979)
    assert a100.fp8_tflops is None
    assert mfu_fp8(1000.0, PRESETS["1b"], 4096, a100) is None


def test_fp8_row_mfu_on_both_peaks():
    """The H200 row of the 1b compile+bf16+fp8 run, summarised again from its step times."""
    rows = [json.loads(line) for line in (RESULTS / "bench-1b-b4-s4096.jsonl").read_text().splitlines()]
    recorded = next(r for r in rows if r["mode"] == "compile+bf16+fp8")
    cfg = PRESETS["1b"]
    spec = RunSpec("1b", cfg, mode=parse_mode("compile+bf16+fp8"), batch=4, seq=4096, steps=6, warmup=2)
    step = recorded["step_ms_median"] / 1e3
    measured = Measured([step] * 6, recorded["warmup_s"], [recorded["loss_first"], recorded["loss_final"]], None, None)
    row = {"device_type": "cuda", "device_name": "NVIDIA H200", "flops_per_token": flops_per_token(cfg, 4096)}
    figures = summarise(spec, measured, row, Dist())
    tokens = 4 * 4096 / step
    assert figures["mfu"] == pytest.approx(tokens * flops_per_token(cfg, 4096) / 989e12)
    assert figures["mfu_fp8"] == pytest.approx(figures["mfu"] * 989 / 1979)
    assert figures["mfu"] == pytest.approx(recorded["mfu"]) and figures["mfu_fp8"] == pytest.approx(recorded["mfu_fp8"])
    assert figures["peak_fp8_tflops"] == 1979
    assert round(figures["mfu"], 3) == 0.654 and round(figures["mfu_fp8"], 3) == 0.327
    bf16 = summarise(RunSpec("1b", cfg, mode=parse_mode("compile+bf16"), batch=4, seq=4096), measured, row, Dist())
    assert "mfu_fp8" not in bf16  # only float8 rows carry the second figure
    assert mfu(tokens, cfg, 4096, peak_for("NVIDIA H200")) == pytest.approx(figures["mfu"])


def test_report_shows_both_mfu_figures_and_what_stayed_bf16():
    rows = [json.loads(line) for line in (RESULTS / "bench-1b-b4-s4096.jsonl").read_text().splitlines()]
    from rich.console import Console

    console = Console(width=250, record=True)
    console.print(results_table(rows))
    text = console.export_text()
    assert "65.4%" in text and "32.7%" in text and "59.0%" in text
    lines = explain(rows)
    assert any("'MFU fp8 peak': float8 rows against the dense float8 peak 1979 TFLOP/s" in line for line in lines)
    assert "compile+bf16+fp8: float8 tensorwise scaling (torchao): 64 of 65 linear layers; kept in bf16: output (output projection)" in lines


def test_report_shows_the_mfu_figures_of_a_step_time_made_here():
    """The 1b compile+bf16+fp8 row summarised from a 200 ms step made here: 4 x 4096 tokens in
    0.2 s are 81,920 tokens/s; times 9,025,499,136 FLOPs per token over 989 TFLOP/s that is
    74.76% MFU, and over the float8 peak of 1979 TFLOP/s 37.36%. The table shows those."""
    cfg = PRESETS["1b"]
    rows = [json.loads(line) for line in (RESULTS / "bench-1b-b4-s4096.jsonl").read_text().splitlines()]
    at = next(i for i, r in enumerate(rows) if r["mode"] == "compile+bf16+fp8")
    spec = RunSpec("1b", cfg, mode=parse_mode("compile+bf16+fp8"), batch=4, seq=4096, steps=6, warmup=2)
    measured = Measured([0.2] * 6, 10.0, [12.0, 11.0], None, None)
    row = {"device_type": "cuda", "device_name": "NVIDIA H200", "flops_per_token": flops_per_token(cfg, 4096)}
    figures = summarise(spec, measured, row, Dist())
    assert figures["tokens_per_s_per_gpu"] == pytest.approx(81_920)
    assert figures["mfu"] == pytest.approx(81_920 * 9_025_499_136 / 989e12) == pytest.approx(0.747592, rel=1e-6)
    assert figures["mfu_fp8"] == pytest.approx(81_920 * 9_025_499_136 / 1979e12) == pytest.approx(0.373607, rel=1e-6)
    rows[at] = rows[at] | figures
    from rich.console import Console

    console = Console(width=250, record=True)
    console.print(results_table(rows))
    fp8_line = next(line for line in console.export_text().splitlines() if "compile+bf16+fp8 " in line)
    assert "74.8%" in fp8_line and "37.4%" in fp8_line and "81,920" in fp8_line, fp8_line
    assert "65.4%" not in fp8_line  # the recorded figure is gone with the recorded step time


def _max_reductions_per_graph(model, tokens) -> list[int]:
    """How many full max reductions (float8 scales) each compiled graph of one training step
    runs: [forward, backward], as the compiler's post-grad graphs have them."""
    import torch._inductor.config as inductor_config

    counts: list[int] = []

    def count(graph) -> None:
        counts.append(sum(1 for node in graph.nodes if node.op == "call_function" and node.target is torch.ops.aten.max.default))

    torch._dynamo.reset()
    with inductor_config.patch(post_grad_custom_pre_pass=count):
        torch.compile(model)(tokens[:, :-1], tokens[:, 1:]).backward()
    torch._dynamo.reset()
    return counts


def test_compiled_backward_reduces_only_the_gradients_to_scales():
    """Each converted layer's scales: its input and weight in the forward, its output's
    gradient in the backward. torchao's Float8Linear fed a (batch, sequence, features) input
    reduces that input a second time in the backward (the compiler cannot tell the two views
    apart); convert() feeds it a matrix, and the compiler merges the two reductions."""
    pytest.importorskip("torchao")
    from torchao.float8.float8_linear import Float8Linear

    tokens = torch.randint(0, SMALL_BLOCK.vocab_size, (2, 33), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    model = Transformer(SMALL_BLOCK)
    layers = len(fp8.convert(model, "tensorwise", emulate=True).converted)
    assert _max_reductions_per_graph(model, tokens) == [2 * layers, layers]

    for module in model.modules():  # torchao's own class again: the input's reduction runs twice
        if isinstance(module, Float8Linear):
            module.__class__ = Float8Linear
    forward, backward = _max_reductions_per_graph(model, tokens)
    assert forward + backward > 3 * layers


def test_flat_input_changes_no_result():
    """The matrix-fed layer computes what torchao's does: same loss, same gradients, bit for bit."""
    pytest.importorskip("torchao")
    from torchao.float8.float8_linear import Float8Linear

    tokens = torch.randint(0, SMALL_BLOCK.vocab_size, (2, 33), generator=torch.Generator().manual_seed(0))
    results = []
    for flat in (True, False):
        torch.manual_seed(0)
        model = Transformer(SMALL_BLOCK)
        fp8.convert(model, "tensorwise", emulate=True)
        if not flat:
            for module in model.modules():
                if isinstance(module, Float8Linear):
                    module.__class__ = Float8Linear
        loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        results.append((loss.detach(), [p.grad for p in model.parameters()]))
    (loss_flat, grads_flat), (loss_3d, grads_3d) = results
    assert torch.equal(loss_flat, loss_3d)
    assert all(torch.equal(a, b) for a, b in zip(grads_flat, grads_3d, strict=True))
