"""Where a bench step's time goes, per class (bench.kernels, bench.profile, bench.ceilings):
measured for real on the CPU with torch (the classes and idle sum to the step), and on the
kernel tables of real H200 profiles (benchmarks/results/fp8_shapes/breakdown) for the GPU's
classes, rates and ceilings (the H200's recorded health result)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.clirun import assert_no_traceback
from tests.recorded import recorded_kernels
from trainstack.bench.ceilings import ceilings, read_health, with_rates
from trainstack.bench.device import Dist
from trainstack.bench.kernels import (
    ATTN_BWD,
    ATTN_FWD,
    CLASSES,
    COMM,
    ELEMENTWISE,
    GEMM,
    OPTIMIZER,
    OTHER,
    RECOMPUTE,
    Kernel,
    breakdown,
    class_of,
)
from trainstack.bench.mfu import class_work
from trainstack.bench.peaks import peak_for
from trainstack.bench.runner import Measured, RunSpec, summarise
from trainstack.errors import SpecError
from trainstack.nn.modes import parse_mode
from trainstack.nn.presets import preset

RESULTS = Path(__file__).resolve().parent / "data" / "recorded"  # copies of benchmarks/results/ files
HEALTH = RESULTS / "health_h200" / "health_h200_level2.json"


@pytest.fixture(scope="module")
def cpu_rows() -> dict[str, dict]:
    """Real bench runs of the tiny preset on the CPU: plain eager, and with every block recomputed."""
    from trainstack.bench.runner import RunSpec, run
    from trainstack.nn.modes import parse_mode

    return {m: run(RunSpec("tiny", preset("tiny"), mode=parse_mode(m), batch=2, seq=64, steps=2, warmup=1, device="cpu"))
            for m in ("eager", "ac-full")}


def test_cpu_breakdown_sums_to_the_step(cpu_rows):
    for mode, row in cpu_rows.items():
        b = row["breakdown"]
        assert b["source"] == "CPU ops" and b["steps"] == 2
        shares = sum(c["share"] for c in b["classes"].values()) + b["idle_share"]
        assert shares == pytest.approx(1.0, abs=1e-6), mode
        ms = sum(c["ms_per_step"] for c in b["classes"].values()) + b["idle_ms_per_step"]
        assert ms == pytest.approx(b["wall_ms_per_step"], rel=1e-6)
        assert set(b["classes"]) <= set(CLASSES)
        assert b["classes"][GEMM]["share"] > 0 and b["classes"][GEMM]["tflops"] > 0
        assert b["classes"][OPTIMIZER]["gbps"] > 0
        assert b["classes"][ATTN_FWD]["ms_per_step"] > 0 and b["classes"][ATTN_BWD]["ms_per_step"] > 0
        assert b["idle_ms_per_step"] > 0  # Python between the ops is measured, not assumed away
        # no GPU, no ceiling: the rates stand alone
        assert b["ceilings"]["gemm_tflops"] is None and b["classes"][GEMM]["of_ceiling"] is None


def test_cpu_recompute_is_its_own_class(cpu_rows):
    assert RECOMPUTE not in cpu_rows["eager"]["breakdown"]["classes"]
    full = cpu_rows["ac-full"]["breakdown"]["classes"]
    assert full[RECOMPUTE]["ms_per_step"] > 0
    # every block runs its forward again in backward, products and attention included: counted
    # by op (the times of a shared CPU are too noisy to compare), over 15% of the step's ops
    ops = sum(c["kernels_per_step"] for c in full.values())
    assert full[RECOMPUTE]["kernels_per_step"] > 0.15 * ops
    eager = cpu_rows["eager"]["breakdown"]["classes"]
    assert ops - full[RECOMPUTE]["kernels_per_step"] == pytest.approx(sum(c["kernels_per_step"] for c in eager.values()), rel=0.1)


@pytest.fixture(scope="module")
def bf16():
    return breakdown(recorded_kernels("profile-1b-compile_bf16-b4-s4096.kernels.txt"), steps=2)


def test_recorded_h200_kernels_fall_in_their_classes(bf16):
    cls = bf16.per_class
    assert max(cls, key=cls.get) == GEMM
    # cuDNN's flash backward (and its dO.O and dQ conversion) against its forward
    assert cls[ATTN_BWD] > cls[ATTN_FWD] > 0
    # the compiled AdamW update is the optimizer, not the block's fused glue
    assert cls[OPTIMIZER] > 0 and cls[ELEMENTWISE] > cls[OPTIMIZER]
    assert sum(cls.values()) + bf16.idle_us == pytest.approx(bf16.wall_us)
    names = {
        "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT": GEMM,
        "nvjet_sm90_qrtst_128x160_128x5_1x2_h_bz_coopA_algo2_TNT": GEMM,
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0": ATTN_FWD,
        "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1_kernel0_0": ATTN_BWD,
        "void cudnn::fusion::compute_dot_do_o_specialized<true, 64>(void const*, void const*, void*, void*, unsigned in": ATTN_BWD,
        "triton_poi_fused__to_copy_add_copy_copy__div_lerp_mul_pow_reciprocal_rsub_sqrt_sub_0": OPTIMIZER,
        "triton_per_fused__fused_rms_norm__fused_rms_norm_backward__unsafe_view_add_view_3": ELEMENTWISE,
        "triton_poi_fused__scaled_mm__to_copy_clamp_mul_reciprocal_silu_split_t_view_18": ELEMENTWISE,
        "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<c10::BFloat16, float, 32u, 32u, 25": ELEMENTWISE,
        "Memcpy DtoD (Device -> Device)": ELEMENTWISE,
        "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)": COMM,
        "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)": COMM,
        "some_unknown_kernel": OTHER,
    }
    for name, expected in names.items():
        assert class_of(name) == expected, name


def test_phase_decides_over_the_name():
    gemm = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
    attention = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0"
    assert class_of(gemm, "recompute") == RECOMPUTE and class_of(attention, "recompute") == RECOMPUTE
    assert class_of(attention, "backward") == ATTN_BWD and class_of(attention, "forward") == ATTN_FWD
    assert class_of("triton_poi_fused_add_mul_0", "optimizer") == OPTIMIZER
    assert class_of("aten::mm", "forward", cpu=True) == GEMM and class_of("aten::mul", "forward", cpu=True) == ELEMENTWISE


def test_overlapping_kernels_are_counted_once():
    # a GEMM of 10 us, an all-gather from 5 to 15 us beside it, then 5 us idle, a copy of 5 us
    ks = [Kernel("nvjet_sm90_tst_x", 0, 10), Kernel("ncclDevKernel_AllGather_RING", 5, 10), Kernel("Memcpy DtoD", 20, 5)]
    b = breakdown(ks, steps=1)
    assert b.wall_us == 25 and b.busy_us == 20 and b.idle_us == 5
    assert b.per_class == {GEMM: 7.5, ELEMENTWISE: 5.0, COMM: 7.5}
    assert b.class_kernel_us[GEMM] == 10 and b.class_kernel_us[COMM] == 10


def test_the_ranges_the_profiler_lays_on_the_device_timeline_are_not_kernels():
    """On a GPU the profiler copies each marked range (the step's phases, a compiled region) onto
    the device's timeline, spanning the kernels it holds. Counted as kernels they split every
    instant with the real ones: on the 1b preset (H100, benchmarks/results/bench_h200_reference)
    10 such "kernels" a step took 23% of it as "other"."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent

    from trainstack.bench.profile import is_kernel

    def event(i, name, start, end, **kw):
        return FunctionEvent(i, name, 0, start, end, device_type=DeviceType.CUDA, **kw)

    gemm = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
    attention = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0"
    events = [event(1, "trainstack.forward", 0, 150, is_user_annotation=True), event(2, gemm, 0, 100), event(3, attention, 100, 150),
              event(4, "Torch-Compiled Region: 0/0", 0, 150, is_user_annotation=True), event(5, "Memset (Device)", 150, 160)]
    kernels = [Kernel(e.name, e.time_range.start, e.time_range.elapsed_us()) for e in events if is_kernel(e)]
    assert [k.name for k in kernels] == [gemm, attention, "Memset (Device)"]
    b = breakdown(kernels, steps=1)
    assert OTHER not in b.per_class and b.per_class[GEMM] == 100 and b.busy_us == 160
    # what the old reading did: every device-side event a kernel, the ranges "other"
    every = breakdown([Kernel(e.name, e.time_range.start, e.time_range.elapsed_us()) for e in events], steps=1)
    assert every.per_class[OTHER] > every.per_class[GEMM] / 2


def test_health_result_gives_the_ceilings(bf16):
    health = read_health(HEALTH)
    assert health["gemm_tflops"] == pytest.approx(766.411) and health["copy_gbps"] == pytest.approx(4255.747)
    limits = ceilings(peak_for("NVIDIA H200"), health)
    assert limits["gemm_tflops"] == pytest.approx(766.411) and "gemm.bf16 measured" in limits["gemm_source"]
    # the 1b preset's recorded step: batch 4 x seq 4096
    work = class_work(preset("1b"), batch=4, seq=4096, params=preset("1b").total_params())
    # by hand: forward QK^T and PV over the causal half, 2 * L * d * s * tokens; backward 5 products to the forward's 2
    cfg = preset("1b")
    assert work[ATTN_FWD]["flops"] == 2 * cfg.n_layers * cfg.dim * 4096 * (4 * 4096)
    assert work[ATTN_BWD]["flops"] == 5 * work[ATTN_FWD]["flops"] // 2
    rated = with_rates(bf16.to_json(), work, limits)["classes"]
    assert 0.8 < rated[GEMM]["of_ceiling"] < 1.0  # cuBLAS's products near the measured GEMM rate
    assert 0.2 < rated[ATTN_FWD]["of_ceiling"] < 1.0
    assert 0 < rated[OPTIMIZER]["of_ceiling"] < 1.0 and rated[OPTIMIZER]["gbps"] > 0
    assert "tflops" not in rated[ELEMENTWISE] and "gbps" not in rated[ELEMENTWISE]


def test_without_health_the_datasheet_is_named():
    limits = ceilings(peak_for("NVIDIA H200"), None)
    assert limits["gemm_tflops"] == 989 and limits["gemm_source"] == "datasheet dense bf16 peak of H200 SXM"
    assert limits["copy_gbps"] == 4800 and "datasheet memory bandwidth" in limits["copy_source"]
    fp8 = ceilings(peak_for("NVIDIA H200"), read_health(HEALTH), fp8=True)
    assert fp8["gemm_tflops"] == 1979 and "float8" in fp8["gemm_source"] and "measured" in fp8["copy_source"]


@pytest.mark.parametrize("text, field", [
    ("{", "not valid JSON"),
    ('{"checks": 3}', "checks: absent or not a list"),
    ('{"checks": [{"name": "gemm.bf16", "value": "fast", "unit": "TFLOP/s"}]}', "checks[0] (gemm.bf16)"),
    ('{"checks": [{"name": "copy.device", "value": 4000, "unit": "MB/s"}]}', "checks[0] (copy.device)"),
    ('{"checks": [{"name": "gemm.bf16", "value": 1e300, "unit": "TFLOP/s"}]}', "checks[0] (gemm.bf16)"),
    ('{"checks": [{"name": "temperature", "value": 40, "unit": "C"}]}', "no gemm.bf16 or copy.device check"),
])
def test_bad_health_result_is_one_line(tmp_path, text, field):
    path = tmp_path / "health.json"
    path.write_text(text)
    with pytest.raises(SpecError) as caught:
        read_health(path)
    message = str(caught.value)
    assert message.startswith(f"--health {path}") and field in message and "accepted:" in message and "\n" not in message



TINY = ["-m", "tiny", "--seq", "64", "--batch", "2", "--steps", "2", "--warmup", "1", "--device", "cpu"]


@pytest.fixture(scope="module")
def cli_ablation(tmp_path_factory):
    """bench's CLI on the CPU, each mode in a fresh process, with the H200's recorded health result."""
    import contextlib
    import io

    from trainstack.cli import main

    out = tmp_path_factory.mktemp("bench")
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        code = main(["bench", *TINY, "--ablation", "--modes", "eager,ac-full", "--out", str(out), "--health", str(HEALTH)])
    return code, out / "bench-tiny-b2-s64.jsonl", out / "bench-tiny-b2-s64.png", text.getvalue()


def test_every_row_carries_its_breakdown_in_json_report_and_chart(cli_ablation):
    import json
    import struct

    code, jsonl, png, _ = cli_ablation
    assert code == 0
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    for row in rows:
        b = row["breakdown"]
        assert b["classes"][GEMM]["share"] > 0
        assert sum(c["share"] for c in b["classes"].values()) + b["idle_share"] == pytest.approx(1.0, abs=1e-6)
        assert b["ceilings"]["gemm_tflops"] is None  # the health result is a GPU's: no ceiling of a CPU
        assert row["flops_per_token_causal"] < row["flops_per_token"]
    assert RECOMPUTE in rows[1]["breakdown"]["classes"] and RECOMPUTE not in rows[0]["breakdown"]["classes"]
    width = struct.unpack(">I", png.read_bytes()[16:20])[0]
    assert width == 16 * 110  # the third panel: each mode's step by class


def test_report_shows_the_classes_and_both_flop_counts(cli_ablation):
    *_, out = cli_ablation
    text = " ".join(out.split())
    assert "time per step by class" in text and "profiled step ms" in text and "attention backward" in text and "recompute" in text and "idle" in text
    assert "as Megatron-LM and NeMo count it" in text and "causal half: 6*N + 6*L*d*T" in text
    assert "GEMM: 6 * N * tokens" in text


def test_compare_puts_the_breakdowns_side_by_side(cli_ablation, tmp_path, capsys):
    import json

    from trainstack.cli import main

    _, a, _, _ = cli_ablation
    b = tmp_path / "b.jsonl"
    rows = [json.loads(line) for line in a.read_text().splitlines()]
    rows[0]["breakdown"]["classes"][GEMM]["share"] = 0.123456  # B's eager row: a GEMM share of its own
    b.write_text("".join(json.dumps(r) + "\n" for r in rows))
    capsys.readouterr()
    assert main(["bench", "--compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "time per step by class, A → B" in out
    gemm = [line for line in out.splitlines() if " GEMM " in line]
    assert len(gemm) == 2 and "12.3%" in gemm[0]  # eager: A's share beside B's 12.3%
    assert main(["bench", "--compare", str(a), str(b), "--json"]) == 0
    pairs = json.loads(capsys.readouterr().out)["pairs"]
    assert pairs[0]["breakdown_shares"][GEMM]["b"] == pytest.approx(0.123456)
    assert pairs[1]["breakdown_shares"][RECOMPUTE]["a"] > 0


def test_compare_refuses_a_breakdown_it_cannot_read(cli_ablation, tmp_path, capsys):
    import json

    from trainstack.cli import main

    _, a, _, _ = cli_ablation
    row = json.loads(a.read_text().splitlines()[0])
    row["breakdown"]["classes"]["<script>"] = {"share": 0.1}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(row) + "\n")
    assert main(["bench", "--compare", str(a), str(bad)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{bad}: row 1: breakdown: class '<script>'; accepted: GEMM," in err
    assert_no_traceback(err)


def test_bad_health_result_stops_bench_before_any_step(tmp_path):
    import os
    import subprocess
    import sys

    bad = tmp_path / "health.json"
    bad.write_text('{"checks": [{"name": "gemm.bf16", "value": -1, "unit": "TFLOP/s"}]}')
    done = subprocess.run([sys.executable, "-m", "trainstack", "bench", *TINY, "--health", str(bad), "--out", str(tmp_path)],
                          check=False, capture_output=True, text=True, timeout=120, env=os.environ)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: --health {bad}: checks[0] (gemm.bf16)")
    assert not list(tmp_path.glob("*.jsonl"))



def test_a_step_of_micro_batches_is_rated_over_all_its_tokens():
    """The 8B row recorded on an H100 (16 micro-batches of 8192 tokens a step): its profiled
    step's products are rated over the step's 131,072 tokens, not one micro-batch's (a rate of
    45 TFLOP/s before); what cuBLAS achieved lies under the dense bf16 peak and above half of it."""
    recorded = json.loads((RESULTS / "offload_8b" / "planned" / "bench-llama3.1-8b-b1-s8192.jsonl").read_text().splitlines()[-1])
    cfg = preset("llama3.1-8b")
    spec = RunSpec("llama3.1-8b", cfg, mode=parse_mode(recorded["mode"]), batch=1, seq=8192, steps=10, warmup=1, accum=16)
    raw = {"classes": {name: {k: v for k, v in c.items() if k not in ("tflops", "gbps", "of_ceiling")}
                       for name, c in recorded["breakdown"]["classes"].items()}}
    measured = Measured([recorded["step_ms_median"] / 1e3] * 10, recorded["warmup_s"], [recorded["loss_first"], recorded["loss_final"]],
                        None, None, extra={"breakdown": raw, "params_per_rank": recorded["params_per_rank"]})
    row = {"device_type": "cuda", "device_name": recorded["device_name"], "params": recorded["params"], "flops_per_token": recorded["flops_per_token"]}
    rated = summarise(spec, measured, row, Dist())["breakdown"]["classes"]
    gemm_ms = raw["classes"][GEMM]["kernel_ms_per_step"]
    assert rated[GEMM]["tflops"] == pytest.approx(6 * cfg.non_embedding_params() * 16 * 8192 / (gemm_ms * 1e-3) / 1e12)
    assert 0.5 < rated[GEMM]["of_ceiling"] < 1.0
    assert rated[ATTN_BWD]["tflops"] > 300
