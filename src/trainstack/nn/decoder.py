"""A Llama-family decoder: pre-norm RMSNorm, rotary embeddings, GQA through SDPA, SwiGLU.

The blocks are ``Transformer.layers`` (an ``nn.ModuleList`` of ``Block``); each block is
called as ``block(x, cos, sin)`` so that activation checkpointing and torch.compile can
wrap blocks one by one. With ``targets`` the forward returns the mean cross-entropy,
computed in row chunks so the fp32 logits of the whole vocabulary never exist at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

# Rows of the (tokens, vocab) logits handled at a time by the loss.
LOSS_CHUNK_ROWS = 4096


@dataclass(frozen=True)
class ModelConfig:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    vocab_size: int
    max_seq: int = 8192
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0

    def __post_init__(self) -> None:
        if self.dim % self.n_heads:
            raise ValueError(f"dim {self.dim} is not a multiple of n_heads {self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even for rotary embeddings")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    def block_params(self) -> int:
        """Parameters of one block: q, k, v, o projections, SwiGLU (gate, up, down), two norms."""
        attn = self.dim * self.dim * 2 + self.dim * self.kv_dim * 2
        ffn = 3 * self.dim * self.ffn_dim
        return attn + ffn + 2 * self.dim

    def embedding_params(self) -> int:
        return self.vocab_size * self.dim

    def non_embedding_params(self) -> int:
        """All parameters except the input embedding table (the output projection counts:
        it is a real matrix product on every token)."""
        return self.n_layers * self.block_params() + self.dim + self.vocab_size * self.dim

    def total_params(self) -> int:
        return self.non_embedding_params() + self.embedding_params()

    def to_dict(self) -> dict[str, int | float]:
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def rope_tables(cfg: ModelConfig, device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotary angles, each (max_seq, head_dim), in the half-split layout."""
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, device=device, dtype=torch.float32) / cfg.head_dim))
    angles = torch.outer(torch.arange(cfg.max_seq, device=device, dtype=torch.float32), inv_freq)  # (S, hd/2)
    angles = torch.cat([angles, angles], dim=-1)  # (S, hd)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x (B, H, T, hd) with cos, sin (T, hd); or x (B, T, H, hd) with cos, sin (T, 1, hd)
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x * cos + rotated * sin).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.n_kv_heads = cfg.n_kv_heads
        self.head_dim = cfg.head_dim
        # q, k and v projections in one matrix (rows: q, then k, then v): one larger GEMM
        self.wqkv = nn.Linear(cfg.dim, cfg.dim + 2 * cfg.kv_dim, bias=False)
        self.wo = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.split = (cfg.dim, cfg.kv_dim, cfg.kv_dim)
        self.flash_attn = None  # flash-attn's flash_attn_func when a mode asks for it; SDPA otherwise

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape  # (B, T, C)
        q, k, v = self.wqkv(x).split(self.split, dim=-1)
        if self.flash_attn is not None:  # flash-attn's layout: (B, T, H, hd), grouped kv heads as they are
            q = apply_rope(q.view(b, t, self.n_heads, self.head_dim), cos[:, None], sin[:, None])
            k = apply_rope(k.view(b, t, self.n_kv_heads, self.head_dim), cos[:, None], sin[:, None])
            y = self.flash_attn(q, k, v.view(b, t, self.n_kv_heads, self.head_dim), causal=True)  # (B, T, H, hd)
            return self.wo(y.reshape(b, t, -1))  # (B, T, C)
        q = q.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, hd)
        k = k.view(b, t, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, T, hd)
        v = v.view(b, t, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, T, hd)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.n_kv_heads != self.n_heads)
        return self.wo(y.transpose(1, 2).reshape(b, t, -1))  # (B, T, C)


class FeedForward(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        # gate (w1) and up (w3) projections in one matrix, gate rows first
        self.w13 = nn.Linear(cfg.dim, 2 * cfg.ffn_dim, bias=False)
        self.w2 = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w13(x).chunk(2, dim=-1)  # (B, T, F) each
        return self.w2(F.silu(gate) * up)  # (B, T, C)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.feed_forward = FeedForward(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    rope_cos: torch.Tensor  # buffers, registered in __init__
    rope_sin: torch.Tensor

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        cos, sin = rope_tables(cfg, device=self.output.weight.device)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.loss_chunk_fn: Callable | None = None  # None: the in-place eager chunk
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Random init as in GPT-2/Llama: N(0, 0.02), residual outputs scaled by depth."""
        residual_std = 0.02 / math.sqrt(2 * self.cfg.n_layers)
        for name, param in self.named_parameters():
            if param.dim() < 2:
                nn.init.ones_(param)
            elif name.endswith(("wo.weight", "w2.weight")):
                nn.init.normal_(param, std=residual_std)
            else:
                nn.init.normal_(param, std=0.02)

    def hidden(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        if t > self.cfg.max_seq:
            raise ValueError(f"sequence length {t} exceeds max_seq {self.cfg.max_seq}")
        cos, sin = self.rope_cos[:t], self.rope_sin[:t]  # (T, hd)
        x = self.tok_embeddings(tokens)  # (B, T, C)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x)  # (B, T, C)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, T, V) without targets; the mean cross-entropy (a scalar) with them."""
        h = self.hidden(tokens)
        if targets is None:
            return self.output(h)
        return chunked_cross_entropy(h.flatten(0, 1), self.output.weight, targets.flatten(), chunk_fn=self.loss_chunk_fn)

    def compile_loss(self) -> None:
        """Fuse the per-chunk softmax and its gradient into two passes over the logits."""
        self.loss_chunk_fn = torch.compile(softmax_xent_grad, dynamic=False)


def _compute_dtype(t: torch.Tensor) -> torch.dtype:
    if torch.is_autocast_enabled(t.device.type):
        return torch.get_autocast_dtype(t.device.type)
    return t.dtype


def chunked_cross_entropy(
    h: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    chunk: int = LOSS_CHUNK_ROWS,
    chunk_fn: Callable | None = None,
) -> torch.Tensor:
    """Mean cross-entropy of ``h @ weight.T`` against ``targets``, ``chunk`` rows at a time.

    h (N, C), weight (V, C), targets (N,). The gradients are computed chunk by chunk in
    the forward pass (the softmax is at hand there), so backward needs no logits at all.
    Without ``chunk_fn`` every chunk reuses two buffers (its logits, their fp32 copy), so
    the loss allocates nothing of the logits' size after its first chunk; ``chunk_fn``
    (e.g. the torch.compile'd ``softmax_xent_grad``) takes a chunk's logits and returns
    its loss and gradient instead.
    """
    dtype = _compute_dtype(h)
    h, weight = h.to(dtype), weight.to(dtype)
    if not (torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad)):
        with torch.autocast(h.device.type, enabled=False):
            return _loss_only(h, weight, targets, chunk)
    return _ChunkedLinearCrossEntropy.apply(h, weight, targets, chunk, chunk_fn)


def softmax_xent_grad(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed cross-entropy of one chunk and its gradient wrt the logits (softmax - one_hot),
    the gradient in the logits' dtype. Compiled, it reads the logits twice (their
    log-sum-exp, then the softmax) and allocates nothing of their size but the gradient: the
    target entries, softmax - 1 computed in fp32, are written into it after the softmax."""
    x = logits.float()  # (n, V)
    lse = torch.logsumexp(x, dim=-1, keepdim=True)  # (n, 1)
    target_logit = x.gather(1, targets[:, None])  # (n, 1)
    loss = (lse - target_logit).sum()
    grad = torch.exp(x - lse).to(logits.dtype)  # (n, V)
    at_target = torch.exp(target_logit - lse) - 1.0  # (n, 1)
    return loss, grad.scatter_(1, targets[:, None], at_target.to(logits.dtype))


def softmax_xent_grad_(logits: torch.Tensor, targets: torch.Tensor, scratch: torch.Tensor) -> torch.Tensor:
    """``softmax_xent_grad`` in place: returns the chunk's summed cross-entropy and overwrites
    ``logits`` (n, V) with its gradient, computed in ``scratch`` (n, V) fp32. Unlike
    logsumexp, which allocates exp(x - max) beside x, nothing of the logits' size is allocated."""
    target_logit = logits.gather(1, targets[:, None]).squeeze(1).float()  # (n,)
    x = scratch.copy_(logits)  # (n, V) fp32
    rowmax = x.amax(dim=-1, keepdim=True)  # (n, 1)
    x.sub_(rowmax).exp_()
    total = x.sum(dim=-1, keepdim=True)  # (n, 1)
    lse = (rowmax + total.log()).squeeze(1)  # (n,)
    x.div_(total).scatter_add_(1, targets[:, None], torch.full_like(total, -1.0))
    logits.copy_(x)
    return (lse - target_logit).sum()


def _loss_only(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int) -> torch.Tensor:
    total = torch.zeros((), dtype=torch.float32, device=h.device)
    for start in range(0, h.shape[0], chunk):
        logits = (h[start : start + chunk] @ weight.t()).float()  # (n, V)
        total += F.cross_entropy(logits, targets[start : start + chunk], reduction="sum")
    return total / h.shape[0]


def _chunks(
    h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int, chunk_fn: Callable | None
) -> Iterator[tuple[slice, torch.Tensor, torch.Tensor]]:
    """(its rows, summed loss, gradient wrt the logits) of each chunk of ``chunk`` rows."""
    n = h.shape[0]
    if chunk_fn is None:
        logits = h.new_empty((min(chunk, n), weight.shape[0]))  # (chunk, V), reused by every chunk
        scratch = torch.empty(logits.shape, dtype=torch.float32, device=h.device)
    for start in range(0, n, chunk):
        rows = slice(start, min(start + chunk, n))
        hc, tc = h[rows], targets[rows]  # (r, C), (r,)
        if chunk_fn is None:
            g = torch.mm(hc, weight.t(), out=logits[: hc.shape[0]])  # (r, V)
            yield rows, softmax_xent_grad_(g, tc, scratch[: hc.shape[0]]), g
        else:  # no name here holds the chunk's gradient once yielded: freed before the next chunk's logits
            yield (rows, *chunk_fn(hc @ weight.t(), tc))


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, weight, targets, chunk, chunk_fn):
        with torch.autocast(h.device.type, enabled=False):
            n = h.shape[0]
            total = torch.zeros((), dtype=torch.float32, device=h.device)
            grad_h = torch.empty_like(h)
            grad_w = None
            for rows, loss, g in _chunks(h, weight, targets, chunk, chunk_fn):  # g (r, V)
                total += loss
                torch.mm(g, weight, out=grad_h[rows])
                grad_w = _add_t_mm_fp32(grad_w, g, h[rows])  # (V, C)
                del g  # this chunk's logits: freed before the next chunk's and the weight gradient's copy below
            ctx.save_for_backward(grad_h, grad_w.to(weight.dtype))
            ctx.n = n
        return total / n

    @staticmethod
    def backward(ctx, grad_loss):
        grad_h, grad_w = ctx.saved_tensors
        scale = grad_loss / ctx.n
        return grad_h * scale.to(grad_h.dtype), grad_w * scale.to(grad_w.dtype), None, None, None


def _add_t_mm_fp32(acc: torch.Tensor | None, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``acc + a.T @ b`` accumulated in fp32, into ``acc`` once it exists. On a GPU with 16-bit
    inputs one matrix product adds the fp32 result into ``acc`` (cuBLAS's fp32 output),
    instead of a 16-bit partial product read back and added, and without a second copy of
    the (V, C) weight gradient: the loss's largest tensor after the logits."""
    if a.is_cuda and a.dtype in (torch.bfloat16, torch.float16) and hasattr(torch.ops.aten.addmm, "dtype"):
        if acc is None:
            return torch.mm(a.t(), b, out_dtype=torch.float32)
        return torch.addmm(acc, a.t(), b, out_dtype=torch.float32, out=acc)
    partial = (a.t() @ b).float()
    return partial if acc is None else acc.add_(partial)
