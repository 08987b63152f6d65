"""Model presets, from a CPU-test toy to the Llama-3 8B shape."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainstack.errors import UsageError

if TYPE_CHECKING:
    from trainstack.nn.decoder import ModelConfig

# Plain numbers, so that a preset's name and max_seq are checked without importing torch;
# PRESETS (the ModelConfig of each) is built on first use.
SHAPES: dict[str, dict[str, int]] = {
    # small enough for CPU tests: two blocks, GQA with 2 query heads per KV head
    "tiny": dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=176, vocab_size=512, max_seq=256),
    # GPT-3 Small width and depth with a Llama-2-sized vocabulary: about 125M parameters
    "125m": dict(dim=768, n_layers=12, n_heads=12, n_kv_heads=4, ffn_dim=2048, vocab_size=32000, max_seq=8192),
    "1b": dict(dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, ffn_dim=8192, vocab_size=128256, max_seq=8192),
    "3b": dict(dim=3072, n_layers=28, n_heads=24, n_kv_heads=8, ffn_dim=8192, vocab_size=128256, max_seq=8192),
    # Llama-3 8B
    "8b": dict(dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, ffn_dim=14336, vocab_size=128256, max_seq=8192),
}

# The reference configurations the field publishes its training speed at (NVIDIA's NeMo and
# Megatron-Bridge, torchtitan: Llama 3.1 8B at sequence 8192): the shapes of Llama 3.1 8B and
# Llama 3.2 1B and 3B (those of 8b, 1b and 3b: Llama 3.1's RoPE scaling changes no cost at
# 8192 and is not modelled), trained at sequence REFERENCE_SEQ unless --seq says otherwise (nn.defaults.seq).
REFERENCE_SEQ = 8192
REFERENCES: dict[str, str] = {"llama3.1-8b": "8b", "llama3.2-1b": "1b", "llama3.2-3b": "3b"}
SHAPES.update({name: dict(SHAPES[base]) for name, base in REFERENCES.items()})


def shape(name: str) -> dict[str, int]:
    """The preset's numbers (dim, n_layers, ..., max_seq); UsageError naming the presets if unknown."""
    try:
        return SHAPES[name]
    except KeyError:
        raise UsageError(f"--preset: unknown preset '{name}'; accepted: {', '.join(SHAPES)}") from None


def preset(name: str) -> ModelConfig:
    from trainstack.nn.decoder import ModelConfig

    return ModelConfig(**shape(name))


def __getattr__(name: str) -> dict[str, ModelConfig]:
    if name == "PRESETS":
        return {key: preset(key) for key in SHAPES}
    raise AttributeError(name)
