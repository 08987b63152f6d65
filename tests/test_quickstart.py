"""The README's first stack, examples/stacks/quickstart.toml, with real uv: a flavour per Python that
Debian 12, Ubuntu 24.04 and Debian 13 ship, of which a venv build takes those whose Python this
machine has ([build] venv_flavours = "installed-python"), naming the others; verify without
--flavour takes the one built. (benchmarks/fresh_debian.py runs the README's whole command on
those three systems.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.build_fixtures import copy_example, make_lock
from trainstack.builder.api import _with_installed_python
from trainstack.cli import main
from trainstack.errors import ToolMissingError
from trainstack.lock.inputs import load_inputs
from trainstack.verify.run import PARTS


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = copy_example("quickstart", tmp_path_factory.mktemp("quickstart"))
    make_lock(path)  # every flavour locks: lock needs no interpreter of the flavour's Python
    return path


def test_build_takes_the_flavours_whose_python_is_here_and_verify_the_one_built(
    stack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flavours = {layers.flavour.slug: layers.flavour.python for layers in load_inputs(stack).layers}
    assert sorted(flavours.values()) == ["3.11", "3.12", "3.13"]
    build = tmp_path / "build"
    assert main(["build", str(stack), "--build-dir", str(build)]) == 0
    err = capsys.readouterr().err
    here = {p.name for p in build.iterdir() if not p.name.startswith(".")}
    # the Python running these tests is one of them, so its flavour is built; each other one is named
    assert f"py{sys.version_info.major}{sys.version_info.minor}" in " ".join(here)
    for slug, python in flavours.items():
        left_out = f"{slug}: left out, no Python {python} on this machine"
        assert (left_out in err) != (slug in here), err
    if len(here) == 1:  # verify, given no --flavour, takes the one built (its parts left out: only the choice is tested)
        assert main(["verify", str(stack), "--build-dir", str(build), "--skip", ",".join(PARTS)]) == 0
        assert f"{next(iter(here))}: the one flavour built under {build}" in capsys.readouterr().err
    missing = [layers for layers in load_inputs(stack).layers if layers.flavour.slug not in here][:1]
    if missing:  # none of the flavours' Pythons here: refused before anything is downloaded
        with pytest.raises(ToolMissingError, match=r"no flavour's Python is on this machine \(the stack's flavours need Python 3\.1"):
            _with_installed_python(missing)


def test_verify_without_flavour_names_the_built_ones_when_several_or_none(stack: Path, tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(stack), "--build-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "stack has 3 flavours and none is built under" in err and "choose one with --flavour" in err
