"""A finished benchmark's results are never replaced: the result file is named after the whole
model name (no cut at its first dot: llama3.2-1b and llama3.2-3b are two files), and a run whose
file already exists writes the next free name and says the earlier one was kept.

Real: bench on the CPU with two Llama configs whose names differ only after a dot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from trainstack.cli import main  # noqa: E402

CONFIG = dict(model_type="llama", hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
              num_key_value_heads=1, vocab_size=128, max_position_embeddings=64, hidden_act="silu")
RUN = ["--device", "cpu", "--batch", "1", "--seq", "16", "--steps", "2", "--warmup", "1", "--modes", "eager"]


def bench(config: Path, out: Path, capsys) -> str:
    assert main(["bench", "--hf-config", str(config), *RUN, "--out", str(out)]) == 0
    return capsys.readouterr().out


def test_dotted_model_names_get_their_own_files_and_no_run_replaces_another(tmp_path: Path, capsys) -> None:
    out = tmp_path / "results"
    configs = {}
    for name, layers in (("llama3.2-1b", 1), ("llama3.2-3b", 2)):
        configs[name] = tmp_path / f"{name}.json"
        configs[name].write_text(json.dumps({**CONFIG, "num_hidden_layers": layers}))
    bench(configs["llama3.2-1b"], out, capsys)
    bench(configs["llama3.2-3b"], out, capsys)
    first, second = out / "bench-llama3.2-1b-b1-s16.jsonl", out / "bench-llama3.2-3b-b1-s16.jsonl"
    assert sorted(p.name for p in out.iterdir()) == [first.name, second.name]
    rows = {path: [json.loads(line) for line in path.read_text().splitlines()] for path in (first, second)}
    assert [r["model"] for r in rows[first]] == ["llama3.2-1b"] and [r["model"] for r in rows[second]] == ["llama3.2-3b"]

    again = bench(configs["llama3.2-1b"], out, capsys)
    third = out / "bench-llama3.2-1b-b1-s16-2.jsonl"
    assert third.is_file() and f"wrote {third}" in again
    assert f"{first} holds an earlier run's results: kept; this run's are in {third.name}" in " ".join(again.split())
    assert [json.loads(line) for line in first.read_text().splitlines()] == rows[first]  # untouched
