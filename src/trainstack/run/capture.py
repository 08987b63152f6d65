"""Find the job's model without its code: the first module called while training.

``nn.Module.__call__`` is patched until the first call of a module in training mode, with
gradients on and trainable parameters: that module is the model the job trains (or a
wrapper of it: DDP, FSDP, torch.compile, which are unwrapped), its arguments the first
batch. The patch is removed at that call, so the job's steps run with torch's own
``__call__``. ``on_model`` runs before that first forward, so what it does to the model
(recompute, compile) applies to it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

_WRAPPER_ATTRS = ("module", "_orig_mod", "_fsdp_wrapped_module")


@dataclass
class Captured:
    root: nn.Module  # what the job called
    model: nn.Module  # root without DDP/FSDP/compile wrappers
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    optimizer: torch.optim.Optimizer | None = None  # the last one the job built before the call
    autocast: bool = False  # bf16 autocast was on around the call


def unwrap(module: nn.Module) -> nn.Module:
    for _ in range(8):
        inner = next((getattr(module, a) for a in _WRAPPER_ATTRS if isinstance(getattr(module, a, None), nn.Module)), None)
        if inner is None:
            return module
        module = inner
    return module


def _trains(module: nn.Module) -> bool:
    return module.training and torch.is_grad_enabled() and any(p.requires_grad for p in module.parameters())


def capture_model(on_model: Callable[[Captured], None]) -> None:
    """Call ``on_model`` once, with the first training module call, before that call runs."""
    original = nn.Module.__call__
    original_init = torch.optim.Optimizer.__init__
    built: list[weakref.ref] = []

    def first_call(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        if not _trains(self):
            return original(self, *args, **kwargs)
        nn.Module.__call__ = original  # type: ignore[method-assign]  # the patch taken off: torch's own __call__ back
        torch.optim.Optimizer.__init__ = original_init  # type: ignore[method-assign]  # the patch taken off: torch's own __init__ back
        optimizer = built[-1]() if built else None
        on_model(
            Captured(root=self, model=unwrap(self), args=args, kwargs=kwargs, optimizer=optimizer, autocast=_autocast_on(args, kwargs))
        )
        return original(self, *args, **kwargs)

    def recording_init(self: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        built.append(weakref.ref(self))

    nn.Module.__call__ = first_call  # type: ignore[method-assign]  # patching torch's class is how the model is found without its code
    torch.optim.Optimizer.__init__ = recording_init  # type: ignore[method-assign]  # patching torch's class is how the optimizer is found


def _autocast_on(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    tensors = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)]
    device = tensors[0].device.type if tensors else "cpu"
    return torch.is_autocast_enabled(device) and torch.get_autocast_dtype(device) == torch.bfloat16
