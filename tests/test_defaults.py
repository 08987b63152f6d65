"""One resolver (nn/defaults.py) for every verb's preset, sequence and modes: bench and memplan
resolve a model's sequence alike, the help names every mode part the grammar accepts (each one
parsed here), and --model means the same on both verbs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainstack.cli import main
from trainstack.errors import UsageError
from trainstack.nn import defaults
from trainstack.nn.modes import DEFAULT_ABLATION, PARTS, Mode, parse_mode
from trainstack.nn.presets import SHAPES


def test_the_sequence_of_each_kind_of_model() -> None:
    assert [defaults.seq(None, preset=name) for name in ("tiny", "125m", "8b", "llama3.1-8b")] == [256, 2048, 2048, 8192]
    assert defaults.seq(None, max_seq=512) == 512 and defaults.seq(None, max_seq=32768) == 2048  # a config's own max_seq
    assert defaults.seq(None) == 2048  # a factory's model: no max_seq known
    assert defaults.seq(100, preset="llama3.1-8b") == 100  # one given wins
    with pytest.raises(UsageError, match="unknown preset 'huge'; accepted: tiny, 125m"):
        defaults.seq(None, preset="huge")


def test_every_mode_part_the_help_names_is_accepted_and_each_accepted_one_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    parsed = {part: parse_mode(part.replace("-N", "-3")) for part in PARTS}
    assert parsed["flash"] == Mode(flash=True) and parsed["ac-every-N"] == Mode(ac="every", every=3)
    assert parsed["zero2"].zero_stage == 2 and parsed["fp8-rowwise"].fp8 == "rowwise" and parsed["offload"].offload
    assert main(["bench", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.replace("│", " ").split())
    for part in PARTS:
        assert f" {part}," in text or f" {part};" in text or f" {part}." in text, part
    assert "[default: compile]. With --ablation and no --modes: " + ", ".join(DEFAULT_ABLATION) + "." in text
    with pytest.raises(UsageError, match="unknown mode part 'flashy' in 'compile\\+flashy'; accepted: " + ", ".join(PARTS)):
        parse_mode("compile+flashy")


def test_modes_from_flags_and_from_a_stacks_list_are_parsed_once_each() -> None:
    assert defaults.modes(None, ablation=False) == (Mode(compile=True),)
    assert [m.name for m in defaults.modes(None, ablation=True)] == list(DEFAULT_ABLATION)
    assert defaults.modes("eager, compile+bf16", ablation=True) == defaults.modes(["eager", "compile+bf16"], ablation=True) \
        == (Mode(), Mode(compile=True, bf16=True))
    with pytest.raises(UsageError, match="unknown mode part 'fast'"):
        defaults.modes(["compile", "fast"], ablation=True)


def test_bench_and_memplan_give_a_short_config_the_same_sequence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A Llama config of 128 positions: bench and memplan both train it at 128 tokens when no
    --seq is given (memplan took 2048 and refused its own default)."""
    pytest.importorskip("transformers")
    from trainstack.bench.api import BenchOptions, make_spec

    config = tmp_path / "short" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
                                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
                                  "max_position_embeddings": 128}))
    assert make_spec(BenchOptions(hf_config=config)).seq == 128
    assert main(["memplan", "--hf-config", str(config), "--budget", "1GiB", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["seq"] == 128
    assert main(["memplan", "--preset", "tiny", "--budget", "1GiB", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["seq"] == defaults.seq(None, preset="tiny") == make_spec(BenchOptions(model="tiny")).seq == 256


def test_model_names_a_preset_on_both_verbs_and_a_factory_where_one_is_planned(capsys: pytest.CaptureFixture[str]) -> None:
    assert defaults.model("tiny", "bench", factories=False) == defaults.model("tiny", "memplan", factories=True) == ("preset", "tiny")
    assert defaults.model("mymodels:build", "memplan", factories=True) == ("factory", "mymodels:build")
    with pytest.raises(UsageError) as refused:
        defaults.model("mymodels:build", "bench", factories=False)
    assert refused.value.message == (f"bench --model: unknown preset 'mymodels:build'; accepted: {', '.join(SHAPES)} "
                                     "(a MODULE:FUNCTION factory is planned by memplan only)")
    # memplan --model tiny plans the tiny preset, as bench --model tiny measures it
    assert main(["memplan", "--model", "tiny", "--budget", "1GiB", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["preset"] == "tiny"
    assert captured.err.startswith(f"warning: memplan {defaults.MODEL_WARNING}\n")
