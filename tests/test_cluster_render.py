"""render --cluster kubernetes: the manifests validate offline against the schemas of the
Kubernetes versions the docs name (kubernetes-validate, strict), the image is pinned by the
digest build.json records (else a comment and a warning say it is not), the GPUs per pod and
NCCL_SOCKET_IFNAME come from the stack, and the node check's container runs the very command
the Slurm prolog runs (tests/test_cluster_slurm.py runs that one on a real cluster)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from tests.test_image_env import index, stack_text  # noqa: F401 (the loopback index fixture)
from trainstack.cli import main
from trainstack.render.kubernetes import VERSIONS

SLUG = "cpu-debian12-py311-release"
CLUSTER = """
[cluster]
nodes = 4
gpus_per_node = 8
namespace = "ml-fleet"
"""
DIGEST = "sha256:" + "ab" * 32
TAG = f"trainstack/envs:1.0-{SLUG}"


def _render(tmp_path: Path, engine: str, *extra: str) -> Path:
    stack = tmp_path / "envs.toml"
    if not stack.exists():
        stack.write_text(stack_text(INDEX[0]) + CLUSTER)
        assert main(["lock", str(stack)]) == 0
    assert main(["render", str(stack), "--out", str(tmp_path / "render"), "--cluster", engine,
                 "--build-dir", str(tmp_path / "build"), *extra]) == 0
    return tmp_path / "render" / SLUG / engine


INDEX: list[str] = []


@pytest.fixture()
def rendered(index: str, tmp_path: Path) -> Path:  # noqa: F811
    INDEX[:] = [index]
    return tmp_path


def _documents(folder: Path) -> dict[str, list[dict]]:
    return {p.name: list(yaml.safe_load_all(p.read_text())) for p in sorted(folder.glob("*.yaml"))}


def test_manifests_validate_and_pin_the_image_by_the_recorded_digest(rendered: Path, capsys) -> None:
    import kubernetes_validate

    folder = _render(rendered, "kubernetes")
    assert f"{SLUG}: the Kubernetes manifests name the image by its tag, not pinned" in capsys.readouterr().err
    assert "# image NOT pinned by digest: no " in (folder / "allreduce.yaml").read_text()
    (rendered / "build" / SLUG).mkdir(parents=True)
    (rendered / "build" / SLUG / "build.json").write_text(json.dumps(
        {"flavour": SLUG, "image": TAG, "image_digest": DIGEST}))
    folder = _render(rendered, "kubernetes")
    docs = _documents(folder)
    assert sorted(docs) == ["allreduce-pytorchjob.yaml", "allreduce.yaml", "bench-pytorchjob.yaml", "bench.yaml",
                            "node-check.yaml"]
    for name in ("allreduce-pytorchjob.yaml", "bench-pytorchjob.yaml"):  # tests/test_cluster_pytorchjob.py validates them
        assert "NOT pinned" not in (folder / name).read_text()
        del docs[name]
    for name, manifests in docs.items():
        assert "NOT pinned" not in (folder / name).read_text()
        for manifest in manifests:
            for version in VERSIONS:
                kubernetes_validate.validate(manifest, version, strict=True)
    kinds = {name: [m["kind"] for m in ms] for name, ms in docs.items()}
    assert kinds["node-check.yaml"] == ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet"]
    assert kinds["allreduce.yaml"] == kinds["bench.yaml"] == ["Service", "Job"]
    service, job = docs["allreduce.yaml"]
    assert service["spec"]["clusterIP"] == "None" and job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 4
    pod = job["spec"]["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"]
    (container,) = pod["containers"]
    assert container["image"] == f"{TAG}@{DIGEST}"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert "--nproc-per-node=8" in container["command"] and "--backend=nccl" in container["command"]
    assert {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"} in container["env"]
    assert job["metadata"]["namespace"] == "ml-fleet"


def test_the_daemonset_runs_the_slurm_prologs_command(rendered: Path) -> None:
    docs = _documents(_render(rendered, "kubernetes"))
    daemonset = docs["node-check.yaml"][-1]
    check = daemonset["spec"]["template"]["spec"]["containers"][0]
    loop = check["command"][2]
    k8s_command = shlex.split(loop.split(" > ")[0].removeprefix("while true; do "))
    prolog = (_render(rendered, "slurm", "--python", "/opt/env/bin/python") / "prolog.sh").read_text()
    exec_line = next(line for line in prolog.splitlines() if line.startswith("exec "))
    slurm_command = shlex.split(exec_line.removeprefix("exec ").replace('"$@"', ""))
    assert slurm_command[0] == "$PY" and "PY=/opt/env/bin/python" in prolog
    assert k8s_command[0] == "python" and k8s_command[1:] == slurm_command[1:]
    assert k8s_command[1:] == ["-m", "trainstack", "health", "--prolog", "--level", "1"]


def test_a_cluster_engine_not_known_is_refused(rendered: Path, capsys) -> None:
    stack = rendered / "envs.toml"
    stack.write_text(stack_text(INDEX[0]))
    assert main(["render", str(stack), "--cluster", "nomad"]) == 2
    assert "error: --cluster nomad: accepted values are slurm, kubernetes" in capsys.readouterr().err
