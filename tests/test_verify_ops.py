"""The op table: DeepSpeed's own op builders in a real venv; one probe output recorded on an
H200; and probe-shaped facts for cases this machine cannot produce (no GPU, no apex or
flash-attn builds), to test how the reasons are worked out."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.verify_fixtures import deepspeed_python, numpy_python  # noqa: F401 - fixture
from trainstack.verify.ops import build_table, op_table
from trainstack.verify.target import last_json, open_target

NO_EXTENSIONS = [
    {"name": name, "version": None, "modules": []}
    for name in ("apex", "flash-attn", "transformer-engine", "xformers", "triton")
]


@pytest.mark.slow
def test_deepspeed_op_builders_in_a_real_venv(deepspeed_python: Path) -> None:  # noqa: F811
    table = op_table(open_target(deepspeed_python))
    assert table.error == ""
    ops = {row.name: row for row in table.rows if row.package == "deepspeed"}
    assert "cpu_adam" in ops and "fused_adam" in ops
    assert not any(row.installed for row in ops.values())  # DS_BUILD_OPS=0: nothing ahead of time
    assert all(row.compatible is not None for row in ops.values())
    assert "apex" in table.absent and not table.broken


def test_nothing_installed(numpy_python: Path) -> None:  # noqa: F811
    table = op_table(open_target(numpy_python))
    assert table.rows == [] and "deepspeed" in table.absent and "triton" in table.absent


def test_flash_attn_on_a_t4_is_arch_too_old() -> None:
    raw = {
        "torch": {"version": "2.11.0+cu128", "cuda": "12.8", "capabilities": ["75"]},
        "deepspeed": None,
        "extensions": [
            {"name": "flash-attn", "version": "2.8.3", "modules": [{"module": "flash_attn_2_cuda", "present": True, "error": None}]},
        ],
    }
    [row] = build_table(raw).rows
    assert row.installed and row.compatible is False
    assert row.why_not.startswith("GPU arch too old: sm75 < sm80")


def test_missing_library_and_undefined_symbol() -> None:
    raw = {
        "torch": {"version": "2.11.0+cu128", "cuda": "12.8", "capabilities": ["90"]},
        "deepspeed": None,
        "extensions": [
            {"name": "apex", "version": "0.1", "modules": [
                {"module": "amp_C", "present": True,
                 "error": "ImportError: libcudart.so.11.0: cannot open shared object file: No such file or directory"},
                {"module": "fused_layer_norm_cuda", "present": True,
                 "error": "ImportError: fused_layer_norm_cuda.so: undefined symbol: _ZN3c104cuda9SetDeviceEi"},
                {"module": "syncbn", "present": False, "error": None},
            ]},
        ],
    }
    table = build_table(raw)
    rows = {row.name: row for row in table.rows}
    assert rows["amp_C"].why_not == "missing library: libcudart.so.11.0"
    assert rows["fused_layer_norm_cuda"].why_not.startswith("built against another torch")
    assert "syncbn" not in rows
    assert {row.name for row in table.broken} == {"amp_C", "fused_layer_norm_cuda"}


def test_deepspeed_ops_built_for_another_cuda_and_torch_range() -> None:
    raw = {
        "torch": {"version": "2.11.0+cu128", "cuda": "12.8", "capabilities": []},
        "deepspeed": {
            "version": "0.18.9",
            "torch_info": {"version": "2.11", "cuda": "12.6", "hip": "0.0"},
            "error": None,
            "ops": [
                {"name": "fused_adam", "installed": True, "compatible_at_build": True, "compatible": True, "why": ""},
                {"name": "sparse_attn", "installed": False, "compatible_at_build": False, "compatible": False,
                 "why": "sparse_attn requires a torch version >= 1.5 and < 2.0 but detected 2.11"},
            ],
        },
        "extensions": NO_EXTENSIONS,
    }
    rows = {row.name: row for row in build_table(raw).rows}
    assert rows["fused_adam"].compatible is False
    assert rows["fused_adam"].why_not == "CUDA mismatch: ops built with CUDA 12.6, torch runs CUDA 12.8"
    assert rows["sparse_attn"].why_not.startswith("torch range: needs torch >=1.5,<2.0, found 2.11.0+cu128")


def test_gpu_only_module_on_a_cpu_machine_is_not_judged() -> None:
    raw = {
        "torch": {"version": "2.11.0+cu128", "cuda": "12.8", "capabilities": []},
        "deepspeed": None,
        "extensions": [{"name": "triton", "version": "3.6.0", "modules": [{"module": "triton", "present": True, "error": None}]}],
    }
    [row] = build_table(raw).rows
    assert (row.installed, row.compatible, row.why_not) == (True, None, "no GPU")


def test_recorded_h200_probe_triton_is_compatible() -> None:
    """ops_probe.py's output recorded on an H200 with torch 2.11.0+cu130 in a venv."""
    raw = {
        "torch": {"version": "2.11.0+cu130", "cuda": "13.0", "capabilities": ["90"]},
        "deepspeed": None,
        "extensions": [*NO_EXTENSIONS[:4],
                       {"name": "triton", "version": "3.6.0", "modules": [{"module": "triton", "present": True, "error": None}]}],
    }
    table = build_table(raw)
    [row] = table.rows
    assert (row.package, row.installed, row.compatible, row.why_not) == ("triton", True, True, "")
    assert table.absent == ["deepspeed", "apex", "flash-attn", "transformer-engine", "xformers"]


C10_MODULE = r"""
#include <Python.h>
#include <c10/core/DeviceType.h>

static PyObject* device_name(PyObject*, PyObject*) {
    return PyUnicode_FromString(c10::DeviceTypeName(c10::DeviceType::CPU).c_str());
}
static PyMethodDef methods[] = {{"device_name", device_name, METH_NOARGS, ""}, {nullptr, nullptr, 0, nullptr}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "c10_linked", nullptr, -1, methods};
PyMODINIT_FUNC PyInit_c10_linked(void) { return PyModule_Create(&module); }
"""


def test_an_extension_that_needs_torchs_libraries_loads_once_torch_has() -> None:
    """A compiled module linked to torch's libc10.so with no search path of its own (as
    flash-attn's flash_attn_2_cuda is) cannot be imported alone, but is usable: every user
    imports torch first. The probe imports torch first too, so the op is not reported broken."""
    import os
    import shutil
    import subprocess
    import sys
    import sysconfig
    import tempfile

    torch = pytest.importorskip("torch")
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("g++ is not installed")
    torch_root = Path(torch.__file__).parent
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "c10_linked.cpp"
        source.write_text(C10_MODULE)
        target = Path(folder) / ("c10_linked" + sysconfig.get_config_var("EXT_SUFFIX"))
        subprocess.run([compiler, "-shared", "-fPIC", "-std=c++17", "-o", str(target), str(source),
                        f"-I{sysconfig.get_paths()['include']}", f"-I{torch_root / 'include'}",
                        f"-L{torch_root / 'lib'}", "-lc10"], check=True, timeout=120)  # fmt: skip
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([folder, os.environ.get("PYTHONPATH", "")])}
        alone = subprocess.run([sys.executable, "-c", "import c10_linked"], capture_output=True, text=True, env=env, timeout=60)
        assert "libc10.so: cannot open shared object file" in alone.stderr  # the module on its own
        probe = Path(__file__).resolve().parent.parent / "src" / "trainstack" / "verify" / "probes" / "ops_probe.py"
        entry = {"extension": [{"name": "c10-linked", "package": "torch", "modules": ["c10_linked"]}]}
        import json

        done = subprocess.run([sys.executable, str(probe), json.dumps(entry)], capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        # the last JSON line, as verify reads it: an installed DeepSpeed logs a line before it
        (module,) = last_json(done.stdout)["extensions"][0]["modules"]
        assert module["present"] and module["error"] is None, module
        from trainstack.verify.ops import extension_rows

        facts = last_json(done.stdout)
        (row,) = extension_rows(facts["extensions"][0], {"gpu": False}, facts["torch"])
        assert row.installed and row.compatible is not False and row.why_not == ""
