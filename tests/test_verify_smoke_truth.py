"""Smoke checks and the op table without false results: a binary-only package is checked as its
program, a private compiled module through its package's public import, and a failed compile
keeps its whole cause."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from trainstack.verify.ops import op_table
from trainstack.verify.smoke import run_smoke
from trainstack.verify.target import open_target, probe_path


def venv(tmp_path: Path) -> Path:
    where = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    return where


def site_of(where: Path) -> Path:
    return next((where / "lib").glob("python3.*/site-packages"))


def test_a_binary_only_package_is_checked_as_its_program(tmp_path) -> None:
    where = venv(tmp_path)
    subprocess.run(["uv", "pip", "install", "--quiet", "--python", str(where / "bin" / "python"), "py-spy==0.4.1"],
                   check=True)
    target = open_target(where / "bin" / "python")
    [row] = run_smoke(target, ["imports"], ["py-spy"])
    assert row.name == "run py-spy" and row.status == "pass", row
    assert row.reason.startswith("py-spy --version: py-spy 0.4.1")


def test_a_program_named_outside_the_environment_is_never_run(tmp_path) -> None:
    where = venv(tmp_path)
    info = site_of(where) / "evil-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n")
    # a RECORD that leaves the venv for /bin/true: more '..' than any temporary folder is deep
    (info / "RECORD").write_text("../" * 40 + "bin/true,,\n")
    [row] = run_smoke(open_target(where / "bin" / "python"), ["imports"], ["evil"])
    assert row.status == "fail" and "not inside the environment" in row.reason


def test_a_private_compiled_module_is_probed_through_the_public_import(tmp_path) -> None:
    where = venv(tmp_path)
    pkg = site_of(where) / "xformers"
    (pkg / "ops").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    # like the real xformers._C: it loads only once xformers.ops has loaded what it links to
    (pkg / "_C.py").write_text("import sys\nif 'xformers.ops' not in sys.modules:\n"
                               "    raise ImportError('libc10.so: cannot open shared object file')\n")
    (pkg / "ops" / "__init__.py").write_text("from xformers import _C\n")
    info = site_of(where) / "xformers-0.0.28.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: xformers\nVersion: 0.0.28\n")
    table = op_table(open_target(where / "bin" / "python"))
    [row] = [r for r in table.rows if r.package == "xformers"]
    assert row.name == "xformers._C" and row.installed and row.compatible and row.why_not == ""


def test_a_failed_compile_keeps_its_whole_cause() -> None:
    torch = pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("smoke_probe", probe_path("smoke_probe.py"))
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)

    def backend(gm, inputs):  # what inductor raises on Python < 3.12 without setuptools
        raise ModuleNotFoundError("No module named 'setuptools'")

    def run():
        torch._dynamo.reset()
        torch.compile(lambda x: x.sin() + 1, backend=backend)(torch.ones(4))
        return "pass", ""

    row = probe.timed("compile[cpu]", run)
    assert row["status"] == "fail"
    assert row["reason"].startswith("BackendCompilerFailed: backend='backend' raised:")
    assert "No module named 'setuptools'" in row["reason"]
    assert "TORCH_LOGS" not in row["reason"] and "\n" not in row["reason"]
