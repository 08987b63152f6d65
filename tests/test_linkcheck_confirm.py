"""Link findings confirmed inside the target interpreter: a venv with this machine's CPU torch
wheel and numpy (healthy, then with one library deleted from a hardlinked copy), a bare
directory (unconfirmed), and the loaded-library check of `report` on small ELF objects."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trainstack.cli import main
from trainstack.verify.linkcheck.check import LinkIssue
from trainstack.verify.linkcheck.confirm import classify, owner_of
from trainstack.verify.linkcheck.data import load_data
from trainstack.verify.linkcheck.loaded import missing_dlopens
from trainstack.verify.linkcheck.resolve import Resolver

torch = pytest.importorskip("torch")
_MADE: dict[str, Path] = {}


@pytest.fixture(scope="module")
def cpu_torch_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A uv venv holding the same CPU torch wheel as this interpreter, and numpy."""
    if "venv" not in _MADE:
        venv = tmp_path_factory.mktemp("cpu-torch") / "venv"
        subprocess.run(["uv", "venv", "-q", "--python", sys.executable, venv], check=True, capture_output=True)
        # the same wheel pip installed here (pip's find-links, where the machine has them)
        links = [arg for path in os.environ.get("PIP_FIND_LINKS", "").split() for arg in ("--find-links", path)]
        done = subprocess.run(["uv", "pip", "install", "-q", "--python", venv / "bin" / "python", *links,
                               f"torch=={torch.__version__}", "numpy"], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"torch {torch.__version__} cannot be installed into a venv here: {done.stderr.strip()[-200:]}")
        _MADE["venv"] = venv
    return _MADE["venv"]


def site(venv: Path) -> Path:
    return next((venv / "lib").glob("python3.*/site-packages"))


def damaged(venv: Path, dest: Path, *victims: str) -> Path:
    """A hardlinked copy of the venv (no data copied) without the files matching ``victims``."""
    copy = dest / "venv"
    shutil.copytree(venv, copy, symlinks=True, copy_function=os.link)
    for pattern in victims:
        for path in site(copy).glob(pattern):
            path.unlink()
    return copy


def linkcheck_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = main(["linkcheck", "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def test_healthy_cpu_torch_venv_passes_with_every_finding_classified(cpu_torch_venv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = linkcheck_json(capsys, str(cpu_torch_venv))
    assert code == 0
    assert report["confirmed_in"] == str(cpu_torch_venv / "bin" / "python")
    findings = [i for i in report["issues"] if i["kind"] in ("unresolved", "dlopen-missing")]
    assert findings, "the wheel's test program needs torch/lib from torch/bin"
    assert all(i["status"] in ("optional", "resolved-at-run-time") and i["reason"] for i in findings)
    shim = [i for i in findings if i["file"].endswith("torch/bin/test_shim")]
    assert {i["library"] for i in shim} >= {"libtorch.so", "libc10.so"}
    assert all(i["status"] == "optional" and "test program" in i["reason"] for i in shim)


def test_deleted_libtorch_python_is_broken_with_its_chain(cpu_torch_venv: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    copy = damaged(cpu_torch_venv, tmp_path, "torch/lib/libtorch_python.so")
    assert (site(cpu_torch_venv) / "torch/lib/libtorch_python.so").exists()
    code, report = linkcheck_json(capsys, str(copy))
    assert code == 1
    errors = [i for i in report["issues"] if i["severity"] == "error"]
    assert [(i["library"], i["status"]) for i in errors] == [("libtorch_python.so", "broken")]
    assert errors[0]["chain"][-1].endswith("torch/_C.cpython-%d%d-x86_64-linux-gnu.so" % sys.version_info[:2])
    assert errors[0]["reason"].startswith("import torch fails:") and "libtorch_python.so" in errors[0]["reason"]
    assert errors[0]["provider"].startswith(f"torch=={torch.__version__}")
    shim = [i for i in report["issues"] if i["file"].endswith("torch/bin/test_shim")]
    assert shim and all(i["status"] == "optional" for i in shim)  # still the test program, not the deletion


def test_deleted_library_of_a_c_extension_is_broken(cpu_torch_venv: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    copy = damaged(cpu_torch_venv, tmp_path, "numpy.libs/*.so")
    main(["linkcheck", str(copy)])
    text = capsys.readouterr().out
    assert "broken" in text and "import numpy fails" in text and "FAILED" in text
    code, report = linkcheck_json(capsys, str(copy))
    assert code == 1
    broken = {i["library"] for i in report["issues"] if i["status"] == "broken"}
    assert broken and all(name.startswith("libscipy_openblas") for name in broken)
    users = {Path(i["file"]).name.split(".")[0] for i in report["issues"] if i["status"] == "broken"}
    assert "_multiarray_umath" in users


def test_bare_directory_findings_are_unconfirmed(cpu_torch_venv: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    copy = damaged(cpu_torch_venv, tmp_path, "torch/lib/libtorch_python.so")
    code, report = linkcheck_json(capsys, str(site(copy)))
    assert code == 1
    assert report["confirmed_in"] is None and report["confirmation"].startswith("findings unconfirmed")
    statuses = {i["status"] for i in report["issues"] if i["kind"] == "unresolved"}
    assert statuses == {"unconfirmed"}


def test_grouped_output_is_one_row_per_library(cpu_torch_venv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["linkcheck", str(cpu_torch_venv)]) == 0
    text = capsys.readouterr().out
    assert text.count("libc10.so ") == 1  # one row, however many objects need it
    assert "confirmed in" in text


def make_answer(**fields: object) -> dict:
    return {"id": 0, "package": "pkg", "module": None, "executable": False, "reached": False,
            "load_error": None, "library_path": None, "import_error": None, **fields}


@pytest.mark.parametrize(("kind", "answer", "status"), [
    ("unresolved", make_answer(reached=True, library_path="/s/torch/lib/libc10.so"), "resolved-at-run-time"),
    ("unresolved", make_answer(load_error="OSError: libcutensor.so.2: cannot open"), "optional"),
    ("unresolved", make_answer(import_error="ImportError: libx.so.1: cannot open shared object file"), "broken"),
    ("dlopen-missing", make_answer(reached=True, load_error="OSError: libx.so.1: cannot open"), "broken"),
    ("dlopen-missing", make_answer(load_error="OSError: libx.so.1: cannot open"), "optional"),
    ("unresolved", make_answer(package=None, load_error="OSError: libx.so.1: cannot open"), "broken"),
])
def test_classification_from_recorded_answers(kind: str, answer: dict, status: str) -> None:
    issue = LinkIssue(kind=kind, severity="error", file="/s/pkg/ext/mod.so", library="libx.so.1", detail="")
    result = classify(issue, answer, [Path("/s")], load_data())
    assert result.status == status, result.reason
    assert result.severity == ("error" if status == "broken" else "note")


def test_owner_of_an_object() -> None:
    sites = [Path("/v/site-packages")]
    assert owner_of("/v/site-packages/numpy.libs/libopenblas.so", sites) == ("numpy", None)
    assert owner_of("/v/site-packages/numba/np/ufunc/tbbpool.cpython-312-x86_64-linux-gnu.so", sites) == \
        ("numba", "numba.np.ufunc.tbbpool")
    assert owner_of("/v/site-packages/mpi4py/MPI.mpich.cpython-312-x86_64-linux-gnu.so", sites) == ("mpi4py", None)
    assert owner_of("/v/bin/tool", sites) == (None, None)


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_report_lists_dlopen_missing_libraries_of_loaded_objects(tmp_path: Path) -> None:
    """A loaded libcudnn.so.9 whose engine library was deleted (cuDNN's own sub-library list)."""
    lib = tmp_path / "cudnn" / "lib"
    lib.mkdir(parents=True)
    src = tmp_path / "c.c"
    src.write_text("int cudnnGetVersion(void) { return 91000; }")
    owner = lib / "libcudnn.so.9"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", owner, src, "-Wl,-soname,libcudnn.so.9"], check=True)
    rule = next(r for r in load_data().dlopen if r.owner == "libcudnn.so.9")
    for name in rule.loads:
        shutil.copy(owner, lib / name)
    assert missing_dlopens([str(owner)], Resolver({}, [])) == []
    (lib / "libcudnn_cnn.so.9").unlink()
    missing = missing_dlopens([str(owner)], Resolver({}, []))
    assert len(missing) == 1 and missing[0].startswith(f"libcudnn_cnn.so.9: dlopen'ed by {owner}, not found")


def test_a_deleted_extension_module_is_broken(cpu_torch_venv: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing links an extension module, so only its distribution's RECORD tells it is gone."""
    copy = damaged(cpu_torch_venv, tmp_path, "numpy/_core/_multiarray_umath.*.so")
    code, report = linkcheck_json(capsys, str(copy))
    assert code == 1
    [missing] = [i for i in report["issues"] if i["kind"] == "missing-file"]
    assert missing["status"] == "broken" and missing["file"].endswith(".so") and "_multiarray_umath" in missing["file"]
    assert missing["provider"].startswith("numpy==")
