"""The commands of the README and of docs/, run as written in a copy of the examples: each one is
either run here or listed in SKIPPED with the reason, so a new command cannot go unchecked."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clirun import assert_no_traceback

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))  # the verbs in full and the figures: their commands too

# Run in this order in one sandbox (a copy of examples/): later ones use what earlier ones made.
# the README's commands that build cpu-minimal's one flavour, of Python 3.11, or use what it built
PY311_BUILD = re.compile(r"^trainstack (build|release) examples/stacks/cpu-minimal|py311-release/venv")
RUN = [
    "trainstack check examples/stacks/torch-cuda.toml --verbose",
    "trainstack lock examples/stacks/cpu-minimal.toml --upgrade-package numpy",
    "trainstack keys examples/stacks/cpu-minimal.toml",
    "trainstack build examples/stacks/cpu-minimal.toml --backend venv",
    "trainstack report --python build/cpu-debian12-py311-release/venv/bin/python --json",
    "trainstack lock examples/stacks/cpu-minimal.toml --offline",  # from the cache the lock above filled
    "trainstack build examples/stacks/cpu-minimal.toml --offline",
    "trainstack release examples/stacks/cpu-minimal.toml --results build",  # a first release: no --previous
    "trainstack lock examples/stacks/torch-cuda.toml --flavour cu130-ubuntu2404-py312-release",
    "trainstack render examples/stacks/torch-cuda.toml --flavour cu130-ubuntu2404-py312-release --out build/render",
    "trainstack memplan --preset 3b --batch 2 --seq 4096 --budget 60GiB",
    "trainstack memplan --preset 8b --batch 2 --seq 4096 --budget 139GiB --precision bf16",
    "trainstack lock broken.toml",  # the README's example of an error line, with a broken.toml made for it
]

SKIPPED = {
    "sh bootstrap && . .venv/bin/activate && trainstack lock examples/stacks/quickstart.toml && trainstack build examples/stacks/quickstart.toml && trainstack verify examples/stacks/quickstart.toml":
        "makes a virtual environment and installs trainstack from PyPI's packages; tests/test_quickstart.py locks and builds "
        "this stack and verifies it without --flavour, "
        "verify runs numpy's test suite (tests/test_release_verify.py runs verify on this stack), and "
        "benchmarks/fresh_debian.py runs the whole command on a fresh Debian 12, Debian 13 and Ubuntu 24.04 "
        "(tests/test_bootstrap.py runs bootstrap's refusals)",
    "bash .ci/run": "the whole CI: installs system packages and runs every test",
    "trainstack memplan --preset llama3.1-8b --precision bf16 --accum 16 --budget 76GiB --offload auto":
        "plans the 8B at sequence 8192 (seconds of fake-tensor calibration); tests/test_memplan_offload.py runs --offload, --accum and the ladder on smaller presets",
    "trainstack memplan --preset 8b --world-size 4 --shard zero2 --json":
        "tests/test_memplan_offload.py runs --world-size, --shard and --json through the CLI on the tiny preset",
    "torchrun --nproc-per-node 8 -m trainstack.cli bench --preset llama3.1-8b --batch 1 --accum 16 --ablation --modes fsdp2,zero2,zero3,zero2+offload":
        "GPU only: 8 GPUs; tests/test_bench_frameworks.py and tests/test_bench_zero.py run these modes on 2 CPU ranks",
    "trainstack bench --preset llama3.1-8b --batch 1 --accum 16 --modes compile+bf16+planned,zero2+offload --ablation":
        "GPU only: Llama-3.1 8B at sequence 8192 (benchmarks/offload_8b.sh runs it); tests/test_bench_zero.py runs "
        "zero2+offload on CPU ranks",
    "trainstack bench --preset llama3.1-8b --batch 1 --modes compile+bf16+planned --health health.json":
        "GPU only: trains Llama-3.1 8B at sequence 8192 on one H200 (tests/test_reference_preset.py plans it on CPU)",
    "trainstack build examples/stacks/cpu-minimal.toml --backend oci":
        "an OCI image from a debootstrap base takes minutes (tests/test_build_oci.py builds one)",
    "trainstack linkcheck build/cu130-ubuntu2404-py312-release/venv --stack examples/stacks/torch-cuda.toml":
        "needs the built CUDA venv of torch-cuda (gigabytes of wheels)",
    "trainstack verify examples/stacks/cpu-minimal.toml --flavour cpu-debian12-py311-release":
        "runs numpy's test suite: about 2 minutes (tests/test_release_verify.py runs it)",
    "trainstack release examples/stacks/cpu-minimal.toml --previous old/stack.lock.json --results build":
        "needs the lock manifest of a previous release, old/stack.lock.json (tests/test_release_publish.py makes one)",
    "trainstack health --level 2 --expect-gpus 8 --json": "GPU only: needs 8 GPUs",
    "trainstack memplan --hf-config ./qwen2-1.5b --batch 4 --seq 4096 --budget 60GiB --optimizer adafactor":
        "needs a Hugging Face config folder, ./qwen2-1.5b (tests/test_memplan_any_model.py plans Hugging Face models)",
    "trainstack memplan --factory mymodels:build --budget 0.8 --json":
        "needs the user's own module mymodels, and a GPU for a fraction of its memory",
    "trainstack run --oom-snapshot -- torchrun --nproc-per-node 8 train.py --config big.yaml":
        "a user's job on 8 GPUs (tests/test_run_*.py run real jobs)",
    "trainstack run --memplan 60GiB --profile-steps 100:103 -- python train.py":
        "a user's training job, train.py (tests/test_run_*.py run real jobs)",
    "trainstack lock stack.toml && trainstack build stack.toml":
        "needs a private index and its credentials (tests/test_private_index.py serves one on loopback)",
    "trainstack bench --preset 8b --batch 2 --seq 4096 --ablation --modes compile+bf16+planned,compile+bf16+fp8+planned":
        "GPU only: an 8b ablation with float8",
    "trainstack bench --preset 125m --batch 4 --seq 1024 --parity compile+bf16,compile+bf16+fp8 --out results":
        "GPU only: float8 needs a GPU with float8 matrix units",
    "trainstack bench --preset 1b --batch 4 --seq 1024 --parity compile+bf16,compile+bf16+fp8 --parity-seeds 3 --steps 600":
        "GPU only: float8 needs a GPU with float8 matrix units (tests/test_bench_parity.py runs --parity-seeds on the CPU)",
    "trainstack bench --preset 1b --batch 4 --seq 4096 --ablation --out results": "GPU only: a 1b ablation",
    "trainstack bench --preset 1b --batch 4 --seq 4096 --modes compile+bf16 --profile prof": "GPU only: a 1b compile+bf16 run",
    "trainstack bench --compare old/bench-1b-b4-s4096.jsonl results/bench-1b-b4-s4096.jsonl":
        "compares the results of two GPU runs (tests/test_new_user.py runs --compare on files it writes)",
    "trainstack bench --preset 125m --seq 512 --modes compile --in build/a/venv --in build/b/venv --repeats 5":
        "needs two venvs of the user's own (tests/test_bench_attribute.py runs --in on two it builds)",
    "trainstack bench --hf-config gpt2.json --modes eager --attribute old/stack.lock.json stack.toml --order transformers --out results":
        "needs two locked releases of the user's own (tests/test_bench_attribute.py runs --attribute on two it locks)",
    "trainstack bench --hf-config gpt2.json --modes compile+bf16 --attribute old/stack.toml stack.toml --over /usr/bin/python3":
        "needs two locked releases and an image's Python with torch (tests/test_bench_attribute.py runs --over on this interpreter)",
    "trainstack render stack.toml --cluster slurm --build-dir build --out build/render":
        "needs a locked stack.toml of the user's own (tests/test_cluster_slurm.py renders one and runs its files on Slurm)",
    "sbatch build/render/cpu-debian12-py311-release/slurm/health.sbatch /shared/fleet-2026-12":
        "needs a Slurm cluster (tests/test_cluster_slurm.py starts one in namespaces and runs this script)",
    "sbatch build/render/cpu-debian12-py311-release/slurm/bench.sbatch /shared/bench-2026-12":
        "needs a Slurm cluster (tests/test_cluster_slurm.py starts one in namespaces and runs this script)",
    "trainstack render stack.toml --cluster kubernetes --build-dir build --out build/render":
        "needs a locked stack.toml of the user's own (tests/test_cluster_render.py renders and validates one)",
    "kubectl apply -f build/render/cpu-debian12-py311-release/kubernetes/node-check.yaml":
        "needs a Kubernetes cluster (tests/test_cluster_render.py validates the manifests offline)",
    "trainstack render stack.toml --cluster slurm --image --build-dir build --out build/render":
        "needs a locked stack.toml of the user's own (tests/test_cluster_render.py renders one; tests/test_cluster_slurm.py "
        "has Slurm's sbatch --test-only accept its scripts)",
    "kubectl apply -f build/render/cpu-debian12-py311-release/kubernetes/bench-pytorchjob.yaml":
        "needs a Kubernetes cluster with Kubeflow's training operator (tests/test_cluster_pytorchjob.py validates it offline)",
    "trainstack health --fleet /shared/fleet-2026-12 --html fleet.html --output fleet.json":
        "reads what a cluster's nodes wrote (tests/test_cluster_slurm.py and tests/test_health_fleet.py run it)",
    "trainstack memplan --preset 1b --batch 4 --seq 4096 --budget 45GiB --compiled --output plan.json":
        "the compiled plan measures compiled blocks on a GPU; on a CPU it is the plan above (tests/test_memplan_cli.py)",
}

BROKEN_TOML = """[stack]
name = "broken"
release = "2026.12.0"
image = "trainstack/broken"

[components]
numpy = ">=2.2"

[matrix]
cuda = ["cpu"]
os = ["debian12"]
pyton = ["3.11"]
"""


def readme_commands(text: str) -> list[str]:
    """Commands in ```bash fences, '$ ' lines of other fences, and indented lines of the verbs."""
    commands, fence = [], None
    for line in text.splitlines():
        if line.startswith("```"):
            fence = None if fence is not None else line[3:].strip()
            continue
        if fence == "bash" and line.strip():
            commands.append(line.strip())
        elif fence is not None and line.startswith("$ "):
            commands.append(line[2:].strip())
        elif fence is None and re.match(r"    (trainstack|python3?|bash|BENCH_\w+=) ", line):
            commands.append(line.strip())
    return commands


def documented_commands() -> list[str]:
    return [c for path in (README, *DOCS) for c in readme_commands(path.read_text(encoding="utf-8"))]


def test_every_readme_command_is_run_or_skipped_with_a_reason() -> None:
    assert DOCS, "no docs/*.md"
    found = documented_commands()
    assert found, "no command found in the README"
    unknown = [c for c in found if c not in RUN and c not in SKIPPED]
    assert not unknown, f"README commands neither run nor skipped here: {unknown}"
    gone = [c for c in RUN if c not in found]
    assert not gone, f"run here but no longer in the README: {gone}"


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("readme")
    shutil.copytree(REPO / "examples", root / "examples", ignore=shutil.ignore_patterns("*.lock", "*.release"))
    (root / "broken.toml").write_text(BROKEN_TOML)
    yield root
    shutil.rmtree(root / "build", ignore_errors=True)  # a venv: do not leave it in the temp tree


def _env() -> dict[str, str]:
    """PATH with the directory of this interpreter's entry points, where pip put 'trainstack'."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.mark.timeout(600)
@pytest.mark.parametrize("command", [pytest.param(c, marks=pytest.mark.python("3.11")) if PY311_BUILD.search(c) else c for c in RUN])
def test_readme_command_runs_as_written(command: str, sandbox: Path) -> None:
    proc = subprocess.run(["bash", "-c", command], cwd=sandbox, capture_output=True, text=True, timeout=580, env=_env())
    assert_no_traceback(proc.stderr)
    if command == "trainstack lock broken.toml":
        readme = README.read_text(encoding="utf-8")
        expected = re.search(r"^error: broken\.toml:.*$", readme, flags=re.M).group(0)
        assert proc.returncode == 2 and proc.stderr.strip() == expected, proc.stderr
        return
    assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"


def test_readme_test_command_is_the_one_ci_runs() -> None:
    ci_lines = [line for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
                if line.startswith("python3 -m pytest ")]
    assert len(ci_lines) == 1, ci_lines
    ci_command = ci_lines[0].removesuffix(' "$@"')
    assert "--durations=25" in ci_command
    assert f"`{ci_command}`" in README.read_text(encoding="utf-8")
