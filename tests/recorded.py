"""Real GPU outputs kept under tests/data/recorded (copies of benchmark results): the device kernels of
a recorded profile table, laid end to end."""

from __future__ import annotations

import re
from pathlib import Path

from trainstack.bench.kernels import Kernel

PROFILES = Path(__file__).resolve().parent / "data" / "recorded" / "fp8_shapes" / "breakdown" / "profiles"
UNIT_US = {"us": 1.0, "ms": 1e3, "s": 1e6}


def recorded_kernels(name: str) -> list[Kernel]:
    """The device kernels of a recorded profile table (rows with no CPU time of their own),
    each with its summed device time, laid end to end."""
    kernels, start = [], 0.0
    for line in (PROFILES / name).read_text().splitlines():
        cols = re.split(r"\s{2,}", line.strip())
        if len(cols) != 11 or cols[1] != "0.00%":
            continue
        value, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", cols[6]).groups()
        kernels.append(Kernel(cols[0], start, float(value) * UNIT_US[unit]))
        start += kernels[-1].duration_us
    return kernels
