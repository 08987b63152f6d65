"""verify without false results: DeepSpeed's ops judged under the accelerator the flavour
targets, no terminal colour codes in the table, NCCL's pinned version read whole."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from trainstack.verify.ops import build_table, op_table
from trainstack.verify.target import open_target

# DeepSpeed 0.15's own output on a host without a GPU (ds_report and is_compatible(verbose=True)),
# colour codes as it prints them: its op rows depend on DS_ACCELERATOR like the real op_report
PLANTED = '''
import os
OK, NO, YES = "\\033[92m[OKAY]\\033[0m", "\\033[93m[NO]\\033[0m", "\\033[92m[YES]\\033[0m"
WARN = "\\033[93m [WARNING] \\033[0m"

def op_report(verbose=True):
    cuda = os.environ.get("DS_ACCELERATOR") == "cuda"
    print("DeepSpeed C++/CUDA extension op report")
    for name in ("cpu_adam", "fused_adam", "async_io"):
        good = cuda and name != "async_io"
        print("%s %s %s %s %s" % (name, "." * 12, YES if good else NO, "." * 6, OK if good else NO))
'''
BUILDER = '''
class Builder:
    def __init__(self, name, var):
        self.name, self.BUILD_VAR = name, var
    def absolute_name(self):
        return "deepspeed.ops.adam.%s_op" % self.name
    def is_compatible(self, verbose=False):
        if self.name == "async_io":
            print("\\033[93m [WARNING] \\033[0m async_io requires the dev libaio .so object and headers but these were not found.")
            return False
        return True

ALL_OPS = {n: Builder(n, v) for n, v in (("cpu_adam", "DS_BUILD_CPU_ADAM"), ("fused_adam", "DS_BUILD_FUSED_ADAM"), ("async_io", "DS_BUILD_AIO"))}
'''


def _torch_minor() -> str:
    import torch

    return ".".join(torch.__version__.split("+")[0].split(".")[:2])


def planted_deepspeed(tmp_path: Path, over_this_python: bool = False) -> Path:
    venv = tmp_path / "venv"
    if over_this_python:  # this Python's CPU torch seen inside: a torch that finds no GPU
        from tests.venvs import venv_over_this_python

        venv_over_this_python(venv)
    else:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3.*/site-packages"))
    pkg = site / "deepspeed"
    (pkg / "ops" / "op_builder").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "ops" / "__init__.py").write_text("")
    (pkg / "ops" / "op_builder" / "__init__.py").write_text("")
    (pkg / "ops" / "op_builder" / "all_ops.py").write_text(BUILDER)
    (pkg / "env_report.py").write_text(PLANTED)
    (pkg / "ops" / "adam").mkdir()
    for op in ("cpu_adam", "fused_adam"):  # what installed_ops records as built loads (a module here)
        (pkg / "ops" / "adam" / f"{op}_op.py").write_text("")
    (pkg / "git_version_info.py").write_text(textwrap.dedent('''
        installed_ops = {"cpu_adam": True, "fused_adam": True, "async_io": False}
        compatible_ops = {"cpu_adam": True, "fused_adam": True, "async_io": False}
        torch_info = {"version": "TORCH", "cuda": "0.0"}
    ''').replace("TORCH", _torch_minor() if over_this_python else "0.0"))
    info = site / "deepspeed-0.15.4.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: deepspeed\nVersion: 0.15.4\n")
    return venv / "bin" / "python"


def test_ops_are_judged_under_the_flavours_accelerator_without_colour_codes(tmp_path) -> None:
    target = open_target(planted_deepspeed(tmp_path))
    cuda = {row.name: row for row in op_table(target, accelerator="cuda").rows}
    assert cuda["cpu_adam"].installed and cuda["cpu_adam"].compatible
    assert cuda["fused_adam"].installed and cuda["fused_adam"].compatible
    assert cuda["async_io"].compatible is False
    assert cuda["async_io"].why_not == "async_io requires the dev libaio .so object and headers but these were not found."
    # the host's own accelerator (none named): what verify used to report for a CUDA flavour
    host = {row.name: row for row in op_table(target).rows}
    assert host["fused_adam"].installed is False
    assert "\x1b" not in op_table(target).model_dump_json()


def test_colour_codes_never_reach_the_table_from_recorded_output() -> None:
    raw = {"torch": {"version": "2.5.1", "cuda": "12.4", "capabilities": []}, "extensions": [],
           "deepspeed": {"version": "0.15.4", "torch_info": {}, "error": None, "report": {},
                         "ops": [{"name": "async_io", "installed": False, "compatible_at_build": False,
                                  "compatible": False, "build_var": "DS_BUILD_AIO", "files": [],
                                  "why": "\x1b[93m [WARNING] \x1b[0m async_io requires the dev libaio"}]}}
    [row] = build_table(raw).rows
    assert row.why_not == "[WARNING] async_io requires the dev libaio"


def test_nccl_pin_is_read_whole_in_both_requires_dist_spellings(tmp_path, monkeypatch) -> None:
    import importlib.util

    for name, line in (("oldpin", "nvidia-nccl-cu12 (==2.18.1) ; platform_system == \"Linux\""),
                       ("newpin", "nvidia-nccl-cu12==2.21.5; platform_system == \"Linux\"")):
        info = tmp_path / f"{name}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\nRequires-Dist: {line}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from trainstack.verify.target import probe_path

    spec = importlib.util.spec_from_file_location("report_probe", probe_path("report_probe.py"))
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    assert probe._pinned_requirement("oldpin", "nvidia-nccl") == "2.18.1"
    assert probe._pinned_requirement("newpin", "nvidia-nccl") == "2.21.5"


def test_report_names_whose_nvcc_it_is(tmp_path, monkeypatch) -> None:
    from trainstack.verify.report import find_compilers

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    target = open_target(venv / "bin" / "python")
    host = find_compilers(target)["nvcc"]
    assert host.owner in ("host", "not found")
    # the environment's own toolchain wheel (what nvidia-cuda-nvcc installs) wins over the host's
    site = next((venv / "lib").glob("python3.*/site-packages"))
    nvcc = site / "nvidia" / "cuda_nvcc" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.4, V12.4.131'\n")
    nvcc.chmod(0o755)
    own = find_compilers(target)["nvcc"]
    assert own.owner == "environment" and own.path == str(nvcc) and own.version == "12.4"


def test_verify_scopes_the_flavours_accelerator(write_stack) -> None:
    from trainstack.verify.scope import make_scope

    text = ('[stack]\nname = "a"\nrelease = "1"\nimage = "trainstack/a"\n\n[components]\ntorch = "==2.5.1"\n'
            'setuptools = ">=70"\n\n[matrix]\ncuda = ["cpu", "12.4"]\nos = ["ubuntu22.04"]\npython = ["3.11"]\n')
    path = write_stack(text)
    _, scope, _ = make_scope(path, "cu124-ubuntu2204-py311-release", Path(sys.executable), Path("build"), [])
    assert scope.accelerator == "cuda"
    _, scope, _ = make_scope(path, "cpu-ubuntu2204-py311-release", Path(sys.executable), Path("build"), [])
    assert scope.accelerator == "cpu"


def test_gpu_ops_on_a_machine_without_a_gpu_say_what_was_checked(tmp_path) -> None:
    """DeepSpeed's 'compatible' for its CUDA accelerator means its JIT build's dependencies are
    there; where torch sees no GPU the table says so, not 'yes'. A recorded op whose module is
    gone is not installed, and fails the gate."""
    import pytest

    pytest.importorskip("torch")
    from rich.console import Console

    from trainstack.verify.render import render_ops

    python = planted_deepspeed(tmp_path, over_this_python=True)
    site = next((tmp_path / "venv" / "lib").glob("python3.*/site-packages"))
    (site / "deepspeed" / "ops" / "adam" / "fused_adam_op.py").unlink()  # recorded as built, then deleted
    table = op_table(open_target(python), accelerator="cuda")
    rows = {row.name: row for row in table.rows}
    assert rows["cpu_adam"].installed and rows["cpu_adam"].compatible is None
    assert rows["cpu_adam"].why_not == "built ahead of time and loads; not run: no GPU"
    assert rows["async_io"].compatible is False
    fused = rows["fused_adam"]
    assert not fused.installed and fused.load_error.startswith("deepspeed.ops.adam.fused_adam_op: ModuleNotFoundError")
    assert table.broken == [fused]
    console = Console(record=True, width=300)
    render_ops(table, console)
    (line,) = [line for line in console.export_text().splitlines() if " cpu_adam " in line]
    assert [cell.strip() for cell in line.split("│")][3:5] == ["yes", "not run"], line
