"""A flavour built with --skip-sources: the components it left out are 'not built', shown as
such by verify, and not failures (no import, drift or op check of them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.build_fixtures import make_lock, source_stack
from trainstack.cli import main

SLUG = "cpu-debian12-py311-release"


@pytest.mark.python("3.11")  # builds a py311 flavour
def test_components_skipped_on_purpose_are_not_built_not_failures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack, _, _ = source_stack(tmp_path)
    make_lock(stack)
    build = tmp_path / "build"
    assert main(["build", str(stack), "--build-dir", str(build), "--skip-sources"]) == 0
    capsys.readouterr()
    gate = build / SLUG / "verify.json"
    gate.write_text('{"verdict": "pass", "note": "the full gate ran before"}\n')
    code = main(["verify", str(stack), "--build-dir", str(build), "--skip", "suites", "--skip", "linkcheck"])
    out = capsys.readouterr().out
    # a partial run goes beside the full gate's result, never over it
    assert gate.read_text() == '{"verdict": "pass", "note": "the full gate ran before"}\n'
    assert "wrote " + str(build / SLUG / "verify.partial.json") in out.replace("\n", "")
    result = json.loads((build / SLUG / "verify.partial.json").read_text())
    assert result["not_built"] == ["tsdemo"]
    assert "not built (build --skip-sources): tsdemo" in out
    assert not [r for r in result["reasons"] if "tsdemo" in r], result["reasons"]
    assert not [s for s in result["smoke"] if "tsdemo" in s["name"]]
    assert code == 0, result["reasons"]
