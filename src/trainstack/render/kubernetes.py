"""Kubernetes manifests for a flavour, emitted by a YAML emitter (never pasted text):

- ``node-check.yaml``: a DaemonSet that runs the node check in the stack's image every few
  minutes and reports through node-problem-detector's custom-plugin convention (a NodeCondition
  ``TrainstackUnhealthy`` with trainstack's one-line reason), with its ServiceAccount and RBAC;
- ``allreduce.yaml`` and ``bench.yaml``: an indexed Job with a headless Service, one pod a node,
  torchrun's ranks joined at pod 0 (``<job>-0.<service>``), the GPUs per pod from the stack;
- ``allreduce-pytorchjob.yaml`` and ``bench-pytorchjob.yaml``: the same as a Kubeflow PyTorchJob,
  for clusters that run the training operator (Master and Workers, or elastic Workers).

The image is pinned by the digest its build record holds; where it holds none the manifest says
so in a comment and render warns. Pure."""

from __future__ import annotations

import json

import yaml

from trainstack.render.cluster import PROLOG_LEVEL, Placement, allreduce_worker, bench_command, node_check

NPD_IMAGE = "registry.k8s.io/node-problem-detector/node-problem-detector:v0.8.20"
CONDITION = "TrainstackUnhealthy"
CHECK_INTERVAL_S = 600
STATUS_DIR = "/run/trainstack"
RESULTS_CLAIM = "trainstack-results"  # a ReadWriteMany claim the platform provides
VERSIONS = ("1.30.0", "1.33.0", "1.37.0")  # the Kubernetes versions the manifests are validated against


def _labels(p: Placement, component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "trainstack", "app.kubernetes.io/component": component, "trainstack.dev/flavour": p.slug[:63]}


def _meta(p: Placement, name: str, component: str) -> dict:
    return {"name": name, "namespace": p.stack.cluster.namespace, "labels": _labels(p, component)}


def _env(p: Placement) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in p.network_env().items()]


def node_check_loop(p: Placement) -> list[str]:
    """The check container's command: the node check (the Slurm prolog's), its exit code and
    reason line kept for the problem detector, again every CHECK_INTERVAL_S seconds."""
    check = " ".join(json.dumps(a) for a in node_check("python", PROLOG_LEVEL))
    script = (
        f"while true; do {check} > {STATUS_DIR}/reason.new; echo $? > {STATUS_DIR}/code.new; "
        f"mv {STATUS_DIR}/reason.new {STATUS_DIR}/reason; mv {STATUS_DIR}/code.new {STATUS_DIR}/code; "
        f"sleep {CHECK_INTERVAL_S}; done"
    )
    return ["/bin/sh", "-c", script]


def _npd_config() -> str:
    plugin = {
        "plugin": "custom",
        "pluginConfig": {"invoke_interval": "60s", "timeout": "10s", "max_output_length": 200, "concurrency": 1},
        "source": "trainstack",
        "conditions": [{"type": CONDITION, "reason": "TrainstackHealthy", "message": "trainstack: node check passes"}],
        "rules": [
            {"type": "permanent", "condition": CONDITION, "reason": "TrainstackCheckFailed", "path": "/config/report.sh", "timeout": "10s"}
        ],
    }
    return json.dumps(plugin, indent=2)


# exit 0 OK, 1 NonOK, 2 Unknown, stdout the condition's message: node-problem-detector's convention
REPORT_SH = f"""#!/bin/sh
[ -f {STATUS_DIR}/code ] || {{ echo "trainstack: no check yet"; exit 2; }}
cat {STATUS_DIR}/reason
code=$(cat {STATUS_DIR}/code)
[ "$code" = 0 ] && exit 0
exit 1
"""


def node_check_manifests(p: Placement) -> list[dict]:
    name = "trainstack-node-check"
    meta = _meta(p, name, "node-check")
    check = {
        "name": "check",
        "image": p.image,
        "command": node_check_loop(p),
        "env": _env(p),
        "volumeMounts": [{"name": "status", "mountPath": STATUS_DIR}],
        "resources": {"limits": {"nvidia.com/gpu": p.gpus}} if p.gpus else {},
    }
    detector = {
        "name": "problem-detector",
        "image": NPD_IMAGE,
        "command": ["/node-problem-detector", "--logtostderr", "--config.custom-plugin-monitor=/config/trainstack.json"],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "volumeMounts": [
            {"name": "status", "mountPath": STATUS_DIR, "readOnly": True},
            {"name": "config", "mountPath": "/config", "readOnly": True},
        ],
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name, "labels": meta["labels"]},
            "rules": [
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
                {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": meta["labels"]},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": meta["namespace"]}],
        },
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"trainstack.json": _npd_config(), "report.sh": REPORT_SH}},
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": meta,
            "spec": {
                "selector": {"matchLabels": _labels(p, "node-check")},
                "template": {
                    "metadata": {"labels": _labels(p, "node-check")},
                    "spec": {
                        "serviceAccountName": name,
                        "containers": [check, detector],
                        "volumes": [
                            {"name": "status", "emptyDir": {}},
                            {"name": "config", "configMap": {"name": name, "defaultMode": 0o755}},
                        ],
                    },
                },
            },
        },
    ]


def _container(p: Placement, name: str, command: list[str], port_name: str) -> dict:
    return {
        "name": name,
        "image": p.image,
        "command": command,
        "env": [*_env(p), {"name": "OMP_NUM_THREADS", "value": "1"}],
        "ports": [{"containerPort": p.stack.cluster.port, "name": port_name}],
        "volumeMounts": [{"name": "results", "mountPath": "/results"}, {"name": "shm", "mountPath": "/dev/shm"}],
        "resources": {"limits": {"nvidia.com/gpu": p.gpus}} if p.gpus else {},
    }


def _volumes() -> list[dict]:
    return [{"name": "results", "persistentVolumeClaim": {"claimName": RESULTS_CLAIM}}, {"name": "shm", "emptyDir": {"medium": "Memory"}}]


def _job(p: Placement, name: str, component: str, module_args: list[str]) -> list[dict]:
    c = p.stack.cluster
    meta = _meta(p, name, component)
    torchrun = [
        "python",
        "-m",
        "torch.distributed.run",
        f"--nnodes={c.nodes}",
        f"--nproc-per-node={p.ranks_per_node}",
        "--node-rank=$(JOB_COMPLETION_INDEX)",
        f"--master-addr={name}-0.{name}",
        f"--master-port={c.port}",
        *module_args,
    ]
    container = _container(p, component, torchrun, "rendezvous")
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta,
            "spec": {
                "clusterIP": "None",
                "selector": {"job-name": name},
                "ports": [{"name": "rendezvous", "port": c.port}],
                "publishNotReadyAddresses": True,
            },
        },
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": meta,
            "spec": {
                "completionMode": "Indexed",
                "completions": c.nodes,
                "parallelism": c.nodes,
                "backoffLimit": 0,
                "template": {
                    "metadata": {"labels": _labels(p, component)},
                    "spec": {"subdomain": name, "restartPolicy": "Never", "containers": [container], "volumes": _volumes()},
                },
            },
        },
    ]


# The training operator gives its PET_* variables to the container named "pytorch" and finds the
# rendezvous port by the name "pytorchjob-port" (kubeflow.org/v1 PyTorchJob).
PYTORCH_CONTAINER = "pytorch"
PYTORCH_PORT = "pytorchjob-port"
TRAINING_OPERATOR = "v1.9.0"  # the release whose PyTorchJob CRD the manifests are validated against
PYTORCHJOB_SCHEMA = f"the PyTorchJob CRD of the training operator {TRAINING_OPERATOR}, its pod templates the schemas"


def pytorch_job(p: Placement, name: str, component: str, module_args: list[str]) -> dict:
    """A Kubeflow PyTorchJob: one Master and nodes - 1 Workers, or, with [cluster] min_nodes, Workers
    elastic between min_nodes and nodes at a c10d rendezvous. torchrun takes --nnodes, --node-rank,
    --nproc-per-node and the master's address (or the rendezvous) from the PET_* variables the
    operator sets from this spec."""
    c = p.stack.cluster

    def template() -> dict:  # one a replica type: the YAML repeats it rather than aliasing it
        container = _container(p, PYTORCH_CONTAINER, ["python", "-m", "torch.distributed.run", *module_args], PYTORCH_PORT)
        return {"metadata": {"labels": _labels(p, component)}, "spec": {"containers": [container], "volumes": _volumes()}}

    spec: dict = {"nprocPerNode": str(p.ranks_per_node)}
    if c.min_nodes is None:
        spec["runPolicy"] = {"cleanPodPolicy": "None", "backoffLimit": 0}
        replicas = {"Master": 1, "Worker": c.nodes - 1}
        restart = "Never"
    else:
        spec["runPolicy"] = {"cleanPodPolicy": "None", "backoffLimit": c.max_restarts}
        spec["elasticPolicy"] = {"rdzvBackend": "c10d", "minReplicas": c.min_nodes, "maxReplicas": c.nodes, "maxRestarts": c.max_restarts}
        replicas = {"Worker": c.nodes}
        restart = "OnFailure"
    spec["pytorchReplicaSpecs"] = {
        role: {"replicas": n, "restartPolicy": restart, "template": template()} for role, n in replicas.items() if n
    }
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": _meta(p, name, component), "spec": spec}


def _document(p: Placement, what: str, manifests: list[dict], against: str = "") -> str:
    head = [
        f"# {what}",
        f"# trainstack stack {p.stack.stack.name} {p.stack.stack.release}, flavour {p.slug}; "
        "rendered by `trainstack render --cluster kubernetes`",
        f"# validated against {against or 'the schemas'} of Kubernetes {', '.join(VERSIONS)}",
    ]
    if not p.pinned:
        head.append(f"# image NOT pinned by digest: {p.unpinned_why}")
    comments = "".join(f"{line.replace(chr(10), ' ')}\n" for line in head)
    return comments + yaml.safe_dump_all(manifests, sort_keys=False, default_flow_style=False, width=100)


def kubernetes_files(p: Placement) -> dict[str, str]:
    return {
        "kubernetes/node-check.yaml": _document(
            p, "The node check on every node, its verdict a NodeCondition (node-problem-detector's custom plugin)", node_check_manifests(p)
        ),
        "kubernetes/allreduce.yaml": _document(
            p,
            f"All-reduce between nodes: an indexed Job, one pod a node; the sweep lands in the claim '{RESULTS_CLAIM}' as allreduce.json",
            _job(p, "trainstack-allreduce", "allreduce", [*allreduce_worker(p), "--out=/results/allreduce.json"]),
        ),
        "kubernetes/bench.yaml": _document(
            p,
            "The stack's bench across nodes under FSDP2: an indexed Job, one pod a node",
            _job(p, "trainstack-bench", "bench", [*bench_command(p), "--out", "/results"]),
        ),
        "kubernetes/allreduce-pytorchjob.yaml": _document(
            p,
            "All-reduce between nodes as a Kubeflow PyTorchJob (training operator, kubeflow.org/v1), one pod a "
            f"node; the sweep lands in the claim '{RESULTS_CLAIM}' as allreduce.json",
            [pytorch_job(p, "trainstack-allreduce", "allreduce", [*allreduce_worker(p), "--out=/results/allreduce.json"])],
            PYTORCHJOB_SCHEMA,
        ),
        "kubernetes/bench-pytorchjob.yaml": _document(
            p,
            "The stack's bench across nodes under FSDP2 as a Kubeflow PyTorchJob (training operator, kubeflow.org/v1)",
            [pytorch_job(p, "trainstack-bench", "bench", [*bench_command(p), "--out", "/results"])],
            PYTORCHJOB_SCHEMA,
        ),
    }
