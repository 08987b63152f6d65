"""The hostile corpus of the run hook's variables (tests/data/corpus/hook_env): each case through the
real hook in a job of its own under a hard timeout: the job runs its steps to the end, each bad value
is one warning line, no traceback, nothing created outside its folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clirun import assert_no_traceback

CORPUS = Path(__file__).resolve().parent / "data" / "corpus"
HOOK_ENV = sorted((CORPUS / "hook_env").glob("*.env"))
CASE_SECONDS = 150
pytestmark = pytest.mark.timeout(180)

JOB = """
import os, signal, sys
from trainstack.run import boot
boot.main()
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(4, 8), torch.randn(4, 1)
for step in range(4):
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    opt.zero_grad()
    if step == 1 and os.environ.get("JOB_SIGNAL"):
        os.kill(os.getpid(), signal.SIGUSR1)
print("job done")
"""

# One job a case: a process forked from one that has imported torch and the hook (and done
# nothing else, so no thread is forked), given the case's variables, its own stdout and stderr
# files, then hook.activate() and eight training steps; it ends as a job ends, its interpreter
# shutting down. torch's profiler, started and stopped across cases in one process, can crash:
# hence a process a case. The parent kills a case that outlives CASE_SECONDS and prints one JSON
# line a case: its exit code and seconds.
CASE_JOB = """
import json, os, signal, sys, time
import torch
from torch import nn
from trainstack.run import hook
cases, folder, limit = json.loads(sys.argv[1]), sys.argv[2], float(sys.argv[3])
base = dict(os.environ)
child = False
for name, env in cases:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        child = True
        for fd, suffix in ((1, "out"), (2, "err")):
            os.dup2(os.open(os.path.join(folder, name + "." + suffix), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
        os.environ.clear()
        os.environ.update({**base, **env})
        hook.activate()
        model = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = torch.randn(4, 8), torch.randn(4, 1)
        for step in range(8):  # past the 3 steps a trigger profiles, so the profiler stops before the job ends
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            if step == 1 and env.get("JOB_SIGNAL"):
                os.kill(os.getpid(), signal.SIGUSR1)
        print("job done", flush=True)
        break
    start = time.monotonic()
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() - start > limit:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            code = "killed after %.0f s" % limit
            break
        time.sleep(0.02)
    print(json.dumps({"case": name, "code": code, "seconds": time.monotonic() - start}), flush=True)
if child:
    sys.stdout.flush()
"""
THROUGH_BOOT = ("rank-superscript", "steps-5000-digits", "control-link")  # also each in a job of its own


def _hook_case(path: Path, out: Path) -> tuple[dict[str, str], str | None]:
    env: dict[str, str] = {}
    plant = None
    for line in path.read_text(encoding="utf-8").splitlines()[1:]:
        key, _, value = line.partition("=")
        value = json.loads(value).replace("{out}", str(out))
        if key == "@plant":
            plant = value
        else:
            env[key] = value
    return env, plant


def _files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")} if root.exists() else set()


def _plant(case: str, plant: str | None, out: Path, outside: Path, env: dict[str, str]) -> None:
    if plant is None:
        return
    (out / "control").mkdir(parents=True)
    if plant == "link":
        (out / "control" / "profile").symlink_to(outside / "created-through-the-link")
    else:
        os.mkfifo(out / "control" / "profile")
    env["JOB_SIGNAL"] = "1"


def _check_job_output(case: str, stdout: str, stderr: str) -> None:
    assert stdout.strip().endswith("job done"), f"{case}: {stderr[-1500:]}"
    assert_no_traceback(stderr)
    for line in stderr.splitlines():
        assert not line.startswith(("error: INJECTED", "INJECTED")) and "\x1b" not in line, f"{case}: {line!r}"
    if case not in ("control-link", "control-fifo", "steps-huge"):
        assert any(line.startswith("trainstack run:") for line in stderr.splitlines()), f"{case}: not reported: {stderr[-800:]}"


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("TRAINSTACK_") and k not in ("RANK", "PYTORCH_CUDA_ALLOC_CONF")}


@pytest.mark.timeout(300)  # 27 jobs: about 2 s of CPU each
def test_the_hook_never_ends_the_job_over_the_whole_corpus(tmp_path: Path) -> None:
    """Every case through hook.activate() in a job of its own: the job runs its steps to the end,
    each bad value is one warning line, nothing is created outside."""
    cases, outsides = [], []
    for path in HOOK_ENV:
        out, outside = tmp_path / path.stem / "out", tmp_path / path.stem / "outside"
        out.mkdir(parents=True)
        outside.mkdir()
        env, plant = _hook_case(path, out)
        _plant(path.stem, plant, out, outside, env)
        cases.append((path.stem, env))
        outsides.append(outside)
    logs = tmp_path / "logs"
    logs.mkdir()
    jobs = subprocess.run([sys.executable, "-c", CASE_JOB, json.dumps(cases), str(logs), str(CASE_SECONDS)],
                          capture_output=True, text=True, timeout=CASE_SECONDS * len(cases), cwd=tmp_path, env=_clean_env())
    assert jobs.returncode == 0, jobs.stderr[-2000:]
    ends = [json.loads(line) for line in jobs.stdout.splitlines()]
    assert [end["case"] for end in ends] == [name for name, _ in cases], jobs.stdout[-2000:]
    for end in ends:
        name = end["case"]
        stderr = (logs / f"{name}.err").read_text()
        assert end["code"] == 0, (name, end["code"], stderr[-2000:])
        assert end["seconds"] < CASE_SECONDS
        _check_job_output(name, (logs / f"{name}.out").read_text(), stderr)
    for outside in outsides:
        assert _files_under(outside) == set()
    assert not Path("/proc/INJECTED").exists()


@pytest.mark.parametrize("case", THROUGH_BOOT)
def test_the_hook_never_ends_a_job_started_through_its_boot(case: str, tmp_path: Path) -> None:
    out, outside = tmp_path / "out", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    env, plant = _hook_case(CORPUS / "hook_env" / f"{case}.env", out)
    _plant(case, plant, out, outside, env)
    job = subprocess.run([sys.executable, "-c", JOB], capture_output=True, text=True, timeout=90, cwd=out, env={**_clean_env(), **env})
    assert job.returncode == 0, job.stderr[-2000:]
    _check_job_output(case, job.stdout, job.stderr)
    assert _files_under(outside) == set()
