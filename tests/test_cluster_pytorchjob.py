"""render --cluster kubernetes also writes Kubeflow PyTorchJobs (kubeflow.org/v1) for the all-reduce
and the bench. Each is validated offline three ways: against the PyTorchJob CRD's OpenAPI v3 schema
(tests/data/kubernetes/pytorchjob-v1.schema.yaml, the training operator v1.9.0's, its source in
its header) with unknown fields refused as a server's strict field validation does; its pod
templates against Kubernetes' own schemas (kubernetes-validate, strict); and against the rules
the operator's admission webhook adds (pkg/webhooks/pytorch/pytorchjob_webhook.go of v1.9.0).
torchrun's own argument parser then reads the PET_* variables the operator sets (per
pkg/controller.v1/pytorch/envvar.go, master.go, elastic.go) into the job's size and rank."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.env_index import index, stack_text  # noqa: F401 (the loopback index fixture)
from trainstack.cli import main
from trainstack.render.kubernetes import VERSIONS

SLUG = "cpu-debian12-py311-release"
SCHEMA = Path(__file__).parent / "data" / "kubernetes" / "pytorchjob-v1.schema.yaml"
DIGEST = "sha256:" + "cd" * 32
TAG = f"trainstack/envs:1.0-{SLUG}"
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
RESTART_POLICIES = ("Always", "OnFailure", "Never", "ExitCode")  # kubeflow.org/v1 common_types.go


def strict(schema: object) -> object:
    """The CRD's schema with every object that lists its properties closed to others: the API
    server's strict field validation (kubectl's default) refuses an unknown field."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {k: strict(v) for k, v in schema.items()}
    if "properties" in closed and "additionalProperties" not in closed:
        closed["additionalProperties"] = False
    return closed


VALIDATOR = jsonschema.Draft202012Validator(strict(yaml.safe_load(SCHEMA.read_text())))


def webhook_errors(job: dict) -> list[str]:
    """The training operator's admission rules for a PyTorchJob (v1.9.0's validatePyTorchJob)."""
    errors = []
    if not DNS_1035.match(job["metadata"]["name"]) or len(job["metadata"]["name"]) > 63:
        errors.append("metadata.name: not a DNS-1035 label")
    spec = job["spec"]
    specs = spec.get("pytorchReplicaSpecs") or {}
    if not specs:
        errors.append("spec.pytorchReplicaSpecs: must be required")
    if "elasticPolicy" in spec:
        if "Worker" not in specs:
            errors.append("spec.pytorchReplicaSpecs[Worker]: must be configured if elastic policy is used")
        if "nProcPerNode" in spec["elasticPolicy"] and "nprocPerNode" in spec:
            errors.append("spec.elasticPolicy.nProcPerNode: must not be used with spec.nprocPerNode")
    for role, replica in specs.items():
        containers = replica["template"]["spec"].get("containers", [])
        if role not in ("Master", "Worker"):
            errors.append(f"{role}: not supported")
        if not containers or any(not c.get("image") for c in containers):
            errors.append(f"{role}: containers and their images must be specified")
        if not any(c["name"] == "pytorch" for c in containers):
            errors.append(f"{role}: must have at least one container with name pytorch")
        if role == "Master" and replica.get("replicas") != 1:
            errors.append("Master.replicas: must be 1")
        if role == "Worker" and replica.get("replicas", 1) < 1:
            errors.append("Worker.replicas: must be at least 1")
        if replica.get("restartPolicy", "OnFailure") not in RESTART_POLICIES:
            errors.append(f"{role}.restartPolicy: not one of {RESTART_POLICIES}")
    return errors


def validate(job: dict) -> None:
    import kubernetes_validate

    schema_errors = [f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in VALIDATOR.iter_errors(job)]
    assert schema_errors == [] and webhook_errors(job) == []
    for role, replica in job["spec"]["pytorchReplicaSpecs"].items():
        pod_template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": f"{job['metadata']['name']}-{role}".lower()},
                        "template": replica["template"]}
        for version in VERSIONS:
            kubernetes_validate.validate(pod_template, version, strict=True)


def _render(tmp_path: Path, url: str, cluster: str) -> dict[str, list[dict]]:
    stack = tmp_path / "envs.toml"
    stack.write_text(stack_text(url) + cluster)
    assert main(["lock", str(stack)]) == 0
    (tmp_path / "build" / SLUG).mkdir(parents=True, exist_ok=True)
    (tmp_path / "build" / SLUG / "build.json").write_text(json.dumps({"flavour": SLUG, "image": TAG, "image_digest": DIGEST}))
    assert main(["render", str(stack), "--out", str(tmp_path / "render"), "--cluster", "kubernetes",
                 "--build-dir", str(tmp_path / "build")]) == 0
    folder = tmp_path / "render" / SLUG / "kubernetes"
    assert not [p.name for p in folder.glob("*.yaml") if re.search(r"[&*]id\d", p.read_text())]  # no YAML alias
    return {p.name: list(yaml.safe_load_all(p.read_text())) for p in sorted(folder.glob("*.yaml"))}


def _torchrun_args(container: dict) -> list[str]:
    command = container["command"]
    assert command[:3] == ["python", "-m", "torch.distributed.run"]
    return command[3:]


def _parsed_by_torchrun(args: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch):  # noqa: ANN202
    from torch.distributed.run import get_args_parser

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return get_args_parser().parse_args(args)


def test_a_pytorchjob_of_one_master_and_workers_validates_and_runs_the_indexed_jobs_command(
        index: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    docs = _render(tmp_path, index, '\n[cluster]\nnodes = 4\ngpus_per_node = 8\nnamespace = "ml-fleet"\nport = 29600\n')
    for name in ("allreduce", "bench"):
        (job,) = docs[f"{name}-pytorchjob.yaml"]
        validate(job)
        assert (job["apiVersion"], job["kind"], job["metadata"]["namespace"]) == ("kubeflow.org/v1", "PyTorchJob", "ml-fleet")
        spec = job["spec"]
        assert "elasticPolicy" not in spec and spec["nprocPerNode"] == "8"
        replicas = spec["pytorchReplicaSpecs"]
        assert {role: r["replicas"] for role, r in replicas.items()} == {"Master": 1, "Worker": 3}
        (container,) = replicas["Master"]["template"]["spec"]["containers"]
        assert replicas["Worker"]["template"] == replicas["Master"]["template"]
        assert container["image"] == f"{TAG}@{DIGEST}"
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
        assert container["ports"] == [{"containerPort": 29600, "name": "pytorchjob-port"}]
        assert {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"} in container["env"]
        # the same module and arguments as the indexed Job's torchrun, after its own options
        indexed = docs[f"{name}.yaml"][1]["spec"]["template"]["spec"]["containers"][0]["command"]
        args = _torchrun_args(container)
        assert indexed[-len(args):] == args and args[:2] == ["-m", "trainstack.health.allreduce_worker" if name == "allreduce"
                                                             else "trainstack"]
    # what the operator sets on the second Worker (RANK 2): torchrun reads its size and rank from it
    parsed = _parsed_by_torchrun(args, {"PET_NNODES": "4", "PET_NPROC_PER_NODE": "8", "PET_NODE_RANK": "2",
                                        "PET_MASTER_ADDR": "trainstack-bench-master-0", "PET_MASTER_PORT": "29600"},
                                 monkeypatch)
    assert (parsed.nnodes, parsed.nproc_per_node, parsed.node_rank) == ("4", "8", 2)
    assert (parsed.master_addr, parsed.master_port) == ("trainstack-bench-master-0", 29600)


def test_with_min_nodes_the_pytorchjob_is_elastic_workers_at_a_c10d_rendezvous(
        index: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    docs = _render(tmp_path, index, "\n[cluster]\nnodes = 4\ngpus_per_node = 0\nmin_nodes = 2\nmax_restarts = 5\n")
    (job,) = docs["bench-pytorchjob.yaml"]
    validate(job)
    spec = job["spec"]
    assert spec["elasticPolicy"] == {"rdzvBackend": "c10d", "minReplicas": 2, "maxReplicas": 4, "maxRestarts": 5}
    assert {role: r["replicas"] for role, r in spec["pytorchReplicaSpecs"].items()} == {"Worker": 4}
    assert spec["nprocPerNode"] == "1" and spec["runPolicy"]["backoffLimit"] == 5
    (container,) = spec["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert "resources" not in container or container["resources"] == {}
    assert "--device" in container["command"] and container["command"][container["command"].index("--device") + 1] == "cpu"
    parsed = _parsed_by_torchrun(_torchrun_args(container), {
        "PET_NNODES": "2:4", "PET_NPROC_PER_NODE": "1", "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": "trainstack-bench-worker-0:29500", "PET_MAX_RESTARTS": "5"}, monkeypatch)
    from torch.distributed.run import config_from_args

    config, _, _ = config_from_args(parsed)
    assert (config.min_nodes, config.max_nodes, config.max_restarts) == (2, 4, 5)
    assert (config.rdzv_backend, config.rdzv_endpoint) == ("c10d", "trainstack-bench-worker-0:29500")


def test_the_checks_refuse_what_the_operator_would(index: str, tmp_path: Path) -> None:  # noqa: F811
    (job,) = _render(tmp_path, index, "\n[cluster]\nnodes = 2\ngpus_per_node = 0\n")["allreduce-pytorchjob.yaml"]
    validate(job)
    typo = json.loads(json.dumps(job))
    typo["spec"]["pytorchReplicaSpec"] = typo["spec"].pop("pytorchReplicaSpecs")
    assert {e.validator for e in VALIDATOR.iter_errors(typo)} == {"required", "additionalProperties"}
    two_masters = json.loads(json.dumps(job))
    two_masters["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2
    assert webhook_errors(two_masters) == ["Master.replicas: must be 1"]
    renamed = json.loads(json.dumps(job))
    renamed["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "bench"
    assert webhook_errors(renamed) == ["Worker: must have at least one container with name pytorch"]


def test_min_nodes_above_nodes_is_one_error_line(index: str, tmp_path: Path, capsys) -> None:  # noqa: F811
    stack = tmp_path / "envs.toml"
    stack.write_text(stack_text(index) + "\n[cluster]\nnodes = 2\nmin_nodes = 3\n")
    assert main(["check", str(stack)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith(f"error: {stack}:") and "min_nodes 3 is more than nodes 2" in err[0], err
