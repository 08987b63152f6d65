"""A torch changed after the fact is named: a uv venv holding the same CPU torch wheel as this
interpreter (uv links it from its cache), one file of the torch distribution replaced as a later
install would (a new file in its place), and verify's file part against every distribution's RECORD:
torch, and only torch, is named."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainstack.cli import main

torch = pytest.importorskip("torch")
ONLY_FILES = ["--skip", "report,advisories,ops,linkcheck,smoke,suites"]


@pytest.fixture(scope="module")
def torch_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("torch") / "venv"
    subprocess.run(["uv", "venv", "-q", "--python", sys.executable, venv], check=True, capture_output=True)
    links = [arg for path in os.environ.get("PIP_FIND_LINKS", "").split() for arg in ("--find-links", path)]
    done = subprocess.run(["uv", "pip", "install", "-q", "--no-deps", "--python", venv / "bin" / "python", *links,
                           f"torch=={torch.__version__}"], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"torch {torch.__version__} cannot be installed into a venv here: {done.stderr.strip()[-200:]}")
    return venv


def test_a_replaced_file_of_torch_names_torch(torch_venv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    python = str(torch_venv / "bin" / "python")
    out = tmp_path / "verify.json"
    version = next((torch_venv / "lib").glob("python3.*/site-packages/torch/version.py"))
    record = next(version.parents[1].glob("torch-*.dist-info")) / "RECORD"
    digest = base64.urlsafe_b64encode(hashlib.sha256(version.read_bytes()).digest()).rstrip(b"=").decode()
    assert f"torch/version.py,sha256={digest}," in record.read_text()  # as installed, the file is the wheel's
    # a new file in its place (the old one may be a link into uv's cache: never written through)
    replacement = version.with_name("version.py.new")
    replacement.write_text(version.read_text().replace(torch.__version__, "2.13.0+patched"))
    os.replace(replacement, version)
    capsys.readouterr()
    assert main(["verify", "--python", python, *ONLY_FILES, "-o", str(out)]) == 1
    shown = capsys.readouterr().out
    files = json.loads(out.read_text())["files"]
    [change] = files["distributions"]
    assert (change["name"], change["change"], change["files"], change["example"]) == ("torch", "modified", 1, str(version.relative_to(torch_venv)))
    reason = f"files: torch {torch.__version__}: 1 file(s) differ from its RECORD, e.g. {change['example']}"
    assert reason in json.loads(out.read_text())["reasons"]
    assert f"torch {torch.__version__}: 1 file(s) differ from its RECORD" in shown and files["checked"] > 10_000
