"""render: Dockerfiles, bake file, workflow and environment.yml from real locks, checked by hadolint."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.build_fixtures import copy_example, git_package, hadolint_errors, make_lock
from tests.clirun import assert_no_traceback
from trainstack.cli import main
from trainstack.render import render_stack

SLUG = "cpu-debian12-py311-release"
TORCH_SLUG = "cu130-ubuntu2404-py311-release"



@pytest.fixture(scope="module")
def cpu_render(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cpu")
    stack = copy_example("cpu-minimal", root)
    make_lock(stack)
    render_stack(stack, root / "out")
    return root / "out"


@pytest.fixture(scope="module")
def torch_render(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("torch")
    url, sha = git_package(root, "apex")
    stack = copy_example(
        "torch-cuda",
        root,
        {
            r'git = "https://github.com/NVIDIA/apex", commit = "[0-9a-f]+"': f'git = "{url}", commit = "{sha}"',
            r'cuda = \["12.8", "13.0"\]': 'cuda = ["13.0"]',
            r'os = \["ubuntu22.04", "ubuntu24.04"\]': 'os = ["ubuntu24.04"]',
            r'python = \["3.11", "3.12"\]': 'python = ["3.11"]',
            r'channel = \["release", "nightly"\]': 'channel = ["release"]',
            r'exclude = \[\{ cuda = "13.0", os = "ubuntu22.04" \}\]': "",
        },
    )
    make_lock(stack)
    render_stack(stack, root / "out")
    return root / "out"


def test_cpu_files_exist_and_pass_hadolint(cpu_render: Path) -> None:
    for name in ("Dockerfile", "torch.txt", "extras.txt", "toolchain.txt"):
        assert (cpu_render / SLUG / name).is_file()
    assert hadolint_errors(cpu_render / SLUG / "Dockerfile") == []


def test_layers_go_from_least_to_most_often_changed(cpu_render: Path) -> None:
    text = (cpu_render / SLUG / "Dockerfile").read_text()
    stages = re.findall(r"^FROM \S+ AS (\S+)$", text, flags=re.M)
    assert stages == ["base", "system", "torch", "extras", "final"]
    assert "debootstrap bookworm" in text
    torch_lock = (cpu_render / SLUG / "torch.txt").read_text()
    extras_lock = (cpu_render / SLUG / "extras.txt").read_text()
    assert "numpy==" in torch_lock and "numpy==" not in extras_lock
    assert "hypothesis==" in extras_lock and "--hash=sha256:" in extras_lock


def test_no_secret_in_arg_env_or_copy(cpu_render: Path, torch_render: Path) -> None:
    for dockerfile in (cpu_render / SLUG / "Dockerfile", torch_render / TORCH_SLUG / "Dockerfile"):
        for line in dockerfile.read_text().splitlines():
            if line.startswith(("ARG", "ENV", "COPY", "ADD")):
                assert not re.search(r"ca|cert|secret|token|password", line.split(maxsplit=1)[1].split("=")[0], re.I), line
        assert "--mount=type=secret,id=ca" in dockerfile.read_text()


def test_bake_has_one_target_per_flavour_with_cache_named_by_key(cpu_render: Path) -> None:
    bake = (cpu_render / "docker-bake.hcl").read_text()
    assert bake.count("target \"") == 1
    key = re.search(r'"io.trainstack.cache-key" = "([^"]+)"', bake).group(1)
    assert f"buildcache:{key.replace('/', '-')}" in bake
    assert "cache-from" in bake and "cache-to" in bake


def test_workflow_matrix_and_environment(cpu_render: Path) -> None:
    workflow = yaml.safe_load((cpu_render / "workflow.yml").read_text())
    assert workflow["jobs"]["build"]["strategy"]["matrix"]["flavour"] == [SLUG]
    env = yaml.safe_load((cpu_render / "environment.yml").read_text())
    assert "python=3.11" in env["dependencies"]
    pip = env["dependencies"][-1]["pip"]
    assert any(p.startswith("numpy==") for p in pip)


def test_torch_flavour_separates_fetch_from_compile(torch_render: Path) -> None:
    dockerfile = torch_render / TORCH_SLUG / "Dockerfile"
    text = dockerfile.read_text()
    assert hadolint_errors(dockerfile) == []
    stages = re.findall(r"^FROM \S+ AS (\S+)$", text, flags=re.M)
    assert stages[:4] == ["base", "system", "torch", "extras"]
    for name in ("flash-attn", "apex"):
        assert f"fetch-{name}" in stages and f"compile-{name}" in stages
        assert f"--mount=type=bind,from=fetch-{name}" in text
        assert f"--mount=type=bind,from=compile-{name},source=/wheels/{name}" in text
    compile_ds = text.split("AS compile-deepspeed", 1)[1].split("\nFROM ", 1)[0]
    assert "CCACHE_DIR=/root/.cache/compiler CCACHE_MAXSIZE=20G" in compile_ds and "type=cache" in compile_ds
    assert "DS_BUILD_CCL_COMM=0" in compile_ds and "DS_BUILD_CPU_ADAM=1" in compile_ds
    assert "ARG DEEPSPEED_MAX_JOBS=\n" in compile_ds and "MAX_JOBS=${DEEPSPEED_MAX_JOBS:-$jobs}" in compile_ds
    assert re.search(r"apt-get install [^\n]*\bccache\b", text)
    assert re.search(r"git -C /src/apex fetch -q --depth 1 -- file://\S+ [0-9a-f]{40} ", text)  # the locked full sha
    final = text.split("FROM extras AS final", 1)[1]
    assert "COPY" not in final and "/src/" not in final
    assert "torch==2.11.0" in (torch_render / TORCH_SLUG / "torch.txt").read_text()
    assert "torch==" not in (torch_render / TORCH_SLUG / "extras.txt").read_text()
    assert "flash-attn==2.8.3" in (torch_render / TORCH_SLUG / "sources" / "flash-attn.txt").read_text()


def test_bad_inputs_give_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack = copy_example("cpu-minimal", tmp_path)
    assert main(["render", str(stack), "--out", str(tmp_path / "o")]) == 4  # no lock yet
    assert "run 'trainstack lock" in capsys.readouterr().err
    make_lock(stack)
    assert main(["render", str(stack), "--flavour", "cpu-debian12-py312-release", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert_no_traceback(err)
    assert "perhaps you meant 'cpu-debian12-py311-release'" in err
    assert not (tmp_path / "o").exists()


def test_python_from_the_os_archive_where_it_ships_one(cpu_render: Path) -> None:
    system = _stage(cpu_render / SLUG / "Dockerfile", "system")
    assert "python3.11-venv" in system and "python3.11 -m venv /opt/venv" in system
    assert "uv python install" not in system


def test_standalone_python_with_the_locking_uv_where_the_os_has_none(torch_render: Path) -> None:
    # Ubuntu 24.04's archive packages Python 3.12 only; the flavour wants 3.11
    from trainstack.lock import load_manifest

    uv_version = load_manifest(torch_render.parent / "torch-cuda.lock" / "stack.lock.json").uv_version
    system = _stage(torch_render / TORCH_SLUG / "Dockerfile", "system")
    assert "python3.11" not in system.replace("--python 3.11", "")
    assert f"pip install --no-cache-dir uv=={uv_version}" in system
    assert "uv python install 3.11" in system and "uv venv --seed --python 3.11 /opt/venv" in system


def _stage(dockerfile: Path, name: str) -> str:
    text = dockerfile.read_text()
    start = text.index(f" AS {name}\n")
    end = text.find("\nFROM ", start)
    return text[start : end if end != -1 else None]
