"""The environment report on real interpreters: this machine's Python, a uv venv, a broken one."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.clirun import assert_no_traceback
from tests.verify_fixtures import cuda_venv, numpy_python, planted_torch  # noqa: F401 - fixture
from trainstack.cli import main
from trainstack.errors import UsageError
from trainstack.verify.report import collect_report
from trainstack.verify.report_schema import NOT_FOUND, EnvReport, GpuInfo
from trainstack.verify.target import open_target

NO_GPU = GpuInfo(reason="NVML: NVML Shared Library Not Found")


def test_report_on_this_python_has_every_field_and_real_facts() -> None:
    report = collect_report(open_target(Path(sys.executable)))
    data = report.model_dump()
    assert set(data) == set(EnvReport.model_fields)
    assert report.python.version == ".".join(map(str, sys.version_info[:3]))
    assert report.libc.name == "glibc" and report.libc.version[0].isdigit()
    assert set(report.compilers) == {"cc", "c++", "nvcc"}
    import torch

    assert report.torch.version == torch.__version__
    assert report.torch.cuda == (torch.version.cuda or NOT_FOUND)
    if torch.version.cuda is None:
        assert report.cudnn.compiled == NOT_FOUND and report.nccl.runtime == NOT_FOUND
    if not torch.cuda.is_available():
        assert report.gpus.gpus == [] and report.gpus.reason  # "not found" with a reason
        assert report.gpus.driver == NOT_FOUND
    assert report.allocator_env["PYTORCH_CUDA_ALLOC_CONF"] == os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "not set")
    assert report.drift.lock.startswith(NOT_FOUND)


def test_report_on_venv_without_torch_with_lock_drift(numpy_python: Path) -> None:  # noqa: F811
    target = open_target(numpy_python)
    assert target.is_venv
    installed = collect_report(target, gpus=NO_GPU).packages
    locked = {**installed, "numpy": "1.0.0", "torch": "2.11.0"}
    locked.pop("pytest")
    report = collect_report(target, locked=("stack.lock.json [cpu]", locked), gpus=NO_GPU)
    assert report.torch.version == NOT_FOUND
    assert report.errors["torch"] == "torch not installed"
    assert report.drift.missing == ["torch"]
    assert [(c.name, c.locked) for c in report.drift.different] == [("numpy", "1.0.0")]
    assert report.drift.extra == ["pytest"]
    assert report.python.is_venv is True


def test_build_record_facts_compared_with_runtime(numpy_python: Path, tmp_path: Path) -> None:  # noqa: F811
    record = tmp_path / "build.json"
    record.write_text(json.dumps({"tools": {"uv": "0.13", "python": "3.9.1", "torch": "2.11.0"}}))
    report = collect_report(open_target(numpy_python), build_record=record, gpus=NO_GPU)
    facts = {f.name: f for f in report.build.facts}
    assert facts["python"].match is False and facts["python"].built == "3.9.1"
    assert facts["torch"].runtime == NOT_FOUND and facts["torch"].match is False
    assert "cuda" not in facts


def test_broken_torch_still_reports_the_rest(tmp_path_factory: pytest.TempPathFactory) -> None:
    python = planted_torch(
        tmp_path_factory, "broken-torch",
        "raise ImportError('libtorch_cpu.so: cannot open shared object file: No such file or directory')\n",
    )
    report = collect_report(open_target(python), gpus=NO_GPU)
    assert "libtorch_cpu.so: cannot open shared object file" in report.errors["torch"]
    assert report.torch.version == NOT_FOUND
    assert report.os.name != NOT_FOUND and report.packages["torch"] == "2.11.0"


def test_torch_import_that_kills_the_interpreter(tmp_path_factory: pytest.TempPathFactory) -> None:
    python = planted_torch(tmp_path_factory, "crashing-torch", "import os\nos.abort()\n")
    report = collect_report(open_target(python), gpus=NO_GPU)
    assert "torch import crashed" in report.errors["torch"] and "signal 6" in report.errors["torch"]
    assert report.python.version != NOT_FOUND


def test_a_path_that_is_no_python(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\necho hello\n")
    script.chmod(0o755)
    with pytest.raises(UsageError, match="not a working Python interpreter"):
        open_target(script)
    assert main(["report", "--python", str(tmp_path / "missing")]) == 2
    assert main(["report", "--python", "/bin/true"]) == 2
    err = capsys.readouterr().err
    assert_no_traceback(err)
    assert "no such file" in err


def test_report_cli_json_is_the_fixed_schema(numpy_python: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    assert main(["report", "--python", str(numpy_python), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert EnvReport.model_validate(data).torch.version == NOT_FOUND
    assert main(["report", "--python", str(numpy_python)]) == 0
    assert "environment report" in capsys.readouterr().out


@pytest.mark.slow
def test_report_on_cuda_torch_venv_reads_loaded_libraries_from_the_memory_map(cuda_venv: Path) -> None:  # noqa: F811
    report = collect_report(open_target(cuda_venv / "bin" / "python"), gpus=NO_GPU)
    assert report.torch.cuda != NOT_FOUND and "+cu" in report.torch.version
    assert isinstance(report.torch.arch_list, list) and "sm_90" in report.torch.arch_list
    assert report.cudnn.compiled != NOT_FOUND and report.cudnn.runtime == report.cudnn.compiled
    assert report.nccl.runtime != NOT_FOUND and report.nccl.compiled == report.nccl.runtime
    venv = str(cuda_venv)
    for loaded in (report.cudnn.loaded, report.nccl.loaded):
        assert isinstance(loaded, list) and loaded and all(path.startswith(venv) for path in loaded)
    assert any(path.endswith("libcudnn.so.9") for path in report.cudnn.loaded)


def test_a_python_named_as_a_command_is_the_one_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--python python3` means what a shell would run; a name found nowhere is still one line."""
    import shutil

    monkeypatch.chdir(tmp_path)  # no file named python3 here: only PATH can give it
    target = open_target(Path("python3"))
    assert target.python == Path(shutil.which("python3")).absolute()
    with pytest.raises(UsageError, match=r"^no-such-python-here: no such file"):
        open_target(Path("no-such-python-here"))
