"""The ``flash`` mode part: the bench decoder's attention through flash-attn's
``flash_attn_func`` (an installed flash-attn, on a CUDA GPU) instead of SDPA."""

from __future__ import annotations

import importlib.util

from torch import nn

from trainstack.bench.modes import ModeUnavailable
from trainstack.nn.decoder import Attention

INSTALL = "build it into the environment ('trainstack build' of a stack with flash-attn) or pip install flash-attn"


def require(device) -> None:
    """Raise ModeUnavailable (one line) when flash-attn cannot run on ``device``."""
    if importlib.util.find_spec("flash_attn") is None:
        raise ModeUnavailable(f"unavailable: flash needs the flash-attn package, which this environment lacks; {INSTALL}")
    if device.type != "cuda":
        raise ModeUnavailable(f"unavailable: flash needs a CUDA GPU; this run is on {device.type}")


def use_flash_attn(model: nn.Module) -> int:
    """Point every decoder attention of ``model`` at flash_attn_func; how many there are.
    A model without the bench decoder's attention (a Hugging Face model) is refused."""
    attentions = [m for m in model.modules() if isinstance(m, Attention)]
    if not attentions:
        raise ModeUnavailable(
            "unavailable: flash applies to the bench decoder's attention; a Hugging Face model chooses its own (its config's attn_implementation)"
        )
    from flash_attn import flash_attn_func

    for attention in attentions:
        attention.flash_attn = flash_attn_func
    return len(attentions)
