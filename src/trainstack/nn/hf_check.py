"""A Hugging Face config.json held to its grammar before any model is built from it.

A config comes with a repository (untrusted): its sizes are checked against each other and
against what can be built at all before transformers reads it, so that a model's own
constructor never sees a size it would divide by zero, assert on, or spend days building.

- Sizes are whole numbers >= 1 (``null`` where a family leaves one out), each below its
  ceiling: ``MAX_LAYERS`` layers (a layer takes about 9 ms to build on the meta device, so a
  billion would take months; the deepest published decoders have under 200),
  ``MAX_POSITIONS`` positions, ``MAX_VOCAB`` tokens.
- The parameters the sizes give, counted analytically (embeddings, attention, MLP and its
  experts per layer), stay under ``MAX_PARAMS``: a model bench can train and memplan can
  plan, sharded over as many GPUs as there are.
- Heads divide the width where the family derives a head's size from them (no explicit
  ``head_dim``), and key/value heads divide the query heads.
- Token ids (``pad_token_id``, ``bos_token_id``, ``eos_token_id``) are whole numbers >= -1,
  and the padding id (an embedding's ``padding_idx``) lies inside the vocabulary.
- ``architectures`` is a list of class names, ``model_type`` a name.

The same rules hold in a nested model config (``text_config``, ``encoder``, ...), whose
depth is bounded by the JSON reader's own nesting limit.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from trainstack.errors import SpecError
from trainstack.fsutil import describe_os_error, loads_strict, read_regular

MAX_LAYERS = 1024
MAX_POSITIONS = 2**24
MAX_VOCAB = 2**24
MAX_PARAMS = 10**13
MAX_ARCHITECTURES = 16

# Name groups: the same size as each family spells it.
WIDTH = ("hidden_size", "n_embd", "d_model")
LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "encoder_layers", "decoder_layers", "num_decoder_layers")
HEADS = ("num_attention_heads", "n_head", "num_heads", "encoder_attention_heads", "decoder_attention_heads")
KV_HEADS = ("num_key_value_heads", "num_kv_heads", "multi_query_group_num")
FFN = ("intermediate_size", "n_inner", "d_ff", "encoder_ffn_dim", "decoder_ffn_dim", "ffn_dim")
POSITIONS = ("max_position_embeddings", "n_positions", "n_ctx")
EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts")
OTHER_SIZES = ("vocab_size", "head_dim", "d_kv", "num_experts_per_tok", "moe_intermediate_size")
SIZES = (*WIDTH, *LAYERS, *HEADS, *KV_HEADS, *FFN, *POSITIONS, *EXPERTS, *OTHER_SIZES)
TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id")
ARCHITECTURE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
MODEL_TYPE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


def check_config_file(config: Path) -> dict:
    """The config's JSON object, every rule above held; SpecError naming the file and field."""
    try:  # a repository's file: read inside its folder, no link out, a regular file of bounded size
        text = read_regular(config, "Hugging Face config", inside=config.parent).decode("utf-8")
        data = loads_strict(text, allow_nan=True)  # NaN reaches the field checks, which name the field
    except OSError as exc:
        raise SpecError(f"{config}: cannot read: {describe_os_error(exc)}") from None
    except (ValueError, RecursionError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SpecError(f"{config}: not a Hugging Face config: {first}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{config}: not a Hugging Face config: the top level is not an object")
    check_config(data, config)
    return data


def check_config(data: dict, config: Path | str, prefix: str = "") -> None:
    """``data`` (a config's object, or one nested in it at ``prefix``) held to the rules."""

    def where(name: str) -> str:
        return f"{config}: field '{prefix}{name}'"

    for name in SIZES:
        value = data.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise SpecError(f"{where(name)} is {_shown(value)}; accepted: a whole number >= 1")
    _ceiling(
        data, LAYERS, MAX_LAYERS, where, "layers (a model of more takes minutes to build; the deepest published decoders have under 200)"
    )
    _ceiling(data, POSITIONS, MAX_POSITIONS, where, "positions")
    _ceiling(data, ("vocab_size",), MAX_VOCAB, where, "tokens (the largest published vocabularies hold about 256k)")
    _check_heads(data, where)
    _check_ids(data, where)
    _check_names(data, where)
    params = parameter_count(data)
    if params > MAX_PARAMS:
        raise SpecError(
            f"{config}: the sizes{' under ' + repr(prefix[:-1]) if prefix else ''} give a model of about {params:.3g} parameters "
            f"(hidden size, layers, vocabulary and feed-forward sizes); accepted: up to {MAX_PARAMS:.0e}"
        )
    for name, value in data.items():
        if isinstance(value, dict) and (name.endswith("_config") or name in ("encoder", "decoder")):
            check_config(value, config, f"{prefix}{name}.")


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _first(data: dict, names: tuple[str, ...]) -> tuple[str, int] | None:
    for name in names:
        if data.get(name) is not None:
            return name, data[name]
    return None


def _ceiling(data: dict, names: tuple[str, ...], ceiling: int, where: Any, what: str) -> None:
    for name in names:
        value = data.get(name)
        if value is not None and value > ceiling:
            raise SpecError(f"{where(name)} is {value}; accepted: 1 to {ceiling} {what}")


def _check_heads(data: dict, where: Any) -> None:
    width, heads, kv = _first(data, WIDTH), _first(data, HEADS), _first(data, KV_HEADS)
    if heads is None:
        return
    if width is not None and data.get("head_dim") is None and data.get("d_kv") is None and width[1] % heads[1]:
        raise SpecError(
            f"{where(heads[0])} is {heads[1]}, which does not divide {width[0]} {width[1]} (no head_dim given); "
            f"accepted: a divisor of {width[1]}, or head_dim set"
        )
    if kv is not None and (kv[1] > heads[1] or heads[1] % kv[1]):
        raise SpecError(f"{where(kv[0])} is {kv[1]}, which does not divide {heads[0]} {heads[1]}; accepted: a divisor of {heads[1]}")


def _check_ids(data: dict, where: Any) -> None:
    """Token ids are whole numbers >= -1 (-1 is "none" in older configs); the padding id, which
    a model's embedding is built with, lies inside the vocabulary. Beginning and end ids
    outside it are left alone: training never looks them up, and small configs often keep
    their family's defaults."""
    vocab = data.get("vocab_size")
    for name in TOKEN_IDS:
        value = data.get(name)
        values = value if isinstance(value, list) and len(value) <= 64 else [value]
        for v in values:
            if v is None and not isinstance(value, list):
                continue
            inside = name != "pad_token_id" or not isinstance(vocab, int) or not isinstance(v, int) or v < vocab
            if isinstance(v, bool) or not isinstance(v, int) or v < -1 or not inside:
                limit = f"0 to {vocab - 1} (vocab_size {vocab})" if name == "pad_token_id" and isinstance(vocab, int) else "a token id >= 0"
                raise SpecError(f"{where(name)} is {_shown(value)}; accepted: null, -1 (none) or {limit}")


def _check_names(data: dict, where: Any) -> None:
    arch = data.get("architectures")
    if arch is not None:
        if (
            not isinstance(arch, list)
            or len(arch) > MAX_ARCHITECTURES
            or not all(isinstance(a, str) and ARCHITECTURE.fullmatch(a) for a in arch)
        ):
            raise SpecError(
                f'{where("architectures")} is {_shown(arch)}; accepted: a list of up to {MAX_ARCHITECTURES} class names such as ["LlamaForCausalLM"]'
            )
    model_type = data.get("model_type")
    if model_type is not None and not (isinstance(model_type, str) and MODEL_TYPE.fullmatch(model_type)):
        raise SpecError(f'{where("model_type")} is {_shown(model_type)}; accepted: a model type name such as "llama"')


def parameter_count(data: dict) -> int:
    """The parameters the config's sizes give, counted as a decoder's (or an encoder-decoder's
    two stacks): token and position embeddings, an untied head, and per layer the attention's
    four projections and the MLP's (three for a gated one, two otherwise) times its experts.
    A lower bound for the families with extra tables; exact enough to refuse absurd sizes."""
    width = (_first(data, WIDTH) or ("", 0))[1]
    layers = max(sum(data.get(n) or 0 for n in ("encoder_layers", "decoder_layers")), (_first(data, LAYERS) or ("", 0))[1])
    heads = (_first(data, HEADS) or ("", 1))[1]
    kv = (_first(data, KV_HEADS) or ("", heads))[1]
    head_dim = data.get("head_dim") or data.get("d_kv") or (width // heads if heads else width)
    ffn = (_first(data, FFN) or ("", 4 * width))[1]
    experts = max((_first(data, EXPERTS) or ("", 1))[1], 1)
    vocab = data.get("vocab_size") or 0
    positions = (_first(data, POSITIONS) or ("", 0))[1] if "n_positions" in data or "n_ctx" in data else 0
    attention = width * head_dim * (2 * heads + 2 * kv)
    moe_ffn = data.get("moe_intermediate_size")
    # experts of their own width beside a dense MLP (DeepSeek, Qwen-MoE), else experts of the MLP's
    mlp = 3 * width * (ffn + moe_ffn * experts) if moe_ffn else 3 * width * ffn * experts
    untied = 0 if data.get("tie_word_embeddings", True) else vocab * width
    return vocab * width + untied + positions * width + layers * (attention + mlp)
