"""Model presets, from a CPU-test toy to the Llama-3 8B shape."""

from __future__ import annotations

from trainstack.bench.model import ModelConfig
from trainstack.errors import UsageError

PRESETS: dict[str, ModelConfig] = {
    # small enough for CPU tests: two blocks, GQA with 2 query heads per KV head
    "tiny": ModelConfig(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=176, vocab_size=512, max_seq=256),
    # GPT-3 Small width and depth with a Llama-2-sized vocabulary: about 125M parameters
    "125m": ModelConfig(dim=768, n_layers=12, n_heads=12, n_kv_heads=4, ffn_dim=2048, vocab_size=32000, max_seq=8192),
    "1b": ModelConfig(dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, ffn_dim=8192, vocab_size=128256, max_seq=8192),
    "3b": ModelConfig(dim=3072, n_layers=28, n_heads=24, n_kv_heads=8, ffn_dim=8192, vocab_size=128256, max_seq=8192),
    # Llama-3 8B
    "8b": ModelConfig(dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, ffn_dim=14336, vocab_size=128256, max_seq=8192),
}


def preset(name: str) -> ModelConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise UsageError(f"--model: unknown preset '{name}'; accepted: {', '.join(PRESETS)}") from None
