"""The GPU peak table (``data/gpu_peaks.toml``): each GPU's dense bf16 and float8 tensor-core
peaks and memory bandwidth, with the datasheet each comes from. Pure: reads package data."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from functools import cache
from importlib import resources

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib


@dataclass(frozen=True)
class GpuPeak:
    name: str
    match: str
    bf16_tflops: float
    source: str
    fp8_tflops: float | None = None  # dense float8 tensor-core peak; None where the GPU has none
    hbm_gbps: float | None = None  # memory bandwidth, GB/s


@cache
def gpu_peaks() -> tuple[GpuPeak, ...]:
    text = resources.files("trainstack.bench").joinpath("data/gpu_peaks.toml").read_text(encoding="utf-8")
    return tuple(GpuPeak(**row) for row in tomllib.loads(text)["gpu"])


def peak_for(device_name: str) -> GpuPeak | None:
    """The table row for a device name such as 'NVIDIA H200'; None when the GPU is not in the table."""
    for row in gpu_peaks():
        if re.search(row.match, device_name):
            return row
    return None
