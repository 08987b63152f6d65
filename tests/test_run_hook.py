"""The run hook through environment variables: installed in a real venv as a .pth file, off
unless a TRAINSTACK_* variable is set; the run verb's errors; a job's own error unchanged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.clirun import assert_no_traceback, clean_env
from tests.venvs import venv_over_this_python
from trainstack.run.install import PTH_NAME, install_into_venv

DATA = Path(__file__).parent / "data" / "run"
PLAIN = DATA / "plain_loop.py"
TRAINSTACK = [sys.executable, "-m", "trainstack.cli"]
PROBE = "import sys; print('boot' if '_trainstack_run_boot' in sys.modules else '-', 'torch' if 'torch' in sys.modules else '-')"
# after the job imports torch: whether the hook started
HOOKED = "import sys, torch; print('hooked' if 'trainstack.run.hook' in sys.modules else '-')"


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A real uv venv that sees this Python's packages (torch, trainstack), with the hook."""
    root = tmp_path_factory.mktemp("hooked") / "venv"
    venv_over_this_python(root)
    installed = install_into_venv(root)
    assert [p.name for p in installed] == [PTH_NAME]
    return root


def test_the_installed_hook_is_off_and_imports_nothing_unless_a_variable_is_set(venv):
    python = str(venv / "bin" / "python")
    off = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, env=clean_env(), check=True)
    assert off.stdout.split() == ["boot", "-"]  # read the variables, imported neither trainstack nor torch
    assert off.stderr == ""
    idle = subprocess.run([python, "-c", HOOKED], capture_output=True, text=True, env=clean_env(), check=True)
    assert idle.stdout.split() == ["-"]
    on = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, env=clean_env(TRAINSTACK_PROFILE_DIR="p"), check=True)
    assert on.stdout.split() == ["boot", "-"]  # a process that does not import torch is left alone
    hooked = subprocess.run([python, "-c", HOOKED], capture_output=True, text=True, env=clean_env(TRAINSTACK_PROFILE_DIR="p"), check=True)
    assert hooked.stdout.split() == ["hooked"]


@pytest.mark.timeout(120)
def test_variables_alone_profile_a_job_in_the_environment(venv, tmp_path):
    # the range runs past the job's end: the steps it ran are written at exit
    env = clean_env(TRAINSTACK_PROFILE_STEPS="2:9", TRAINSTACK_PROFILE_DIR=str(tmp_path / "prof"))
    done = subprocess.run([str(venv / "bin" / "python"), str(PLAIN), "--steps", "4"], capture_output=True, text=True, env=env, timeout=110)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "prof").glob("steps*")) == ["steps2-3-rank0.kernels.txt", "steps2-3-rank0.trace.json"]


@pytest.mark.timeout(120)
def test_a_bad_variable_is_one_line_and_the_job_runs_as_without(venv, tmp_path):
    env = clean_env(TRAINSTACK_PROFILE_STEPS="4-2")
    done = subprocess.run([str(venv / "bin" / "python"), str(PLAIN), "--steps", "2"], capture_output=True, text=True, env=env, timeout=110)
    assert done.returncode == 0
    assert done.stderr.splitlines() == [
        "trainstack run: hook off: TRAINSTACK_PROFILE_STEPS: '4-2' is not a step range; accepted: A:B with 1 <= A < B (ASCII digits, at most 9 each), optimizer steps A to B-1 counted from 0"
    ]
    assert "step 1 " in done.stdout


@pytest.mark.parametrize(
    ("args", "code", "line"),
    [
        ([], 2, "error: no command to run; accepted: trainstack run [OPTIONS] -- python train.py ARGS"),
        (["--profile-steps", "5:2", "--", "python", "x.py"], 2, "error: --profile-steps: '5:2' is not a step range"),
        (["--signal", "HUP", "--", "python", "x.py"], 2, "error: --signal: 'HUP' is not a profiling signal; accepted: USR1, USR2 or off"),
        (["--memplan", "lots", "--", "python", "x.py"], 2, "error: --memplan: 'lots' is not a budget"),
        (["--", "no-such-trainer-binary"], 6, "error: 'no-such-trainer-binary' is not a program on PATH"),
    ],
)
def test_run_verb_errors_are_one_line(tmp_path, args, code, line):
    done = subprocess.run([*TRAINSTACK, "run", "--out", str(tmp_path / "o"), *args], capture_output=True, text=True, env=clean_env(), timeout=60)
    assert done.returncode == code
    assert done.stderr.startswith(line), done.stderr
    assert_no_traceback(done.stderr)


@pytest.mark.timeout(120)
def test_a_jobs_own_oom_reaches_the_user_unchanged(tmp_path):
    job = [sys.executable, str(PLAIN), "--steps", "4", "--oom-at", "1"]
    alone = subprocess.run(job, capture_output=True, text=True, env=clean_env(), cwd=tmp_path, timeout=60)
    hooked = subprocess.run([*TRAINSTACK, "run", "--out", "o", "--oom-snapshot", "--", *job], capture_output=True, text=True, env=clean_env(), cwd=tmp_path, timeout=60)
    assert alone.returncode == hooked.returncode == 1
    assert hooked.stdout == alone.stdout
    assert hooked.stderr.strip().splitlines()[-1] == alone.stderr.strip().splitlines()[-1] == (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB (planted)"
    )
    assert not (tmp_path / "o" / "oom").exists()  # no CUDA allocator here: nothing recorded


def test_the_run_hook_keeps_a_sitecustomize_the_environment_had(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("print('their sitecustomize ran')\n")
    env = clean_env(PYTHONPATH=str(theirs))
    done = subprocess.run([*TRAINSTACK, "run", "--out", str(tmp_path / "o"), "--signal", "off", "--", sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    # trainstack's own Python ran it too, then the job's: theirs, then the hook's boot
    assert done.stdout.splitlines()[-2:] == ["their sitecustomize ran", "boot -"]


def test_the_boot_copy_names_the_same_switches_as_the_settings() -> None:
    """boot.py is installed as a copy that imports nothing of trainstack, so it holds its own list of
    the variables that turn the hook on; it must be the settings' list."""
    from trainstack.run import boot, settings

    assert boot.SWITCHES == settings.SWITCHES and boot.HOME == settings.RUN_HOME


def test_variables_the_shell_set_that_run_replaces_are_named_in_a_note(tmp_path):
    """run's options decide the TRAINSTACK_* variables; one the shell set is not used, and a note
    says which, while the job runs as the options ask (a variable set to 0 or empty is off anyway)."""
    show = "import os; print(os.environ.get('TRAINSTACK_PROFILE_STEPS', 'unset'), os.environ.get('TRAINSTACK_COMPILE', 'unset'))"
    env = clean_env(TRAINSTACK_PROFILE_STEPS="abc", TRAINSTACK_MEMPLAN="20GiB", TRAINSTACK_COMPILE="0")
    done = subprocess.run([*TRAINSTACK, "run", "--out", str(tmp_path / "o"), "--signal", "off", "--profile-steps", "2:4", "--",
                           sys.executable, "-c", show], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "2:4 unset"
    notes = [line for line in done.stderr.splitlines() if line.startswith("note:")]
    assert notes == ["note: TRAINSTACK_PROFILE_STEPS, TRAINSTACK_MEMPLAN from the environment not used: trainstack run's options "
                     "decide (unset them, or give the option instead)"]
    quiet = subprocess.run([*TRAINSTACK, "run", "--out", str(tmp_path / "o"), "--signal", "off", "--", sys.executable, "-c", show],
                           capture_output=True, text=True, env=clean_env(), timeout=60)
    assert quiet.returncode == 0 and "note:" not in quiet.stderr
