"""Device time per kind of kernel (bench.kernels), on the kernel tables two real H200
profiles recorded (1b, compile+bf16 and compile+bf16+fp8: benchmarks/results/fp8_shapes/breakdown),
and the idle time between kernels on intervals built to overlap."""

from __future__ import annotations

import pytest

from tests.recorded import recorded_kernels
from trainstack.bench.kernels import OTHER, Breakdown, Kernel, breakdown, kind_of, text


@pytest.fixture(scope="module")
def bf16() -> Breakdown:
    return breakdown(recorded_kernels("profile-1b-compile_bf16-b4-s4096.kernels.txt"), steps=2)


@pytest.fixture(scope="module")
def fp8() -> Breakdown:
    return breakdown(recorded_kernels("profile-1b-compile_bf16_fp8-b4-s4096.kernels.txt"), steps=2)


def test_recorded_kernels_are_read():
    assert len(recorded_kernels("profile-1b-compile_bf16_fp8-b4-s4096.kernels.txt")) >= 15


def test_bf16_step_has_no_float8_kernels(bf16):
    assert "matmul fp8" not in bf16.per_kind and "float8 scales, casts" not in bf16.per_kind
    assert max(bf16.per_kind, key=bf16.per_kind.get) == "matmul 16-bit"
    assert bf16.per_kind["attention"] > 0


def test_fp8_step_splits_its_products_and_casts(fp8, bf16):
    assert fp8.per_kind["matmul fp8"] > 0 and fp8.per_kind["float8 scales, casts"] > 0
    # the output projection and the loss stay 16-bit; everything of the blocks' linears is float8
    assert fp8.per_kind["matmul 16-bit"] < fp8.per_kind["matmul fp8"]
    assert fp8.per_kind["matmul fp8"] + fp8.per_kind["matmul 16-bit"] < bf16.per_kind["matmul 16-bit"]
    # the kernel named for its _scaled_mm input is a cast, the fused AdamW update is not
    assert kind_of("triton_poi_fused__scaled_mm__to_copy_clamp_mul_reciprocal_silu_split_t_view_18") == "float8 scales, casts"
    assert kind_of("triton_poi_fused__to_copy_add_copy_copy__div_lerp_mul_pow_reciprocal_rsub_sqrt_sub_0") == "compiled (triton)"


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("nvjet_sm90_qqtst_192x192_128x4_2x1_v_bz_coopB_TNN", "matmul fp8"),
        ("nvjet_sm90_tss_128x256_64x4_2x1_v_badd_coopA_NTN", "matmul 16-bit"),
        ("sm90_xmma_gemm_e4m3bf16_e4m3f32_f32_tn_n_tilesize128x128x128", "matmul fp8"),
        ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", "matmul 16-bit"),
        ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>", "attention"),
        ("Memcpy DtoD (Device -> Device)", "copy / fill"),
        ("some_custom_kernel", OTHER),
    ],
)
def test_kind_of_kernel_names(name, kind):
    assert kind_of(name) == kind


def test_idle_time_is_the_wall_time_no_kernel_covers():
    kernels = [Kernel("gemm_a", 0.0, 10.0), Kernel("triton_b", 5.0, 7.0), Kernel("triton_c", 20.0, 5.0)]
    b = breakdown(kernels, steps=1)
    assert (b.wall_us, b.busy_us, b.idle_us) == (25.0, 17.0, 8.0)
    assert b.per_kind == {"matmul 16-bit": 10.0, "compiled (triton)": 12.0}
    assert list(b.per_kind) == ["compiled (triton)", "matmul 16-bit"]  # largest first
    assert b.to_json()["idle_ms_per_step"] == pytest.approx(0.008)


def test_text_gives_milliseconds_per_step_and_shares(fp8):
    out = text(fp8)
    first = out.splitlines()[0]
    assert first.startswith("2 steps, ") and "ms per step on the device" in first
    row = next(line for line in out.splitlines() if line.startswith("matmul fp8"))
    ms, share = row.split()[2:4]
    assert float(ms) == pytest.approx(fp8.per_kind["matmul fp8"] / 2e3, abs=0.01)
    assert share.endswith("%")
    assert text(breakdown([], steps=2)) == "no device kernels were recorded\n"
