"""bf16 parameters with fp32 master weights and fp32 AdamW state, for one process.

torch.optim.AdamW keeps its moments in the parameters' dtype, so a model cast to bf16
would get bf16 moments and lose every update smaller than bf16's rounding step. Here
the model computes in bf16 (no autocast casts of the weights in forward, no fp32
gradients in backward, a bf16 residual stream) while the optimizer owns fp32 copies:
each step reads the bf16 gradient once, updates the fp32 master weight and moments, and
writes the rounded weight back into the bf16 parameter. Compiled, that is one fused
kernel per parameter.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def adamw_update(
    param: torch.Tensor,
    grad: torch.Tensor,
    master: torch.Tensor,
    exp_avg: torch.Tensor,
    exp_avg_sq: torch.Tensor,
    step: torch.Tensor,
    lr: torch.Tensor | float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
) -> None:
    """One AdamW step (decoupled weight decay, as torch.optim.AdamW) on the fp32 state, in place.

    ``step`` and ``lr`` are 0-d float tensors on the device, so bias corrections and a
    scheduled rate need no host value (and a compiled update no recompile).
    """
    g = grad.float()
    master.mul_(1 - lr * weight_decay)
    exp_avg.lerp_(g, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    bias_correction1 = 1 - torch.pow(beta1, step)
    bias_correction2_sqrt = torch.sqrt(1 - torch.pow(beta2, step))
    denom = exp_avg_sq.sqrt() / bias_correction2_sqrt + eps
    master.sub_(exp_avg / denom * (lr / bias_correction1))
    param.copy_(master)


class MasterAdamW:
    """AdamW over fp32 master copies of low-precision parameters; the same interface as
    torch's for the training loop: ``step()`` and ``zero_grad(set_to_none=True)``."""

    def __init__(
        self,
        params: list[nn.Parameter],
        masters: list[torch.Tensor],
        *,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        compiled: bool = False,
    ) -> None:
        if len(params) != len(masters):
            raise ValueError(f"{len(params)} parameters but {len(masters)} master copies")
        self.params = params
        self.masters = masters
        self.exp_avgs = [torch.zeros_like(m) for m in masters]
        self.exp_avg_sqs = [torch.zeros_like(m) for m in masters]
        device = masters[0].device if masters else torch.device("cpu")
        self.step_count = torch.zeros((), dtype=torch.float32, device=device)
        self.param_groups = [{"lr": lr}]  # as torch's optimizers: a schedule sets the rate here
        self._lr = torch.full((), lr, dtype=torch.float32, device=device)  # a tensor: no recompile when it changes
        self.hyper = (betas[0], betas[1], eps, weight_decay)
        self._update: Callable = torch.compile(adamw_update) if compiled else adamw_update

    @torch.no_grad()
    def step(self) -> None:
        self.step_count += 1
        self._lr.fill_(self.param_groups[0]["lr"])
        for p, w, m, v in zip(self.params, self.masters, self.exp_avgs, self.exp_avg_sqs):
            if p.grad is not None:
                self._update(p, p.grad, w, m, v, self.step_count, self._lr, *self.hyper)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()


def to_bf16_with_master(model: nn.Module, *, lr: float, compiled: bool) -> MasterAdamW:
    """Cast ``model``'s parameters (not its buffers: the rotary tables stay fp32) to bf16 in
    place and return the optimizer holding their fp32 values, taken before the cast so the
    master weights start exact."""
    params = [p for p in model.parameters() if p.requires_grad]
    masters = [p.detach().float().clone() for p in params]
    with torch.no_grad():
        for p in params:
            p.data = p.data.to(torch.bfloat16)
    return MasterAdamW(params, masters, lr=lr, compiled=compiled)
