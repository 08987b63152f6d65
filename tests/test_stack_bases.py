"""[build] base keyed by any axis of the matrix (a CUDA 12.6 and a CUDA 12.8 flavour each on
NVIDIA's devel image of its release), and a bare dotted key (ubuntu22.04 unquoted, which TOML
reads as two nested keys) refused in one line that says the key needs quotes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.clirun import assert_no_traceback
from trainstack.cli import main
from trainstack.errors import SpecError
from trainstack.stackfile import expand_flavours, load_stack
from trainstack.stackfile.matrix import base_of

STACK = """\
[stack]
name = "bases"
release = "1"
image = "trainstack/bases"

[components]
torch = {{ version = "==2.7.1", group = "torch" }}
deepspeed = {{ version = "==0.15.4", source = "sdist", build_env = {{ DS_BUILD_FUSED_ADAM = "1" }}, requires = ["torch"] }}

[matrix]
cuda = ["12.6", "12.8"]
os = ["ubuntu24.04"]
python = ["3.12"]

[build]
{base}

[toolchain]
packages = ["ninja"]
archs = ["90"]
"""
DEVEL_126 = "docker.io/nvidia/cuda:12.6.3-devel-ubuntu24.04"
DEVEL_128 = "docker.io/nvidia/cuda:12.8.1-devel-ubuntu24.04"


def cli(path: Path, capsys, monkeypatch, *args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of the CLI, in this process (no interpreter to start)."""
    monkeypatch.setenv("CUDA_HOME", str(path.parent / "no-cuda"))
    monkeypatch.setenv("COLUMNS", "400")
    capsys.readouterr()
    code = main([*args, str(path)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write(tmp_path: Path, base: str) -> Path:
    path = tmp_path / "bases.toml"
    path.write_text(STACK.format(base=base), encoding="utf-8")
    return path


def test_each_cuda_release_gets_its_own_devel_image(tmp_path: Path, capsys, monkeypatch) -> None:
    path = write(tmp_path, f'base = {{ "cuda=12.6" = "{DEVEL_126}", "os=ubuntu24.04,cuda=12.8" = "{DEVEL_128}", '
                           '"os=ubuntu24.04,cuda=12.8,python=3.11" = "docker.io/library/ubuntu:24.04" }')
    stack = load_stack(path)
    chosen = {f.cuda: base_of(stack, f) for f in expand_flavours(stack)}
    assert chosen == {"12.6": ("cuda=12.6", DEVEL_126), "12.8": ("os=ubuntu24.04,cuda=12.8", DEVEL_128)}
    code, stdout, stderr = cli(path, capsys, monkeypatch, "check", "-v", "--backend", "oci")
    assert code == 0, stdout + stderr
    routes = [line for line in stdout.splitlines() if " toolchain.route: " in line]
    assert any(line.startswith("info cu126-") and f"oci builds: the base image {DEVEL_126}" in line for line in routes), routes
    assert any(line.startswith("info cu128-") and f"oci builds: the base image {DEVEL_128}" in line for line in routes), routes


@pytest.mark.parametrize(("base", "message"), [
    ('base = { ubuntu24.04 = "docker.io/library/ubuntu:24.04" }',
     "build.base.ubuntu24: a table where a value belongs: TOML reads the bare key ubuntu24.04 as nested keys split at "
     'each dot; a key with a dot needs quotes (accepted: "ubuntu24.04" = "...")'),
    ('base = { "gpu=h100" = "docker.io/library/ubuntu:24.04" }',
     "build.base: key 'gpu=h100': unknown axis 'gpu'; a key is an OS name"),
    ('base = { "cuda=12" = "docker.io/library/ubuntu:24.04" }',
     "build.base: key 'cuda=12': cuda '12' is not a CUDA release such as 12.6, or cpu"),
    (f'base = {{ "cuda=12.6" = "{DEVEL_126}", "python=3.12" = "{DEVEL_128}", "cuda=12.8" = "{DEVEL_128}" }}',
     "build.base: keys 'cuda=12.6', 'python=3.12' all match flavour os=ubuntu24.04,cuda=12.6"),
    (f'base = {{ "cuda=12.6" = "{DEVEL_126}" }}',
     'build.base: no base image for flavour cu128-ubuntu2404-py312-release (keys given: cuda=12.6)'),
])
def test_a_key_that_cannot_be_used_is_one_line_naming_what_is_accepted(tmp_path: Path, base: str, message: str,
                                                                       capsys, monkeypatch) -> None:
    path = write(tmp_path, base)
    with pytest.raises(SpecError) as info:
        load_stack(path)
    assert message in info.value.message, info.value.message
    assert f"{path}:16:" in info.value.message
    code, _, stderr = cli(path, capsys, monkeypatch, "check")
    assert_no_traceback(stderr)
    assert code == 2 and stderr.count("error:") == 1
