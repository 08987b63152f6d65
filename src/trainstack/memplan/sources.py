"""The models the memplan verb plans besides the presets: a local Hugging Face config
(built on the meta device, nothing downloaded: a causal LM, a masked LM or an
encoder-decoder) and a user's factory ``module:function``."""

from __future__ import annotations

import functools
import importlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainstack.errors import SpecError, UsageError
from trainstack.nn import defaults


@dataclass
class Source:
    model: Any
    example_batch: Any
    loss_fn: Any = None
    name: str = ""
    seq: int = 0  # the sequence of the token batch made for it (defaults.seq's where none was given)


def token_batch(vocab_size: int, batch: int, seq: int) -> dict:
    """Token ids and labels of shape (batch, seq): a causal LM's training batch."""
    import torch

    ids = torch.zeros(batch, seq, dtype=torch.long)
    return {"input_ids": ids, "labels": ids}


# The heads a config's ``architectures`` may name that train on token ids with token labels,
# and the auto class that builds each; a config that names none is built as an
# encoder-decoder's language model where it is one, else as a causal LM, else as a masked LM.
TOKEN_HEADS = {
    "ForCausalLM": "AutoModelForCausalLM",
    "ForMaskedLM": "AutoModelForMaskedLM",
    "ForConditionalGeneration": "AutoModelForSeq2SeqLM",
}


def _token_model(hf: Any, path: str | Path) -> Any:
    """The model a config describes, with a head that trains on token ids and labels, on the meta device."""
    import torch
    import transformers

    from trainstack.nn.hf import built_from_config

    named = [TOKEN_HEADS[suffix] for a in getattr(hf, "architectures", None) or [] for suffix in TOKEN_HEADS if a.endswith(suffix)]
    if named:
        autos = named[:1]
    elif getattr(hf, "is_encoder_decoder", False):
        autos = ["AutoModelForSeq2SeqLM"]
    else:
        autos = ["AutoModelForCausalLM", "AutoModelForMaskedLM"]
    reasons = []
    with torch.device("meta"):
        for auto in autos:
            for options in ({"attn_implementation": "sdpa"}, {}):
                try:
                    return built_from_config(
                        path, hf, functools.partial(getattr(transformers, auto).from_config, hf, **options), keep=(ValueError,)
                    )
                except ValueError as exc:
                    reason = str(exc).splitlines()[0]
            if not reason.startswith("Unrecognized configuration class"):  # the config's own fault: say it
                reasons.append(reason)
    why = f": {'; '.join(reasons)}" if reasons else ""
    raise SpecError(
        f"{path}: model_type '{getattr(hf, 'model_type', '?')}' has no model that trains on token ids and labels (tried {', '.join(autos)}){why}; "
        "accepted: a causal-LM, masked-LM or encoder-decoder config; for other models pass --factory module:function"
    )


def from_hf_config(path: str | Path, *, batch: int, seq: int | None) -> Source:
    """The config's model (``_token_model``) on the meta device, trained with labels (its own
    loss) on sequences of ``seq`` tokens (None: defaults.seq's for the config's max_seq)."""
    from trainstack.nn.hf import load_hf_config

    hf = load_hf_config(path, "memplan")
    max_seq = getattr(hf, "max_position_embeddings", None) or getattr(hf, "n_positions", None)
    seq = defaults.seq(seq, max_seq=max_seq if isinstance(max_seq, int) else None)
    if max_seq and seq > max_seq:
        raise UsageError(f"--seq: {seq} exceeds {path}'s max_position_embeddings {max_seq}")
    model = _token_model(hf, path)
    vocab = getattr(hf, "vocab_size", None) or getattr(getattr(hf, "text_config", None), "vocab_size", None)
    if not vocab:
        raise SpecError(f"{path}: field 'vocab_size' is missing; accepted: a language-model config with vocab_size")
    return Source(model.train(), token_batch(int(vocab), batch, seq), name=f"{getattr(hf, 'model_type', 'hf')} ({path})", seq=seq)


def from_factory(spec: str, *, batch: int, seq: int | None) -> Source:
    """``module:function`` (the module importable from the current directory): the function
    returns a model, ``(model, example_batch)`` or ``(model, example_batch, loss_fn)``; a
    model alone trains on token ids and labels of (batch, seq) from its ``config.vocab_size``
    (seq None: defaults.seq's)."""
    from torch import nn

    seq = defaults.seq(seq)

    module_name, _, function = spec.partition(":")
    if not module_name or not function:
        raise UsageError(f"--factory: '{spec}' is not module:function; accepted: e.g. 'mymodels:build'")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(
            f"--factory: cannot import '{module_name}' ({exc}); accepted: a module importable from the current directory"
        ) from None
    factory = getattr(module, function, None)
    if not callable(factory):
        raise UsageError(f"--factory: '{module_name}' has no function '{function}'")
    made = factory()
    parts = made if isinstance(made, tuple) else (made,)
    if not parts or not isinstance(parts[0], nn.Module) or len(parts) > 3:
        raise UsageError(
            f"--factory: {spec}() returned {type(made).__name__}; accepted: a model, (model, example_batch) or (model, example_batch, loss_fn)"
        )
    model = parts[0]
    if len(parts) >= 2:
        return Source(model, parts[1], parts[2] if len(parts) == 3 else None, name=spec, seq=seq)
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    if not vocab:
        raise UsageError(
            f"--factory: {spec}() returned a model without config.vocab_size; return (model, example_batch) to say what it trains on"
        )
    return Source(model, token_batch(int(vocab), batch, seq), name=spec, seq=seq)
