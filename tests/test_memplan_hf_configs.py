"""Inconsistent and hostile Hugging Face configs (tests/data/corpus/hf_configs) of each family the
seeds' users train: Llama, Qwen2, Mistral, Gemma, Phi-3, GPT-NeoX, GPT-2.

Each file holds what it attacks (``_attacks``) and the field its error must name (``_field``;
null where no one field is at fault). ``memplan --hf-config`` and ``bench --hf-config`` (on CPU:
refused before any model runs) answer each with one line starting ``error:`` that names the
file and the field, and exit 2 (bad input), in bounded time; a billion layers is refused, not
built. The real CLI is run for a few; ``run --memplan`` reports a job model's inconsistent
config in one line and lets the job run as built.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from trainstack.cli import main  # noqa: E402

from tests.clirun import assert_no_traceback, run_cli  # noqa: E402

CORPUS = Path(__file__).resolve().parent / "data" / "corpus" / "hf_configs"
CONFIGS = sorted(CORPUS.glob("*.json"))
FAMILIES = ("llama", "qwen2", "mistral", "gemma", "phi3", "gpt_neox", "gpt2")
SECONDS = 30.0  # a refused config never reaches a model of its sizes
pytestmark = pytest.mark.timeout(300)


def _case(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_corpus_covers_each_family_and_says_what_each_file_attacks() -> None:
    assert len(CONFIGS) >= 25
    for path in CONFIGS:
        case = _case(path)
        assert isinstance(case.get("_attacks"), str) and case["_attacks"], path.name
        assert "_field" in case, path.name
    families = {_case(p)["model_type"] for p in CONFIGS if _case(p)["model_type"] in FAMILIES}
    assert families == set(FAMILIES)


def _one_line(capsys, argv: list[str], path: Path) -> str:
    start = time.monotonic()
    code = main(argv)
    elapsed = time.monotonic() - start
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == 2, (path.name, code, captured.err[-2000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), (path.name, captured.err[-2000:])
    assert_no_traceback(captured.err, captured.out)
    assert elapsed < SECONDS, (path.name, elapsed)
    assert str(path) in lines[0], lines[0]
    field = _case(path)["_field"]
    if field is not None:
        assert f"field '{field}'" in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_memplan_and_bench_refuse_in_one_line_naming_the_field(path: Path, capsys) -> None:
    _one_line(capsys, ["memplan", "--hf-config", str(path), "--batch", "1", "--seq", "8", "--budget", "1GiB"], path)
    _one_line(capsys, ["bench", "--hf-config", str(path), "--device", "cpu", "--batch", "1", "--seq", "8", "--steps", "2", "--warmup", "1", "--modes", "eager"], path)


@pytest.mark.parametrize("name", ["phi3-pad-outside-vocab", "llama-layers-billion"])
def test_the_real_cli_refuses_in_one_line(name: str) -> None:
    path = CORPUS / f"{name}.json"
    for verb in (["memplan", "--budget", "1GiB"], ["bench", "--device", "cpu", "--steps", "2", "--modes", "eager"]):
        result = run_cli(*verb, "--hf-config", str(path), "--seq", "8")
        lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        assert result.returncode == 2, (verb, result.stderr[-2000:])
        assert len(lines) == 1 and f"field '{_case(path)['_field']}'" in lines[0], result.stderr[-2000:]
        assert_no_traceback(result.stderr, result.stdout)


def test_run_memplan_names_a_job_models_inconsistent_config_and_the_job_runs_as_built(tmp_path: Path) -> None:
    """A Llama's constructor accepts architectures that are not class names; memplan does not
    plan a model whose config breaks the rules a config file is held to: one line, and the
    job runs as it built the model, with its own exit code."""
    path = CORPUS / "llama-architectures-int.json"
    job = [sys.executable, str(Path(__file__).parent / "data" / "run" / "hf_config_job.py"), str(path)]
    done = run_cli("run", "--out", "o", "--memplan", "1GiB", "--", *job, cwd=tmp_path, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("loss") == 2
    reason = [line for line in done.stderr.splitlines() if line.startswith("trainstack run: memplan: ")]
    assert len(reason) == 1 and "field 'architectures'" in reason[0] and reason[0].endswith("; the model runs as the job built it"), done.stderr[-2000:]
    assert_no_traceback(done.stderr)


def test_beginning_and_end_ids_outside_a_small_vocabulary_are_left_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """GPT2Config(vocab_size=256) keeps GPT-2's end id 50256: training never looks it up, and
    memplan plans the model its config builds."""
    from trainstack.nn.hf_check import check_config

    from trainstack.errors import SpecError

    small = {"model_type": "gpt2", "vocab_size": 256, "n_embd": 64, "n_layer": 2, "n_head": 4, "bos_token_id": 50256, "eos_token_id": 50256}
    assert check_config(dict(small), "gpt2/config.json") is None
    # the padding id is the one the embedding is built with: the same id there is refused, naming
    # the field and the ids the vocabulary holds; one inside it passes
    with pytest.raises(SpecError) as refused:
        check_config(small | {"pad_token_id": 50256}, "gpt2/config.json")
    assert refused.value.message == ("gpt2/config.json: field 'pad_token_id' is 50256; "
                                     "accepted: null, -1 (none) or 0 to 255 (vocab_size 256)")
    assert check_config(small | {"pad_token_id": 255}, "gpt2/config.json") is None
    with pytest.raises(SpecError, match="field 'eos_token_id' is -2; accepted: null, -1"):
        check_config(small | {"eos_token_id": -2}, "gpt2/config.json")
    (tmp_path / "gpt2").mkdir()
    (tmp_path / "gpt2" / "config.json").write_text(json.dumps(small | {"architectures": ["GPT2LMHeadModel"]}))
    assert main(["memplan", "--hf-config", str(tmp_path / "gpt2"), "--batch", "1", "--seq", "8", "--budget", "1GiB", "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    # GPT-2 by hand: per block two norms (2 x 128), c_attn 64x192+192, attention's c_proj 64x64+64,
    # c_fc 64x256+256, the MLP's c_proj 256x64+64; token (256x64) and position (1024x64) embeddings,
    # the final norm (128), the output projection tied to the token embedding
    block = 2 * 128 + (64 * 192 + 192) + (64 * 64 + 64) + (64 * 256 + 256) + (256 * 64 + 64)
    params = 2 * block + 256 * 64 + 1024 * 64 + 128
    assert params == 182_016 and planned["breakdown"]["weights"] == 4 * params  # fp32 weights as stored
    assert (planned["blocks"], planned["counts"]["keep"], planned["seq"]) == ("transformer.h", 2, 8)


# The sizes of published configs (their config.json's size fields): none is refused, and the
# parameters counted from them are those the models are known by, within a third.
PUBLISHED = {
    "Llama-3.1-405B": (405e9, dict(model_type="llama", hidden_size=16384, intermediate_size=53248, num_hidden_layers=126, num_attention_heads=128, num_key_value_heads=8,
                                   vocab_size=128256, max_position_embeddings=131072, bos_token_id=128000, eos_token_id=[128001, 128008, 128009], tie_word_embeddings=False)),
    "DeepSeek-V3": (671e9, dict(model_type="deepseek_v3", hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048, n_routed_experts=256, num_experts_per_tok=8,
                                num_hidden_layers=61, num_attention_heads=128, num_key_value_heads=128, vocab_size=129280, max_position_embeddings=163840, tie_word_embeddings=False)),
    "Qwen2-0.5B": (0.49e9, dict(model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                                vocab_size=151936, max_position_embeddings=32768, sliding_window=32768, bos_token_id=151643, eos_token_id=151643, tie_word_embeddings=True)),
    "Mixtral-8x7B": (46.7e9, dict(model_type="mixtral", hidden_size=4096, intermediate_size=14336, num_local_experts=8, num_experts_per_tok=2, num_hidden_layers=32,
                                  num_attention_heads=32, num_key_value_heads=8, vocab_size=32000, max_position_embeddings=32768, tie_word_embeddings=False)),
    "gemma-7b": (8.5e9, dict(model_type="gemma", hidden_size=3072, intermediate_size=24576, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=16, head_dim=256,
                             vocab_size=256000, max_position_embeddings=8192, pad_token_id=0, bos_token_id=2, eos_token_id=1)),
    "Phi-3-mini": (3.8e9, dict(model_type="phi3", hidden_size=3072, intermediate_size=8192, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                               vocab_size=32064, max_position_embeddings=4096, pad_token_id=32000, bos_token_id=1, eos_token_id=32000, tie_word_embeddings=False)),
    "pythia-12b": (12e9, dict(model_type="gpt_neox", hidden_size=5120, intermediate_size=20480, num_hidden_layers=36, num_attention_heads=40, vocab_size=50688,
                              max_position_embeddings=2048, bos_token_id=0, eos_token_id=0, tie_word_embeddings=False)),
    "gpt2-xl": (1.56e9, dict(model_type="gpt2", n_embd=1600, n_layer=48, n_head=25, n_positions=1024, n_ctx=1024, n_inner=None, vocab_size=50257, bos_token_id=50256, eos_token_id=50256)),
}


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_configs_pass_and_count_about_their_parameters(name: str) -> None:
    from trainstack.nn.hf_check import check_config, parameter_count

    known, data = PUBLISHED[name]
    check_config(data, f"{name}/config.json")
    assert 0.75 * known <= parameter_count(data) <= 1.34 * known, (name, parameter_count(data))


def test_a_config_is_read_inside_its_folder_and_as_strict_json(tmp_path: Path, capsys) -> None:
    """A config a repository brings: a link out of its folder and a key given twice are refused in one
    line before transformers reads the file."""
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-CORPUS-TOKEN\n")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "config.json").symlink_to(secret)
    twice = tmp_path / "twice.json"
    twice.write_text('{"model_type": "llama", "hidden_size": 64, "hidden_size": 65}')
    for path, needle in ((linked / "config.json", "leads out of the folder"), (twice, "appears twice")):
        assert main(["memplan", "--hf-config", str(path), "--batch", "1", "--seq", "64", "--budget", "1GiB"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err and "SECRET-CORPUS-TOKEN" not in err, err
