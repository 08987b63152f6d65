"""Release notes show what was built: after a venv-only build no `docker pull` of an image that
was never made, but the venv's activation (and nothing for a flavour not built); the release
folder keeps its lock manifest, which the next release takes as --previous as it is. render
gives each flavour its own conda environment.yml.

Real: a two-flavour stack (Python 3.11 and 3.12) locked from a loopback index, rendered, one
flavour built (venv), then released twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.stalling_index import STACK, stalling_index  # noqa: F401 (a fixture)

SLUG = "cpu-debian12-py311-release"


def cli(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "UV_CACHE_DIR": str(project.parent / "uv-cache"), "COLUMNS": "300"}
    return subprocess.run([sys.executable, "-m", "trainstack", *args], cwd=project, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.python("3.11")  # builds a py311 flavour
def test_notes_of_a_venv_build_show_no_image_and_the_folder_keeps_the_manifest(stalling_index, tmp_path: Path) -> None:
    url, _ = stalling_index
    project = tmp_path / "project"
    project.mkdir()
    stack = project / "stall.toml"
    text = (STACK.format(index=url).replace('python = ["3.11"]', 'python = ["3.11", "3.12"]')
            .replace("[build]\n", '[build]\nbase = { debian12 = "debootstrap:bookworm" }\n'))
    stack.write_text(text, encoding="utf-8")
    for args in (("lock", "stall.toml"), ("render", "stall.toml", "--out", "rendered"), ("build", "stall.toml", "--flavor", SLUG),
                 ("release", "stall.toml", "--results", "build", "--out", "r1")):
        done = cli(project, *args)
        assert done.returncode == 0, (args, done.stderr)
    for python in ("3.11", "3.12"):  # each flavour's own conda environment
        slug = f"cpu-debian12-py{python.replace('.', '')}-release"
        found = yaml.safe_load((project / "rendered" / slug / "environment.yml").read_text())
        assert found["name"] == f"stall-{slug}" and f"python={python}" in found["dependencies"]
        assert "tinypkg==1.0" in found["dependencies"][-1]["pip"]
    notes = (project / "r1" / "RELEASE.md").read_text()
    assert "docker pull" not in notes and "docker run" not in notes
    assert f". build/{SLUG}/venv/bin/activate" in notes
    assert "cpu-debian12-py312-release:" not in notes.split("## Quick start", 1)[1]  # not built: nothing to start
    kept = project / "r1" / "stack.lock.json"
    assert kept.read_bytes() == (project / "stall.lock" / "stack.lock.json").read_bytes()
    assert json.loads((project / "r1" / "release.json").read_text())["quick_start"][0]["commands"][0].startswith(". build/")

    # the next release takes the kept manifest as it is
    stack.write_text(text.replace('release = "1"', 'release = "2"'), encoding="utf-8")
    assert cli(project, "lock", "stall.toml").returncode == 0
    done = cli(project, "release", "stall.toml", "--previous", "r1/stack.lock.json", "--out", "r2")
    assert done.returncode == 0, done.stderr
    assert "following 1" in (project / "r2" / "RELEASE.md").read_text()
