"""The decoder families the seeds' users train (Llama, Qwen2, Mistral, Gemma, Phi-3, GPT-NeoX,
GPT-2), each from a small config.json of its own kind, through ``memplan --hf-config``,
``bench --hf-config`` (the planned mode, on the CPU) and ``run --memplan`` (a job that builds
each model from its config and trains it), under the oldest versions trainstack supports
(transformers 4.46 with torch 2.5, as ACS 24.11 ships them: a venv of tests/library_versions.py)
and the newest installed here. Configs of each family broken in the ways a repository's config
is (a padding id outside the vocabulary, an architecture or a model type transformers does not
have, an activation the model's constructor does not know) are refused in one line naming the
field, with exit 2, under every transformers version of the matrix (4.46, 4.53, 4.57, newest).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.clirun import assert_no_traceback
from tests.library_versions import env, torch_python, transformers_python  # noqa: E402

pytestmark = [pytest.mark.versions, pytest.mark.timeout(1500)]
DATA = Path(__file__).parent / "data" / "run"
OLDEST = ("2.5.1", "4.46.2")  # torch, transformers

SMALL = {"vocab_size": 256, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 64}
FAMILIES = {
    "llama": ("LlamaForCausalLM", {**SMALL, "num_key_value_heads": 2}),
    "qwen2": ("Qwen2ForCausalLM", {**SMALL, "num_key_value_heads": 2, "tie_word_embeddings": True}),
    "mistral": ("MistralForCausalLM", {**SMALL, "num_key_value_heads": 2, "sliding_window": None}),
    "gemma": ("GemmaForCausalLM", {**SMALL, "num_key_value_heads": 2, "head_dim": 8}),
    "phi3": ("Phi3ForCausalLM", {**SMALL, "num_key_value_heads": 2, "pad_token_id": 0}),
    "gpt_neox": ("GPTNeoXForCausalLM", SMALL),
    "gpt2": ("GPT2LMHeadModel", {"vocab_size": 256, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64}),
}
# bench runs Llama and Mistral configs as its own decoder (their blocks are exactly its own)
BLOCKS = {"gpt2": "transformer.h", "gpt_neox": "gpt_neox.layers"}


def configs(folder: Path) -> dict[str, Path]:
    made = {}
    for family, (architecture, sizes) in FAMILIES.items():
        (folder / family).mkdir(parents=True)
        (folder / family / "config.json").write_text(json.dumps({"model_type": family, "architectures": [architecture], **sizes}))
        made[family] = folder / family
    return made


@pytest.fixture(scope="module", params=["oldest", "newest"])
def python(request) -> str:
    """The Python each version runs under: a venv made once for the module, or this one."""
    return torch_python(*OLDEST) if request.param == "oldest" else sys.executable


def _version_of(python: str) -> tuple[str, str]:
    probe = "import torch, transformers; print(torch.__version__.split('+')[0], transformers.__version__)"
    return tuple(subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True, timeout=120).stdout.split())  # type: ignore[return-value]


def test_memplan_and_bench_plan_each_family(python: str, tmp_path: Path) -> None:
    if python != sys.executable:
        assert _version_of(python) == OLDEST
    folders = configs(tmp_path)
    done = subprocess.run([python, str(DATA / "hf_family_verbs.py"), "plan", *map(str, folders.values())], capture_output=True, text=True, env=env(), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)
    for family, folder in folders.items():
        memplan, bench = results[f"{folder} memplan"], results[f"{folder} bench"]
        assert memplan["code"] == 0 and not memplan["errors"], (family, memplan)
        plan = memplan["document"]
        assert len(plan["choices"]) == 2 and plan["predicted_reserved_bytes"] <= plan["budget_bytes"], (family, plan)
        assert plan["blocks"] == BLOCKS.get(family, "model.layers"), (family, plan["blocks"])
        assert bench["code"] == 0 and not bench["errors"], (family, bench)
        (row,) = bench["document"]["rows"]
        assert row["status"] == "ok" and row["mode"] == "planned" and "keep" in row["plan"], (family, row)


def test_run_memplan_plans_each_familys_job_model(python: str, tmp_path: Path) -> None:
    """A sweep job trains each family's model two steps, each in a child it forks after its
    imports; in each child the hook plans the model the child built, for the budget, and the
    job's losses are its own."""
    folders = configs(tmp_path)
    job = [python, str(DATA / "hf_configs_job.py"), *map(str, folders.values())]
    done = subprocess.run([python, "-m", "trainstack.cli", "run", "--out", "o", "--memplan", "1GiB", "--", *job],
                          capture_output=True, text=True, env=env(), cwd=tmp_path, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_no_traceback(done.stderr)
    said = [line for line in done.stderr.splitlines() if line.startswith(("model ", "trainstack run: memplan"))]
    for family, folder in folders.items():
        assert done.stdout.count(f"{folder} step ") == 2, (family, done.stdout[-2000:])
        at = said.index(f"model {folder}")
        assert said[at + 1].startswith("trainstack run: memplan for 1GiB: 2 keep") and "predicted peak" in said[at + 1], (family, said)


# every transformers of the matrix: (torch of its own or None for this Python's, transformers)
EVERY = {"4.46.2": ("2.5.1", "4.46.2"), "4.53.3": ("2.7.1", "4.53.3"), "4.57.1": (None, "4.57.1"), "newest": None}
# the activation field each family's constructor reads (Gemma: hidden_activation in 4.x, hidden_act in 5)
ACTIVATION = {"gpt2": ("activation_function",), "gemma": ("hidden_act", "hidden_activation")}


def broken(folder: Path) -> dict[Path, tuple[str, ...]]:
    """Config folders of each family broken one way each, with the fields their errors may name."""
    made = {}
    for family, (architecture, sizes) in FAMILIES.items():
        base = {"model_type": family, "architectures": [architecture], **sizes}
        activation = ACTIVATION.get(family, ("hidden_act",))
        cases = {
            "pad-outside-vocab": ({**base, "pad_token_id": 256}, ("pad_token_id",)),
            "unknown-architecture": ({**base, "architectures": ["NoSuchModelForCausalLM"]}, ("architectures",)),
            "unknown-model-type": ({**base, "model_type": f"{family}_nonesuch"}, ("model_type",)),
            "unknown-activation": ({**base, **dict.fromkeys(activation, "nonesuch_activation")}, activation),
        }
        for case, (fields, named) in cases.items():
            (folder / f"{family}-{case}").mkdir(parents=True)
            (folder / f"{family}-{case}" / "config.json").write_text(json.dumps(fields))
            made[folder / f"{family}-{case}"] = named
    return made


@pytest.mark.parametrize("version", EVERY)
def test_broken_configs_of_each_family_are_refused_in_one_line_naming_the_field(version: str, tmp_path: Path) -> None:
    spec = EVERY[version]
    python = sys.executable if spec is None else transformers_python(spec[1]) if spec[0] is None else torch_python(*spec)
    cases = broken(tmp_path)
    done = subprocess.run([python, str(DATA / "hf_family_verbs.py"), "refuse", *map(str, cases)], capture_output=True, text=True, env=env(), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)
    for folder, named in cases.items():
        for verb in ("memplan", "bench"):
            result = results[f"{folder} {verb}"]
            assert result["code"] == 2, (folder.name, verb, result)
            (line,) = result["errors"]
            assert line.startswith(f"error: {folder}") and any(f"field '{field}'" in line for field in named), (folder.name, verb, line)
