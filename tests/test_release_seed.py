"""A real release replayed (tests/data/release_seed: torch-extras 2024.4.0 -> 2024.5.0): both stacks
pass `check` with the torch 2.2/2.3 rules, and `release` lists the seven changes of that
release, the apex commit included. Also: downgrades and path sources in the diff, and a
stack's own rules (a [rules] table, a rules file beside it) validated like the shipped ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.release_seed import SEVEN, seed  # noqa: F401 (seed: fixture)
from trainstack.cli import main
from trainstack.lock.manifest import LockedFlavour, load_manifest
from trainstack.release.diff import diff_manifests
from trainstack.stackfile import load_stack


def test_seed_stacks_pass_the_rules(seed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for side in ("before", "after"):
        assert main(["check", str(seed / side / "torch-extras.toml")]) == 0
    assert "all rules hold" in capsys.readouterr().out


def test_seed_release_lists_the_seven_changes_apex_included(seed: Path, tmp_path: Path) -> None:
    out = tmp_path / "notes"
    previous = seed / "before/torch-extras.lock/stack.lock.json"
    assert main(["release", str(seed / "after/torch-extras.toml"), "--previous", str(previous), "--out", str(out)]) == 0
    notes = json.loads((out / "release.json").read_text())
    components = [c for c in notes["updates"]["common"] if c["component"]]
    assert [f"{c['name']}: " + _text(c) for c in components] == SEVEN
    kinds = {c["name"]: c["kind"] for c in components}
    assert kinds == {"apex": "changed", "deepspeed": "upgraded", "flash-attn": "upgraded", "numpy": "added",
                     "torch": "upgraded", "torchaudio": "upgraded", "torchvision": "upgraded"}
    assert notes["versions"]["rows"]["apex"] == ["a7de60e"]
    markdown = (out / "RELEASE.md").read_text()
    for line in SEVEN:
        assert f"- {line}\n" in markdown
    assert "| apex | a7de60e |" in markdown
    assert "a7de60e" in (out / "release.html").read_text()


def _text(change: dict) -> str:
    if change["old"] is None:
        return f"added {change['new']}"
    return f"{change['old']} → {change['new']}"


def test_a_downgrade_is_marked(seed: Path) -> None:
    before = load_manifest(seed / "before/torch-extras.lock/stack.lock.json")
    after = load_manifest(seed / "after/torch-extras.lock/stack.lock.json")
    backwards = diff_manifests(after, before, ["torch", "apex", "numpy"])
    texts = [c.text() for c in backwards.common if c.component]
    assert texts == ["apex: a7de60e → 2386a91", "numpy: removed (was 1.26.4)", "torch: 2.3.0 → 2.2.2 (downgraded)"]
    assert [c.kind for c in backwards.common if c.component] == ["changed", "removed", "downgraded"]


def test_path_sources_are_listed(seed: Path) -> None:
    after = load_manifest(seed / "after/torch-extras.lock/stack.lock.json")
    [(slug, flavour)] = after.flavours.items()
    moved = flavour.model_copy(update={"sources": {**flavour.sources, "kernels": "file:///src/kernels-v2"}})
    older = flavour.model_copy(update={"sources": {**flavour.sources, "kernels": "file:///src/kernels-v1"}})
    changes = diff_manifests(after.model_copy(update={"flavours": {slug: older}}),
                             after.model_copy(update={"flavours": {slug: moved}}), ["kernels"])
    assert [c.text() for c in changes.common] == ["kernels: path /src/kernels-v1 → path /src/kernels-v2"]
    assert isinstance(moved, LockedFlavour)


STACK_2_0 = """
[stack]
name = "old-torch"
release = "1"
image = "old-torch"

[components]
torch = "==1.13.1"

[matrix]
cuda = ["cpu"]
os = ["ubuntu22.04"]
python = ["3.10"]
channel = ["release"]

[build]
base = { "ubuntu22.04" = "docker.io/library/ubuntu:22.04" }
"""

RELEASE_2_0 = """
[rules.torch.releases."1.13"]
variants = ["cpu", "cu116", "cu117"]
pypi_default = "cu117"
pythons = ["3.7", "3.8", "3.9", "3.10"]
source = "https://github.com/pytorch/pytorch/blob/main/RELEASE.md#release-compatibility-matrix"
"""


def test_a_stack_adds_rules_with_a_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack = tmp_path / "old.toml"
    stack.write_text(STACK_2_0)
    assert main(["check", str(stack)]) != 0  # torch 1.13 is not in the shipped data
    assert "torch 1.13 is not in the rules data" in capsys.readouterr().out
    stack.write_text(STACK_2_0 + RELEASE_2_0)
    assert main(["check", str(stack)]) == 0
    assert "1.13" in load_stack(stack).rules_in_effect.torch.releases


def test_a_rules_file_beside_the_stack_is_validated_like_the_shipped_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack = tmp_path / "old.toml"
    stack.write_text(STACK_2_0)
    beside = tmp_path / "old.rules.toml"
    beside.write_text(RELEASE_2_0.replace("[rules.", "[").replace('pypi_default = "cu117"\n', ""))
    assert main(["check", str(stack)]) == 2
    err = capsys.readouterr().err
    assert f"{beside}:2: torch.releases.1.13.pypi_default: required field is missing" in err
    beside.write_text(RELEASE_2_0.replace("[rules.", "["))
    assert main(["check", str(stack)]) == 0


def test_a_bad_rules_table_names_the_line_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack = tmp_path / "old.toml"
    stack.write_text(STACK_2_0 + RELEASE_2_0.replace("pythons =", "pythonz ="))
    assert main(["check", str(stack)]) == 2
    err = capsys.readouterr().err
    assert f"{stack}:" in err and "rules.torch.releases.1.13.pythonz: unknown field" in err
