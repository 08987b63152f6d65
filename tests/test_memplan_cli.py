"""The memplan verb: a plan table, one-line errors with exit codes, JSON out, budget parsing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.clirun import assert_no_traceback
from trainstack.errors import UsageError
from trainstack.memplan.budget import parse_budget

pytest.importorskip("torch")


def trainstack(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trainstack.cli", *args], capture_output=True, text=True, timeout=300)


def test_prints_peak_and_plan(tmp_path) -> None:
    out = tmp_path / "plan.json"
    result = trainstack("memplan", "--preset", "tiny", "--batch", "2", "--seq", "128", "--budget", "80MiB", "--output", str(out))
    assert result.returncode == 0, result.stderr
    assert "predicted peak" in result.stdout and "recompute overhead" in result.stdout
    assert "saved activations, all blocks" in result.stdout
    data = json.loads(out.read_text())
    assert data["predicted_reserved_bytes"] <= data["budget_bytes"] == 80 * 2**20
    assert len(data["choices"]) == 2
    assert data["compiled"] is False and data["compiler_budget"] is None


def test_compiled_plan_names_the_compiler_budget(tmp_path) -> None:
    out = tmp_path / "plan.json"
    result = trainstack("memplan", "--preset", "tiny", "--batch", "2", "--seq", "128", "--budget", "80MiB", "--compiled", "--output", str(out))
    assert result.returncode == 0, result.stderr
    data = json.loads(out.read_text())
    assert data["compiled"] is True
    assert data["compiler_budget"] == 1.0  # no GPU here: kept blocks cannot be measured under a smaller budget


def test_impossible_budget_is_one_line_with_the_shortfall() -> None:
    result = trainstack("memplan", "--preset", "tiny", "--batch", "64", "--seq", "256", "--budget", "100MiB")
    assert result.returncode == 9
    lines = result.stderr.strip().splitlines()
    assert_no_traceback(result.stderr)
    assert len(lines) == 1
    assert "short of the smallest plan" in lines[0] and "would fit" in lines[0]
    assert result.stdout == ""


@pytest.mark.parametrize("args", [("--budget", "lots"), ("--budget", "-3GiB"), ("--preset", "huge"), ("--seq", "100000", "--preset", "tiny")])
def test_bad_input_is_a_usage_error(args) -> None:
    result = trainstack("memplan", *args)
    assert result.returncode == 2
    assert_no_traceback(result.stderr)
    assert result.stderr.strip()


def test_help_shows_the_example() -> None:
    result = trainstack("memplan", "--help")
    assert "trainstack memplan --preset 3b --batch 2 --seq 4096 --budget 60GiB" in " ".join(result.stdout.split())


@pytest.mark.parametrize(
    ("text", "expected"),
    [("60GiB", 60 * 2**30), ("80GB", 80 * 10**9), ("1.5 GiB", int(1.5 * 2**30)), ("4096B", 4096), ("0.5", 50), ("1", 100)],
)
def test_budget_parsing(text: str, expected: int) -> None:
    assert parse_budget(text, lambda: 100) == expected


def test_a_size_without_a_unit_is_an_error_naming_the_unit() -> None:
    with pytest.raises(UsageError, match="'60' has no unit; write bytes with a unit such as '60GiB'"):
        parse_budget("60", lambda: 100)


@pytest.mark.parametrize(
    ("text", "message"),
    [("9" * 400 + "GiB", "is more than 1 EiB"), ("2000000TiB", "is more than 1 EiB"), ("0." + "0" * 400 + "1", "must be more than 0 bytes")],
)
def test_a_budget_of_many_digits_is_refused_in_one_line_not_overflowed(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_budget(text, lambda: 100)


def test_fraction_without_a_gpu_asks_for_bytes() -> None:
    with pytest.raises(UsageError, match="no GPU was found"):
        parse_budget("0.8", lambda: None)


def test_json_prints_the_plan_and_output_writes_it(tmp_path) -> None:
    out = tmp_path / "plan.json"
    result = trainstack("memplan", "--preset", "tiny", "--seq", "64", "--budget", "80MiB", "--json", "--output", str(out))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == json.loads(out.read_text())


def test_json_with_a_file_name_says_to_use_output(tmp_path) -> None:
    result = trainstack("memplan", "--preset", "tiny", "--seq", "64", "--budget", "80MiB", "--json", str(tmp_path / "plan.json"))
    assert result.returncode == 2 and result.stdout == ""
    assert f"to write a file: --output {tmp_path / 'plan.json'}" in result.stderr


def test_plans_a_hugging_face_config(tmp_path) -> None:
    pytest.importorskip("transformers")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "model_type": "qwen2", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": True, "max_position_embeddings": 256,
    }))
    result = trainstack("memplan", "--hf-config", str(tmp_path), "--batch", "2", "--seq", "64", "--budget", "1GiB", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["blocks"] == "model.layers" and len(data["choices"]) == 3
    assert data["predicted_reserved_bytes"] <= data["budget_bytes"]


def test_a_factory_that_is_not_module_function_is_a_usage_error() -> None:
    result = trainstack("memplan", "--factory", "no_such_module_here:build", "--budget", "1GiB")
    assert result.returncode == 2 and "cannot import 'no_such_module_here'" in result.stderr
    assert_no_traceback(result.stderr)


@pytest.mark.parametrize(
    ("fields", "blocks"),
    [
        # an encoder trained as its config's architectures say (masked LM)
        ({"model_type": "bert", "architectures": ["BertForMaskedLM"], "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,
          "num_hidden_layers": 3, "num_attention_heads": 4, "max_position_embeddings": 256}, "bert.encoder.layer"),
        # an encoder-decoder without architectures: its language model, the decoder's run of blocks
        ({"model_type": "t5", "vocab_size": 512, "d_model": 64, "d_kv": 16, "d_ff": 128, "num_layers": 3, "num_heads": 4,
          "decoder_start_token_id": 0, "is_encoder_decoder": True}, "decoder.block"),
    ],
)
def test_plans_encoder_and_encoder_decoder_configs(tmp_path, fields, blocks) -> None:
    pytest.importorskip("transformers")
    (tmp_path / "config.json").write_text(json.dumps(fields))
    result = trainstack("memplan", "--hf-config", str(tmp_path), "--batch", "2", "--seq", "64", "--budget", "1GiB", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["blocks"] == blocks and data["predicted_reserved_bytes"] <= data["budget_bytes"]


def test_a_config_without_a_token_head_names_the_factory_route(tmp_path) -> None:
    pytest.importorskip("transformers")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "vit", "hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
                                                      "intermediate_size": 128, "image_size": 32, "patch_size": 8}))
    result = trainstack("memplan", "--hf-config", str(tmp_path), "--budget", "1GiB")
    assert result.returncode == 2, result.stderr
    assert_no_traceback(result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1
    assert "model_type 'vit' has no model" in result.stderr and "--factory module:function" in result.stderr
