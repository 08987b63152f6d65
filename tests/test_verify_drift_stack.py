"""Drift counts only what the stack did not ask for: a real venv build with a toolchain layer
(ninja, setuptools, wheel), a git component and a path component has none of them 'extra'; a
package installed by hand afterwards is."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.build_fixtures import git_package, make_lock, source_stack
from trainstack.cli import main

SLUG = "cpu-debian12-py311-release"


@pytest.mark.python("3.11")  # builds a py311 flavour
def test_what_the_stack_installs_is_never_extra(tmp_path: Path) -> None:
    stack, _, _ = source_stack(tmp_path)
    git_package(tmp_path, "tspath")  # a folder beside the stack: a path component
    text = stack.read_text()
    stack.write_text(text.replace("\n\n[matrix]", '\ntspath = { path = "tspath-repo" }\n\n[matrix]', 1))
    make_lock(stack)
    build = tmp_path / "build"
    assert main(["build", str(stack), "--build-dir", str(build)]) == 0
    venv = build / SLUG / "venv"
    installed = json.loads(subprocess.run([venv / "bin" / "python", "-c", "import json, importlib.metadata as m; "
                                           "print(json.dumps(sorted(d.metadata['Name'].lower() for d in m.distributions())))"],
                                          capture_output=True, text=True, check=True).stdout)
    assert {"ninja", "tsdemo", "tspath"} <= set(installed), installed
    out = tmp_path / "verify.json"
    code = main(["verify", str(stack), "--build-dir", str(build), "--skip", "ops,linkcheck,smoke,suites", "-o", str(out)])
    drift = json.loads(out.read_text())["report"]["drift"]
    assert drift["extra"] == [] and drift["missing"] == [] and drift["different"] == [], drift
    assert code == 0
    # one package nobody asked for: extra, as before
    git_package(tmp_path / "more", "handmade")
    subprocess.run(["uv", "pip", "install", "-q", "--python", str(venv / "bin" / "python"), str(tmp_path / "more" / "handmade-repo")],
                   check=True, capture_output=True)
    main(["verify", str(stack), "--build-dir", str(build), "--skip", "ops,linkcheck,smoke,suites", "-o", str(out)])
    assert json.loads(out.read_text())["report"]["drift"]["extra"] == ["handmade"]


def test_a_compiler_cache_that_is_not_installed_is_said(tmp_path: Path, monkeypatch) -> None:
    """The stack asks for ccache; on a PATH without it the build says the compiles run without
    a cache instead of leaving it silent."""
    import shutil

    from trainstack.buildenv import missing_compiler_cache
    from trainstack.stackfile.schema import CompilerCache

    asked = CompilerCache(kind="ccache", max_size="5G")
    if shutil.which("ccache") is not None:
        assert missing_compiler_cache(asked) is None
    monkeypatch.setenv("PATH", str(tmp_path))  # a folder without ccache
    assert "asks for ccache, which is not installed here" in (missing_compiler_cache(asked) or "")
    assert missing_compiler_cache(CompilerCache(kind="none")) is None
