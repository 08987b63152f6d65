"""What a breakdown's classes achieve against the GPU's ceilings.

The ceilings are the GPU's measured figures where a health result is given (``trainstack
health --level 2 --json``: its ``gemm.bf16`` TFLOP/s and ``copy.device`` GB/s), else the
datasheet's (dense bf16 or float8 peak, memory bandwidth: ``data/gpu_peaks.toml``), each
named as such. Pure: reads JSON text and numbers, imports no torch.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

from trainstack import grammar
from trainstack.errors import SpecError
from trainstack.fsutil import describe_os_error, loads_strict, read_regular

if TYPE_CHECKING:
    from trainstack.bench.peaks import GpuPeak

ACCEPTED = "the JSON that 'trainstack health --level 2 --json' writes (checks gemm.bf16 in TFLOP/s, copy.device in GB/s)"
HEALTH_LIMIT = 4 << 20  # a health result is a few kB
# the checks read, with their unit and the largest value taken as a measurement
HEALTH_CHECKS = {"gemm.bf16": ("TFLOP/s", 1e5), "copy.device": ("GB/s", 1e6)}


def read_health(path: Path) -> dict:
    """``{"gemm_tflops", "copy_gbps", "gpu_model", "path"}`` from a health result (either
    figure None when the file has no such check); SpecError naming the file and the field."""
    try:
        text = read_regular(path, "health result", limit=HEALTH_LIMIT).decode("utf-8")
        data = loads_strict(text)
    except (OSError, UnicodeDecodeError) as exc:
        why = describe_os_error(exc) if isinstance(exc, OSError) else "not UTF-8 text"
        raise SpecError(f"--health {path}: cannot read ({why}); accepted: {ACCEPTED}") from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"--health {path}:{exc.lineno}: not valid JSON ({exc.msg}); accepted: {ACCEPTED}") from None
    except (ValueError, RecursionError) as exc:
        why = str(exc) if isinstance(exc, ValueError) else "nested too deeply"
        raise SpecError(f"--health {path}: not valid JSON ({why}); accepted: {ACCEPTED}") from None
    checks = data.get("checks") if isinstance(data, dict) else None
    if not isinstance(checks, list):
        raise SpecError(f"--health {path}: checks: absent or not a list; accepted: {ACCEPTED}")
    found: dict[str, float] = {}
    for i, check in enumerate(checks):
        if not isinstance(check, dict) or check.get("name") not in HEALTH_CHECKS:
            continue
        name = check["name"]
        unit, largest = HEALTH_CHECKS[name]
        value = check.get("value")
        if (
            not isinstance(value, (int, float))
            or isinstance(value, bool)
            or not (math.isfinite(value) and 0 < value <= largest)
            or check.get("unit") != unit
        ):
            raise SpecError(
                f"--health {path}: checks[{i}] ({name}): value '{grammar.shown(value)}' unit '{grammar.shown(check.get('unit'))}'; "
                f"accepted: a positive number up to {largest:g} in {unit}"
            )
        found.setdefault(name, float(value))  # the first GPU's figure
    if not found:
        raise SpecError(f"--health {path}: no gemm.bf16 or copy.device check; accepted: {ACCEPTED}")
    model = data.get("gpu_model")
    model = model if isinstance(model, str) and len(model) <= 200 and not grammar.CONTROL.search(model) else None
    return {"gemm_tflops": found.get("gemm.bf16"), "copy_gbps": found.get("copy.device"), "gpu_model": model, "path": str(path)}


def ceilings(peak: GpuPeak | None, health: dict | None, *, fp8: bool = False) -> dict:
    """The GEMM (TFLOP/s) and memory (GB/s) ceilings of a row, each with where it comes from.
    ``fp8``: the row's products run in float8, whose ceiling is the datasheet's float8 peak
    (health measures bf16 alone)."""
    health = health or {}
    where = f"health {health.get('path')}" + (f" on {health['gpu_model']}" if health.get("gpu_model") else "")
    if fp8:
        gemm = (peak.fp8_tflops, f"datasheet dense float8 peak of {peak.name}") if peak and peak.fp8_tflops else (None, "unknown")
    elif health.get("gemm_tflops"):
        gemm = (health["gemm_tflops"], f"gemm.bf16 measured by {where}")
    else:
        gemm = (peak.bf16_tflops, f"datasheet dense bf16 peak of {peak.name}") if peak else (None, "unknown")
    if health.get("copy_gbps"):
        copy = (health["copy_gbps"], f"copy.device measured by {where}")
    else:
        copy = (peak.hbm_gbps, f"datasheet memory bandwidth of {peak.name}") if peak and peak.hbm_gbps else (None, "unknown")
    return {"gemm_tflops": gemm[0], "gemm_source": gemm[1], "copy_gbps": copy[0], "copy_source": copy[1]}


def with_rates(split: dict, work: dict, limits: dict) -> dict:
    """``split`` (Breakdown.to_json) with each class's achieved rate: TFLOP/s for the classes
    ``work`` counts FLOPs of, GB/s for those it counts bytes of, over the class's summed
    kernel time, and the fraction of its ceiling."""
    classes = {}
    for name, figures in split.get("classes", {}).items():
        ms = figures.get("kernel_ms_per_step") or 0.0
        entry = dict(figures)
        if ms > 0 and work.get(name, {}).get("flops"):
            tflops = work[name]["flops"] / (ms * 1e-3) / 1e12
            ceiling = limits.get("gemm_tflops")
            entry |= {"tflops": tflops, "of_ceiling": tflops / ceiling if ceiling else None}
        elif ms > 0 and work.get(name, {}).get("bytes"):
            gbps = work[name]["bytes"] / (ms * 1e-3) / 1e9
            ceiling = limits.get("copy_gbps")
            entry |= {"gbps": gbps, "of_ceiling": gbps / ceiling if ceiling else None}
        classes[name] = entry
    return {**split, "classes": classes, "ceilings": limits, "work": work}


def optimizer_bytes(params: int) -> int:
    """Bytes AdamW moves per step: read the parameter, its gradient and two moments, write the
    parameter and the moments, 4 bytes each (fp32 weights; bf16 weights with fp32 master
    copies move as many: 2-byte parameter and gradient, 4-byte master read and written)."""
    return 28 * params
