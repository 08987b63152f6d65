"""[stack] tag: the image tag of each flavour from a template of flavour fields and components'
locked versions. A template check can judge is refused by `check`; one only the lock can judge
(an unpinned version) by `lock`, before anything is written; the tags reach the bake file and
the release notes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.env_index import index, stack_text  # noqa: F401 (the loopback index fixture)
from trainstack.cli import main
from trainstack.lock.manifest import lock_dir


def with_tag(text: str, tag: str | None, *, version: str = "==1.0", pythons: str = '"3.11"') -> str:
    text = text.replace('demo-pkg = "==1.0"', f'demo-pkg = "{version}"').replace('python = ["3.11"]', f"python = [{pythons}]")
    return text.replace('image = "trainstack/envs"', 'image = "trainstack/envs"' + (f"\ntag = {json.dumps(tag)}" if tag else ""))


@pytest.mark.parametrize(
    ("tag", "pythons", "expected"),
    [
        ("{release}-{torch}", '"3.11"', "'{torch}' is neither a flavour field nor a component (accepted: name, release, slug"),
        ("{release}-py{python:>5}", '"3.11"', "'{python:>5}' is not a tag field"),
        ("{release}-py{python!r}", '"3.11"', "'{python!r}' is not a tag field"),
        ("{name}:{release}", '"3.11"', "':' in the tag template is not tag text"),
        ("{release}-{", '"3.11"', "is not a tag template"),
        ("{release}-demo{demo_pkg}", '"3.11", "3.12"',
         "flavours cpu-debian12-py311-release and cpu-debian12-py312-release both get the tag '1.0-demo1.0'"),
        ("{release}-" + "x" * 130, '"3.11"', "is not a valid image tag (OCI: letters, digits"),
        ("-{release}", '"3.11"', "'-1.0' is not a valid image tag"),
    ],
)
def test_check_refuses_a_template_in_one_line_naming_the_field(tmp_path: Path, tag: str, pythons: str, expected: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    stack = tmp_path / "envs.toml"
    stack.write_text(with_tag(stack_text(), tag, pythons=pythons))
    assert main(["check", str(stack)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith(f"error: {stack}:5: stack.tag: "), err
    assert expected in err[0], err


def test_tags_from_locked_versions_reach_the_bake_file_and_the_release_notes(index: str, tmp_path: Path) -> None:  # noqa: F811
    stack = tmp_path / "envs.toml"
    stack.write_text(with_tag(stack_text(index, release="25.07"), "{release}-demo{demo_pkg}-py{python}-{channel}",
                              version=">=0.5", pythons='"3.11", "3.12"'))
    assert main(["check", str(stack)]) == 0
    assert main(["lock", str(stack)]) == 0
    assert main(["render", str(stack), "--out", str(tmp_path / "render")]) == 0
    bake = (tmp_path / "render" / "docker-bake.hcl").read_text()
    assert 'tags       = ["trainstack/envs:25.07-demo1.0-py3.11-release"]' in bake
    assert 'tags       = ["trainstack/envs:25.07-demo1.0-py3.12-release"]' in bake
    (tmp_path / "results").mkdir()
    assert main(["release", str(stack), "--results", str(tmp_path / "results"), "--out", str(tmp_path / "notes")]) == 0
    notes = (tmp_path / "notes" / "RELEASE.md").read_text()
    assert "| `trainstack/envs:25.07-demo1.0-py3.11-release` |" in notes
    # a stack built as venvs ships no image: the quick start never tells its reader to run one
    assert "docker run" not in notes and "docker pull" not in notes
    released = json.loads((tmp_path / "notes" / "release.json").read_text())
    assert sorted(f["image"] for f in released["flavours"]) == [
        "trainstack/envs:25.07-demo1.0-py3.11-release", "trainstack/envs:25.07-demo1.0-py3.12-release"]


def test_a_template_only_the_lock_can_judge_is_refused_by_lock_before_anything_is_written(
        index: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    stack = tmp_path / "envs.toml"
    stack.write_text(with_tag(stack_text(index), "{release}-demo{demo_pkg}", version=">=0.5", pythons='"3.11", "3.12"'))
    assert main(["check", str(stack)]) == 0  # the version is not pinned: only the lock knows it
    capsys.readouterr()
    assert main(["lock", str(stack)]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {stack}:5: stack.tag: flavours cpu-debian12-py311-release and cpu-debian12-py312-release "
                      "both get the tag '1.0-demo1.0' (accepted: a template whose fields tell every flavour apart, "
                      "such as one with '{slug}')"], err
    assert not lock_dir(stack).exists()
