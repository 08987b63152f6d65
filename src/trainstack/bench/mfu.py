"""Model FLOPs per token, the GPU peak table, and MFU.

FLOPs per token for one training step (forward + backward), as in PaLM (appendix B) and
torchtitan:

    6 * N + 12 * L * d * T

N counts every parameter except the input embedding table (the output projection is a
matrix product on every token, so it counts); the attention term counts the whole T x T
score matrix, NOT the causal half, so MFU figures compare with the usual published ones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from trainstack.nn.decoder import ModelConfig

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

FORMULA = (
    "FLOPs/token = 6*N + 12*L*d*T  (N = parameters without the input embedding, output projection included; "
    "attention counts the full TxT scores, not the causal half)"
)


@dataclass(frozen=True)
class GpuPeak:
    name: str
    match: str
    bf16_tflops: float
    source: str
    fp8_tflops: float | None = None  # dense float8 tensor-core peak; None where the GPU has none


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


def flops_per_token(cfg: ModelConfig, seq: int) -> int:
    return 6 * cfg.non_embedding_params() + 12 * cfg.n_layers * cfg.dim * seq


def mfu(tokens_per_s_per_gpu: float, cfg: ModelConfig, seq: int, peak: GpuPeak | None) -> float | None:
    """Fraction of the dense bf16 peak; None when the peak is unknown."""
    if peak is None:
        return None
    return tokens_per_s_per_gpu * flops_per_token(cfg, seq) / (peak.bf16_tflops * 1e12)


def mfu_fp8(tokens_per_s_per_gpu: float, cfg: ModelConfig, seq: int, peak: GpuPeak | None) -> float | None:
    """Fraction of the dense float8 peak (for float8 rows: a stricter figure than ``mfu``,
    since attention and the output projection still run in bf16); None when unknown."""
    if peak is None or not peak.fp8_tflops:
        return None
    return tokens_per_s_per_gpu * flops_per_token(cfg, seq) / (peak.fp8_tflops * 1e12)
