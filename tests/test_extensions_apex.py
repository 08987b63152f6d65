"""apex built in place (benchmarks/extension_build.py apex --source): the stack's settings, the
wheel-cache key, and ninja's per-unit compile times read from a real build."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

from trainstack.buildenv import budget_for, max_jobs
from trainstack.builder.extensions import WheelCache
from trainstack.builder.record import ExtensionKey
from trainstack.buildenv import arch_env
from trainstack.stackfile.load import load_stack

ROOT = Path(__file__).resolve().parent.parent


def bench():
    spec = importlib.util.spec_from_file_location("extension_build", ROOT / "benchmarks" / "extension_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_apex_stack_builds_the_cuda_extensions_for_sm90_with_the_cpu_budget() -> None:
    stack = load_stack(ROOT / "examples" / "stacks" / "apex-cuda.toml")
    apex = stack.components["apex"]
    assert len(apex.commit or "") == 40
    assert apex.build_env["APEX_CPP_EXT"] == apex.build_env["APEX_CUDA_EXT"] == "1"
    assert arch_env(list(stack.toolchain.archs))["TORCH_CUDA_ARCH_LIST"] == "9.0"
    assert max_jobs(16.0, budget_for(apex)) == 16
    assert max_jobs(2.0, budget_for(apex)) == 2


def test_the_in_place_key_changes_with_torch_and_build_env(tmp_path: Path) -> None:
    apex = load_stack(ROOT / "examples" / "stacks" / "apex-cuda.toml").components["apex"]
    key = bench().apex_key(ExtensionKey, apex, "2.11.0+cu130", "13.0", "9.0", "13.0", "3.12")
    assert key.version == apex.commit and key.toolchain == (("nvcc", "13.0"),)
    other_torch = bench().apex_key(ExtensionKey, apex, "2.12.0+cu130", "13.0", "9.0", "13.0", "3.12")
    other_env = bench().apex_key(ExtensionKey, apex.model_copy(update={"build_env": {"APEX_CPP_EXT": "1"}}), "2.11.0+cu130", "13.0", "9.0", "13.0", "3.12")
    assert len({key.digest(), other_torch.digest(), other_env.digest()}) == 3
    cache = WheelCache(tmp_path)
    assert cache.folder(key).name == f"apex-{key.digest()}" and cache.lookup(key, tmp_path / "out") is None


@pytest.mark.skipif(shutil.which("ninja") is None, reason="needs ninja")
def test_ninja_unit_times_come_from_its_own_log(tmp_path: Path) -> None:
    build = tmp_path / "build" / "temp" / "ext"
    build.mkdir(parents=True)
    (build / "build.ninja").write_text(
        "rule slow\n  command = sleep $secs && touch $out\n"
        "build a.o: slow\n  secs = 0.3\nbuild b.o: slow\n  secs = 0.05\n", encoding="utf-8")
    subprocess.run(["ninja", "-C", str(build)], check=True, capture_output=True)
    times = bench().ninja_times(tmp_path / "build")
    assert times["units"] == 2
    assert [name for name, _ in times["slowest"]] == ["a.o", "b.o"]
    assert times["slowest"][0][1] >= 0.3 > times["slowest"][1][1]


def test_the_errors_of_a_failed_compile_step_are_picked_from_its_log(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "01-compile-apex.log").write_text(
        "Warning: Torch did not find available GPUs\nIf your intention is to cross-compile, this is not an error.\n"
        "csrc/x.cu(12): error: identifier \"y\" is undefined\nFAILED: x.o\nok\n", encoding="utf-8")
    found = bench().log_errors(logs)
    assert found["error_lines"] == ['csrc/x.cu(12): error: identifier "y" is undefined', "FAILED: x.o"]
    assert found["log_tail"][-1] == "ok"
