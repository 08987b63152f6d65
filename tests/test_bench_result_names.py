"""A finished benchmark's results are never replaced: the result file is named after the whole
model name (no cut at its first dot, which made llama3.2-1b and llama3.2-3b both
bench-llama3.jsonl), and a run whose file already exists writes the next free name and says
the earlier one was kept.

Real: bench on the CPU, twice, with a Llama config named llama3.2-1b."""

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
    config = tmp_path / "llama3.2-1b.json"
    config.write_text(json.dumps(CONFIG))
    bench(config, out, capsys)
    first = out / "bench-llama3.2-1b-b1-s16.jsonl"  # the whole name: not bench-llama3.jsonl
    assert sorted(p.name for p in out.iterdir()) == [first.name]
    rows = [json.loads(line) for line in first.read_text().splitlines()]
    assert [r["model"] for r in rows] == ["llama3.2-1b"]

    again = bench(config, out, capsys)
    second = out / "bench-llama3.2-1b-b1-s16-2.jsonl"
    assert second.is_file() and f"wrote {second}" in again
    assert f"{first} holds an earlier run's results: kept; this run's are in {second.name}" in " ".join(again.split())
    assert [json.loads(line) for line in first.read_text().splitlines()] == rows  # untouched
