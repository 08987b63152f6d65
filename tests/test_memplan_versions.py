"""memplan under the transformers and torch versions it supports: transformers in uv venvs
that share this Python's torch (``--system-site-packages``): the oldest (4.46), 4.57 (the last
4.x, whose Qwen2 loop reads its layers' ``attention_type``) and the newest 5.x installed here;
and torch 2.5 and 2.7 in venvs of their own (PyPI's CUDA builds, run on the CPU) with the
transformers their stacks ship (4.46 with torch 2.5, 4.53 with torch 2.7). A few small families
each through the families benchmark: the saved bytes and whole-step peaks within the errors
they have on the newest (Qwen2: tied embeddings, QKV biases, a loop that reads its layers;
BART under 4.x: its decoder's LayerDrop loop). A version outside the range (transformers
4.45) is refused in one line with exit 6.

The venvs (tests/library_versions.py) are kept under $TRAINSTACK_TEST_VENVS, one per version
for the whole session, so a second run only runs the families. The full matrix of families and
versions is benchmarks/memplan_families.py --matrix.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.clirun import assert_no_traceback
from tests.library_versions import ROOT, env, torch_alone_python, torch_python, transformers_python  # noqa: E402

pytestmark = [pytest.mark.versions, pytest.mark.timeout(1500)]
# torch of its own: (torch, transformers its stacks ship, families run under it)
TORCHES = {"2.5.1": ("4.46.2", "qwen2,bart"), "2.7.1": ("4.53.3", "qwen2")}


@pytest.fixture(scope="module", params=list(TORCHES))
def torch_version(request) -> tuple[str, str]:
    """(the torch version, its venv's Python): each made once for the module."""
    return request.param, torch_python(request.param, TORCHES[request.param][0])


def _families(python: str, out: Path, only: str = "qwen2") -> dict:
    done = subprocess.run([python, str(ROOT / "benchmarks" / "memplan_families.py"), "--only", only, "--out", str(out)],
                          capture_output=True, text=True, env=env(), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads((out / "memplan_families.json").read_text())
    assert [row["family"] for row in document["rows"]] == only.split(",")
    for row in document["rows"]:
        assert "error" not in row, row
        # the errors the families table shows on transformers 5.x: the saved bytes exact, peaks within 0.01%
        assert row["saved_predicted"] == row["saved_autograd"], row
        for choice in ("keep", "full", "mixed"):
            assert abs(row[f"peak_{choice}_predicted"] / row[f"peak_{choice}_fake_step"] - 1) <= 0.0002, (choice, row)
    return document


@pytest.mark.parametrize("version", ["4.46.2", "4.57.1", "installed"])
def test_a_family_plans_within_todays_errors(version: str, tmp_path: Path) -> None:
    python = sys.executable if version == "installed" else transformers_python(version)
    document = _families(python, tmp_path)
    if version == "installed":
        assert int(document["transformers"].split(".")[0]) >= 5, document["transformers"]
    else:
        assert document["transformers"] == version


def test_families_plan_within_todays_errors_under_an_older_torch(torch_version: tuple[str, str], tmp_path: Path) -> None:
    version, python = torch_version
    transformers_version, only = TORCHES[version]
    document = _families(python, tmp_path, only)
    assert document["torch"].split("+")[0] == version and document["transformers"] == transformers_version


def test_a_transformers_outside_the_range_is_refused_in_one_line(tmp_path: Path) -> None:
    python = transformers_python("4.45.2")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
                                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128}))
    done = subprocess.run([python, "-m", "trainstack.cli", "memplan", "--hf-config", str(config), "--seq", "8", "--budget", "1GiB"],
                          capture_output=True, text=True, env=env(), timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert done.returncode == 6, done.stderr[-2000:]
    assert len(lines) == 1 and "memplan supports transformers 4.46 to 5.x; found transformers 4.45.2" in lines[0], done.stderr[-2000:]
    assert_no_traceback(done.stderr)


@pytest.mark.parametrize("argv", [
    ["memplan", "--hf-config", "CONFIG", "--seq", "8", "--budget", "1GiB"],
    ["memplan", "--preset", "tiny", "--seq", "8", "--budget", "1GiB"],
    ["bench", "--hf-config", "CONFIG", "--seq", "8", "--device", "cpu"],
], ids=["memplan-hf-config", "memplan-preset", "bench-hf-config"])
def test_a_torch_outside_the_range_is_refused_in_one_line_before_it_is_imported(argv: list[str], tmp_path: Path) -> None:
    """torch 2.4.1's wheel without its CUDA libraries: importing it would fail with a traceback,
    so the one line shows the version was read, and refused, first."""
    if sys.version_info >= (3, 13):
        pytest.skip("skip: torch 2.4.1 has no wheel for Python 3.13 or newer")
    python = torch_alone_python("2.4.1")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "qwen2", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
                                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}))
    done = subprocess.run([python, "-m", "trainstack.cli", *[str(config) if a == "CONFIG" else a for a in argv]],
                          capture_output=True, text=True, env=env(), timeout=120)
    verb = "bench --hf-config" if argv[0] == "bench" else "memplan"
    assert done.returncode == 6, done.stderr[-2000:]
    assert done.stderr.strip() == f"error: {verb} supports torch 2.5 or newer; found torch 2.4.1 (pip install 'torch>=2.5')", done.stderr[-2000:]


MIXTRAL = {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "vocab_size": 256, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64, "num_local_experts": 4, "num_experts_per_tok": 2}


@pytest.mark.parametrize("version", ["4.57.1", "installed"])
def test_mixtral_plans_where_its_experts_are_grouped_products_and_says_why_not_where_they_gather(version: str, tmp_path: Path) -> None:
    """transformers 4.x computes each expert on the tokens routed to it (aten.nonzero, a shape
    fake tensors cannot know): one line saying so; 5.x's grouped products plan."""
    python = sys.executable if version == "installed" else transformers_python(version)
    (tmp_path / "config.json").write_text(json.dumps(MIXTRAL))
    done = subprocess.run([python, "-m", "trainstack.cli", "memplan", "--hf-config", str(tmp_path), "--batch", "1", "--seq", "16", "--budget", "1GiB", "--json"],
                          capture_output=True, text=True, env=env(), timeout=300)
    assert_no_traceback(done.stderr)
    if version == "installed":
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout)["blocks"] == "model.layers"
        return
    lines = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(lines) == 1 and "MixtralForCausalLM: op aten.nonzero.default has a data-dependent output: its mixture-of-experts layers" in lines[0], done.stderr[-2000:]
    assert "grouped matrix products" in lines[0]
