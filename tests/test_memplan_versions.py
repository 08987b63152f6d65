"""memplan under the transformers versions it supports, each in a uv venv that shares this
Python's torch (``--system-site-packages``): the oldest (4.46), 4.57 (the last 4.x, whose Qwen2
loop reads its layers' ``attention_type``) and the newest 5.x installed here. One small family
each (Qwen2: tied embeddings, QKV biases, a loop that reads its layers) through the families
benchmark: the saved bytes and whole-step peaks within the errors they have on the newest.
A version outside the range (4.45) is refused in one line with exit 6.

The venvs are kept under $TRAINSTACK_TEST_VENVS (default: .venv/transformers-versions in the
repository, which git ignores), so a second run only runs the family. The full matrix of all
families and versions is benchmarks/memplan_families.py --matrix.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import trainstack  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SRC = str(Path(trainstack.__file__).resolve().parent.parent)
VENVS = Path(os.environ.get("TRAINSTACK_TEST_VENVS") or ROOT / ".venv" / "transformers-versions")
pytestmark = [pytest.mark.versions, pytest.mark.timeout(600)]


def _python(version: str) -> str:
    """A venv's Python with transformers ``version`` and this Python's torch; made once."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed")
    venv = VENVS / version
    done = venv / "trainstack-ready"
    if not done.exists():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([uv, "venv", "-q", str(venv), "--python", sys.executable, "--system-site-packages"], check=True, timeout=120)
        subprocess.run([uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), f"transformers=={version}"], check=True, timeout=300)
        done.touch()
    return str(venv / "bin" / "python")


def _env() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PYTHONPATH": SRC}


def _family(python: str, out: Path) -> dict:
    done = subprocess.run([python, str(ROOT / "benchmarks" / "memplan_families.py"), "--only", "qwen2", "--out", str(out)],
                          capture_output=True, text=True, env=_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads((out / "memplan_families.json").read_text())
    (row,) = document["rows"]
    assert "error" not in row, row
    return document


@pytest.mark.parametrize("version", ["4.46.2", "4.57.1", "installed"])
def test_a_family_plans_within_todays_errors(version: str, tmp_path: Path) -> None:
    python = sys.executable if version == "installed" else _python(version)
    document = _family(python, tmp_path)
    if version == "installed":
        assert int(document["transformers"].split(".")[0]) >= 5, document["transformers"]
    else:
        assert document["transformers"] == version
    (row,) = document["rows"]
    # the errors the families table shows on transformers 5.x: the saved bytes exact, peaks within 0.01%
    assert row["saved_predicted"] == row["saved_autograd"], row
    for choice in ("keep", "full", "mixed"):
        assert abs(row[f"peak_{choice}_predicted"] / row[f"peak_{choice}_fake_step"] - 1) <= 0.0002, (choice, row)


def test_a_transformers_outside_the_range_is_refused_in_one_line(tmp_path: Path) -> None:
    python = _python("4.45.2")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
                                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128}))
    done = subprocess.run([python, "-m", "trainstack.cli", "memplan", "--hf-config", str(config), "--seq", "8", "--budget", "1GiB"],
                          capture_output=True, text=True, env=_env(), timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert done.returncode == 6, done.stderr[-2000:]
    assert len(lines) == 1 and "memplan supports transformers 4.46 to 5.x; found transformers 4.45.2" in lines[0], done.stderr[-2000:]
    assert "Traceback" not in done.stderr
