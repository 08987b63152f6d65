"""Hugging Face causal-LM configs (read locally, no download).

A Llama-family config maps onto the bench's own decoder (``model_config_from_hf``); any
other causal-LM config is built with transformers' ``AutoModelForCausalLM.from_config``
and wrapped so that the runner can checkpoint, compile and shard its decoder layers.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path

from trainstack.errors import SpecError, ToolMissingError
from trainstack.nn.decoder import ModelConfig
from trainstack.nn.hf_check import check_config_file
from trainstack.nn.hf_model import HfCausalLM
from trainstack.nn.versions import check_torch, check_transformers

# ModelConfig field -> the Hugging Face config attribute that holds it (Llama naming).
_FIELDS = {
    "dim": "hidden_size",
    "n_layers": "num_hidden_layers",
    "n_heads": "num_attention_heads",
    "ffn_dim": "intermediate_size",
    "vocab_size": "vocab_size",
}
# Architectures whose blocks are exactly the bench decoder's (no biases, untied head).
_LLAMA_FAMILY = {"llama", "mistral"}


def load_hf_config(path: str | Path, verb: str = "bench --hf-config"):
    """The config at ``path`` (a config.json or its folder), held to ``hf_check``'s rules,
    read by transformers of the supported range (``verb`` names who asks, in the refusal)."""
    try:
        from transformers import AutoConfig
    except ImportError:
        raise ToolMissingError("--hf-config needs the 'transformers' package", hint="pip install transformers") from None
    check_transformers(verb)
    check_torch(verb)
    p = Path(path)
    if not p.exists():
        raise SpecError(f"{p}: no such file or folder (accepted: a config.json or the folder holding one)")
    config = p / "config.json" if p.is_dir() else p
    if config.exists() and not config.is_file():  # a FIFO would block the reader
        raise SpecError(f"{config}: not a regular file (accepted: a config.json or the folder holding one)")
    data = check_config_file(config) if config.is_file() else {}
    known_model_type(config, data)
    try:
        hf = AutoConfig.from_pretrained(str(p), local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - whatever the library raises on a config is the config's: one line
        raise SpecError(f"{p}: not a Hugging Face config: {first_line(exc)}") from None
    known_architectures(config, getattr(hf, "architectures", None))
    return hf


def known_model_type(config: Path, data: dict) -> None:
    """SpecError naming 'model_type' where the installed transformers has no such family."""
    from transformers import __version__
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    model_type = data.get("model_type")
    if isinstance(model_type, str) and model_type not in CONFIG_MAPPING:
        raise SpecError(
            f"{config}: field 'model_type' is {model_type!r}, a family transformers {__version__} does not know; "
            "accepted: a model type of this transformers, such as 'llama', 'qwen2' or 'gpt2' (a newer family may need a newer transformers)"
        )


def known_architectures(config: Path, architectures: object) -> None:
    """SpecError naming 'architectures' where it names a class the installed transformers does
    not have (a config names the class its model is, and the head memplan builds follows it)."""
    import transformers

    for name in architectures if isinstance(architectures, list) else []:
        try:
            found = isinstance(name, str) and not name.startswith("_") and isinstance(getattr(transformers, name, None), type)
        except Exception:  # noqa: BLE001 - a class whose module does not import is not there
            found = False
        if not found:
            raise SpecError(
                f"{config}: field 'architectures' names {name!r}, a class transformers {transformers.__version__} does not have; "
                'accepted: class names of this transformers, such as ["LlamaForCausalLM"], or no architectures'
            )


def first_line(exc: BaseException) -> str:
    """An exception's first line, bounded, with its type where the message alone is bare."""
    text = str(exc).strip()
    line = text.splitlines()[0][:300] if text else ""
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def built_from_config(path: str | Path, hf, build, keep: tuple[type[BaseException], ...] = ()):
    """``build()`` (a model's constructor run on ``hf``); SpecError in one line naming the
    config and, where the message names it, the config's field, for anything it raises but
    ``keep``."""
    try:
        return build()
    except Exception as exc:
        if isinstance(exc, (SpecError, MemoryError, *keep)):
            raise
        raise SpecError(
            f"{path}: {getattr(hf, 'model_type', 'the model')} cannot be built from this config{named_field(exc, hf)} ({first_line(exc)})"
        ) from None


def named_field(exc: BaseException, hf) -> str:
    """ ", field 'name'" for the config field an error's message names, else ""."""
    text = str(exc)
    try:
        fields = hf.to_dict()
    except Exception:  # noqa: BLE001 - a config that cannot list itself names no field
        return ""
    for name in sorted(fields, key=len, reverse=True):
        if len(name) > 3 and re.search(rf"\b{re.escape(name)}\b", text):
            return f", field '{name}'"
    for name, value in fields.items():  # the message quotes a field's value ('function nope not found')
        if isinstance(value, str) and len(value) > 3 and re.search(rf"\b{re.escape(value)}\b", text):
            return f", field '{name}'"
    return ""


def model_config_from_hf(path: str | Path) -> ModelConfig:
    """The bench decoder's config for a Llama-family Hugging Face config."""
    hf = load_hf_config(path)
    values: dict[str, int | float] = {}
    for ours, theirs in _FIELDS.items():
        value = getattr(hf, theirs, None)
        if value is None:
            raise SpecError(
                f"{path}: field '{theirs}' is missing (model_type '{getattr(hf, 'model_type', '?')}'); "
                "accepted: a Llama-family config with hidden_size, num_hidden_layers, num_attention_heads, intermediate_size, vocab_size"
            )
        values[ours] = int(value)
    values["n_kv_heads"] = int(getattr(hf, "num_key_value_heads", None) or values["n_heads"])
    values["max_seq"] = int(getattr(hf, "max_position_embeddings", None) or 8192)
    values["norm_eps"] = float(getattr(hf, "rms_norm_eps", None) or 1e-5)
    values["rope_theta"] = float(_rope_theta(hf))
    try:
        return ModelConfig(**values)  # type: ignore[arg-type]  # values of the config's fields, each typed and checked by ModelConfig's own fields
    except ValueError as exc:
        raise SpecError(f"{path}: {exc}") from None


def _rope_theta(hf) -> float:
    theta = getattr(hf, "rope_theta", None)
    if theta is None:
        # transformers >= 5 keeps it under rope_parameters
        params = getattr(hf, "rope_parameters", None) or {}
        theta = params.get("rope_theta") if isinstance(params, dict) else None
    return theta or 10000.0


@dataclass(frozen=True)
class HfShape:
    """What the runner needs to know of a Hugging Face model, counted on the meta device."""

    path: str
    model_type: str
    params: int
    non_embedding: int  # without embedding tables; a tied output projection counts
    n_layers: int
    dim: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    max_seq: int

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def total_params(self) -> int:
        return self.params

    def non_embedding_params(self) -> int:
        return self.non_embedding

    def to_dict(self) -> dict:
        return asdict(self)


def resolve(path: str | Path) -> ModelConfig | HfShape:
    """The bench decoder's config for a Llama-family config (SiLU, as the decoder computes), else
    the shape of the HF model."""
    hf = load_hf_config(path)
    if getattr(hf, "model_type", None) in _LLAMA_FAMILY and getattr(hf, "hidden_act", "silu") in ("silu", "swish"):
        return model_config_from_hf(path)
    return hf_shape(path, hf)  # another activation than the decoder's SiLU: the model as transformers builds it


def hf_shape(path: str | Path, hf) -> HfShape:
    import torch

    with torch.device("meta"):
        model = build_hf_model(path, hf)
    inner = model.hf
    embeddings = sum(p.numel() for m in inner.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters(recurse=False))
    head = inner.get_output_embeddings()
    tied = head is not None and head.weight is inner.get_input_embeddings().weight
    params = sum(p.numel() for p in inner.parameters())
    return HfShape(
        path=str(path),
        model_type=str(hf.model_type),
        params=params,
        non_embedding=params - embeddings + (head.weight.numel() if tied else 0),
        n_layers=len(model.layers),
        dim=int(hf.hidden_size),
        n_heads=int(hf.num_attention_heads),
        n_kv_heads=int(getattr(hf, "num_key_value_heads", None) or hf.num_attention_heads),
        vocab_size=int(hf.vocab_size),
        max_seq=int(getattr(hf, "max_position_embeddings", None) or 2048),
    )


def build_hf_model(path: str | Path, hf=None):
    """``HfCausalLM`` around ``AutoModelForCausalLM.from_config`` (random init, SDPA attention)."""
    from transformers import AutoModelForCausalLM

    hf = hf if hf is not None else load_hf_config(path)

    def build():
        try:
            return AutoModelForCausalLM.from_config(hf, attn_implementation="sdpa")
        except ValueError as exc:
            if str(exc).startswith("Unrecognized configuration class"):
                raise SpecError(f"{path}: not a causal-LM config ({str(exc).splitlines()[0][:300]})") from None
        return AutoModelForCausalLM.from_config(hf)

    model = built_from_config(path, hf, build)
    return HfCausalLM(model, path)
