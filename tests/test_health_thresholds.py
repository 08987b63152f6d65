"""Thresholds: the verdict of a limit, the profile per GPU model, overlays and bad files."""

from __future__ import annotations

import pytest

from trainstack.errors import SpecError
from trainstack.health.schema import Status
from trainstack.health.thresholds import Limit, load_thresholds


@pytest.mark.parametrize(
    ("value", "expected"),
    [(800, Status.ok), (710, Status.ok), (709.9, Status.warn), (590, Status.warn), (589, Status.critical)],
)
def test_lower_bounds(value, expected):
    assert Limit(warn_below=710, critical_below=590).evaluate(value) is expected


@pytest.mark.parametrize(("value", "expected"), [(0, Status.ok), (1, Status.critical)])
def test_upper_bound_zero_tolerance(value, expected):
    assert Limit(critical_above=0).evaluate(value) is expected


def test_no_bound_is_ok_and_described_empty():
    assert Limit().evaluate(-1e9) is Status.ok
    assert Limit().describe() == ""
    assert Limit(warn_above=85, critical_above=92).describe() == "> 85 warn, > 92 critical"


@pytest.mark.parametrize(
    ("nvml_name", "profile"),
    [
        ("NVIDIA H200", "h200"),
        ("NVIDIA H100 80GB HBM3", "h100_sxm"),
        ("NVIDIA A100-SXM4-80GB", "a100_sxm"),
        ("NVIDIA A100-SXM4-40GB", "a100_sxm"),
        ("NVIDIA H200 NVL", "default"),  # a PCIe card with other limits: not matched as an SXM part
        ("NVIDIA GeForce RTX 4090", "default"),
        (None, "default"),
    ],
)
def test_profile_follows_the_nvml_name(nvml_name, profile):
    t = load_thresholds(nvml_name)
    assert t.profile == profile
    assert t.shm_gib.critical_below == 0.5  # [default] always underneath
    if profile == "default":
        assert t.gemm_bf16_tflops == Limit()


def test_every_model_section_sets_the_gpu_limits():
    for name in ("NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"):
        t = load_thresholds(name)
        for field in ("gemm_bf16_tflops", "copy_gbps", "h2d_gbps", "d2h_gbps", "allreduce_busbw_gbps",
                      "sustained_gemm_tflops"):
            limit = getattr(t, field)
            assert limit.warn_below > limit.critical_below > 0, (name, field)
        assert t.nvlink_links


def test_override_file_lays_over_default_and_model(tmp_path):
    f = tmp_path / "site.toml"
    f.write_text(
        '[default]\nshm_gib = { warn_below = 64.0 }\nmin_driver = "570.86.15"\n'
        '[models.h200]\nmatch = "H200"\ngemm_bf16_tflops = { warn_below = 750 }\n'
    )
    t = load_thresholds("NVIDIA H200", f)
    assert t.shm_gib == Limit(warn_below=64.0, critical_below=0.5)  # one bound changed, the other kept
    assert t.gemm_bf16_tflops == Limit(warn_below=750, critical_below=590)
    assert t.min_driver == "570.86.15"
    assert load_thresholds("NVIDIA A100-SXM4-80GB", f).gemm_bf16_tflops.warn_below == 250


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[default]\nshm_gib = { warn_below = 'lots' }\n", "field 'shm_gib.warn_below'"),
        ("[default]\nshm_gb = { warn_below = 1 }\n", "field 'shm_gb'"),
        ("[limits]\nx = 1\n", "unknown top-level table 'limits'"),
        ("[models.x]\ngemm_bf16_tflops = { warn_below = 1 }\n", "[models.x] needs match"),
        ("[models.x]\nmatch = '('\n", "[models.x] match is not a regular expression"),
        ("[default\n", "not valid TOML"),
    ],
)
def test_bad_override_names_file_and_field(tmp_path, text, needle):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(SpecError) as info:
        load_thresholds("NVIDIA H200", f)
    message = str(info.value)
    assert str(f) in message and needle in message
    assert "\n" not in message


def test_missing_override_file(tmp_path):
    with pytest.raises(SpecError, match="cannot read thresholds file"):
        load_thresholds(None, tmp_path / "absent.toml")
