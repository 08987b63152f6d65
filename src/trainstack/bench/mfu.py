"""Model FLOPs per token and MFU (the GPU peak table is ``bench.peaks``).

FLOPs per token for one training step (forward + backward), as in PaLM (appendix B) and
torchtitan:

    6 * N + 12 * L * d * T

N counts every parameter except the input embedding table (the output projection is a
matrix product on every token, so it counts); the attention term counts the whole T x T
score matrix, NOT the causal half, so MFU figures compare with the usual published ones:
Megatron-LM's (Narayanan et al. 2021, the 12*L*h*s term of its 72*B*s*L*h^2 formula) and
NeMo's, whose Llama formulas count attention as 12*s/h of the products of a layer, i.e.
12*L*d*T per token. Causal attention kernels compute about half the scores: the same
formula with the causal half, 6*N + 6*L*d*T, is given beside it (``flops_per_token_causal``).

``class_work`` counts the work of each class of a step's breakdown (``bench.kernels``):
the FLOPs of the products and of attention forward and backward, the bytes the optimizer
moves.
"""

from __future__ import annotations

from trainstack.bench.ceilings import optimizer_bytes
from trainstack.bench.kernels import ATTN_BWD, ATTN_FWD, GEMM, OPTIMIZER
from trainstack.bench.peaks import GpuPeak
from trainstack.nn.decoder import ModelConfig

FORMULA = (
    "FLOPs/token = 6*N + 12*L*d*T  (N: parameters but the input embedding; attention: "
    "the full TxT scores, not the causal half, as Megatron-LM and NeMo count it)"
)
FORMULA_CAUSAL = "causal half: 6*N + 6*L*d*T (the scores a causal attention kernel computes)"


def flops_per_token(cfg: ModelConfig, seq: int) -> int:
    return 6 * cfg.non_embedding_params() + 12 * cfg.n_layers * cfg.dim * seq


def flops_per_token_causal(cfg: ModelConfig, seq: int) -> int:
    """``flops_per_token`` with attention's causal half: the scores a causal kernel computes."""
    return 6 * cfg.non_embedding_params() + 6 * cfg.n_layers * cfg.dim * seq


def class_work(cfg: ModelConfig, *, batch: int, seq: int, params: int) -> dict:
    """The work of one step per breakdown class: FLOPs of the products (6 per weight per
    token) and of causal attention (forward 2 products of s x s/2 x d per layer; backward
    5 such products, the scores recomputed and four gradients: 2.5 times the forward, as
    FlashAttention-2 counts it), bytes of AdamW over ``params`` parameters (``ceilings.optimizer_bytes``)."""
    tokens = batch * seq
    attention = 2 * cfg.n_layers * cfg.dim * seq * tokens  # forward, causal half: 4*L*d*s^2*B / 2
    return {
        GEMM: {"flops": 6 * cfg.non_embedding_params() * tokens, "counted": "6 * N * tokens"},
        ATTN_FWD: {"flops": attention, "counted": "2 * L * d * T * tokens (causal half)"},
        ATTN_BWD: {"flops": 5 * attention // 2, "counted": "2.5 times the forward (5 products: scores recomputed, dV, dP, dQ, dK)"},
        OPTIMIZER: {"bytes": optimizer_bytes(params), "counted": "28 bytes per parameter"},
    }


def mfu(tokens_per_s_per_gpu: float, cfg: ModelConfig, seq: int, peak: GpuPeak | None) -> float | None:
    """Fraction of the dense bf16 peak; None when the peak is unknown."""
    if peak is None:
        return None
    return tokens_per_s_per_gpu * flops_per_token(cfg, seq) / (peak.bf16_tflops * 1e12)


def mfu_causal(tokens_per_s_per_gpu: float, cfg: ModelConfig, seq: int, peak: GpuPeak | None) -> float | None:
    """``mfu`` with attention's causal half (``flops_per_token_causal``)."""
    if peak is None:
        return None
    return tokens_per_s_per_gpu * flops_per_token_causal(cfg, seq) / (peak.bf16_tflops * 1e12)


def mfu_fp8(tokens_per_s_per_gpu: float, cfg: ModelConfig, seq: int, peak: GpuPeak | None) -> float | None:
    """Fraction of the dense float8 peak (for float8 rows: a stricter figure than ``mfu``,
    since attention and the output projection still run in bf16); None when unknown."""
    if peak is None or not peak.fp8_tflops:
        return None
    return tokens_per_s_per_gpu * flops_per_token(cfg, seq) / (peak.fp8_tflops * 1e12)
