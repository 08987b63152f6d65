"""Read a Hugging Face causal-LM config (no download) into a ModelConfig."""

from __future__ import annotations

from pathlib import Path

from trainstack.bench.model import ModelConfig
from trainstack.errors import SpecError, ToolMissingError

# ModelConfig field -> the Hugging Face config attribute that holds it (Llama naming).
_FIELDS = {
    "dim": "hidden_size",
    "n_layers": "num_hidden_layers",
    "n_heads": "num_attention_heads",
    "ffn_dim": "intermediate_size",
    "vocab_size": "vocab_size",
}


def load_hf_config(path: str | Path):
    try:
        from transformers import AutoConfig
    except ImportError:
        raise ToolMissingError("--hf-config needs the 'transformers' package", hint="pip install transformers") from None
    p = Path(path)
    if not p.exists():
        raise SpecError(f"{p}: no such file or folder (accepted: a config.json or the folder holding one)")
    try:
        return AutoConfig.from_pretrained(str(p), local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SpecError(f"{p}: not a Hugging Face config: {first}") from None


def model_config_from_hf(path: str | Path) -> ModelConfig:
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
        return ModelConfig(**values)  # type: ignore[arg-type]
    except ValueError as exc:
        raise SpecError(f"{path}: {exc}") from None


def _rope_theta(hf) -> float:
    theta = getattr(hf, "rope_theta", None)
    if theta is None:
        # transformers >= 5 keeps it under rope_parameters
        params = getattr(hf, "rope_parameters", None) or {}
        theta = params.get("rope_theta") if isinstance(params, dict) else None
    return theta or 10000.0
