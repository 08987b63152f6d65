"""A Hugging Face causal LM behind the bench decoder's interface: ``layers`` (its decoder
blocks), ``forward(tokens, targets) -> loss`` with the chunked loss, ``compile_loss``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from trainstack.errors import SpecError
from trainstack.nn.decoder import chunked_cross_entropy, softmax_xent_grad

if TYPE_CHECKING:
    from transformers import PreTrainedModel


class HfCausalLM(nn.Module):
    _layers: nn.ModuleList  # set in __init__ with object.__setattr__, outside the module tree

    def __init__(self, hf_model: PreTrainedModel, path: object = "config") -> None:
        super().__init__()
        self.hf = hf_model
        self.loss_chunk_fn: Callable | None = None  # None: the in-place eager chunk
        # kept outside the module tree: the list is already registered inside ``hf``
        object.__setattr__(self, "_layers", decoder_layers(hf_model, path))

    @property
    def layers(self) -> nn.ModuleList:
        return self._layers

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        # the base model's last hidden state, then the output projection chunk by chunk
        # no KV cache: training, and a cache object would change between forward and recompute
        hidden = self.hf.base_model(input_ids=tokens, use_cache=False).last_hidden_state  # (B, T, C)
        head = self.hf.get_output_embeddings()
        if getattr(head, "bias", None) is not None:
            return F.cross_entropy(head(hidden).flatten(0, 1).float(), targets.flatten())
        return chunked_cross_entropy(hidden.flatten(0, 1), head.weight, targets.flatten(), chunk_fn=self.loss_chunk_fn)

    def example_batch(self, batch: int, seq: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(tokens, targets) of one step's shape on the model's device: what memplan plans for."""
        device = next(self.parameters()).device
        tokens = torch.zeros(batch, seq, dtype=torch.long, device=device)
        return tokens, tokens

    def compile_loss(self) -> None:
        self.loss_chunk_fn = torch.compile(softmax_xent_grad, dynamic=False)


def decoder_layers(model: nn.Module, path: object) -> nn.ModuleList:
    """The ModuleList of the model's decoder blocks: the one with num_hidden_layers entries."""
    n = getattr(model.config, "num_hidden_layers", None)
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) == n:
            return module
    raise SpecError(f"{path}: no list of {n} decoder layers found in {type(model).__name__}; accepted: a decoder-only causal LM")
