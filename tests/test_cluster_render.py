"""render --cluster kubernetes: the manifests validate offline against the schemas of the
Kubernetes versions the docs name (kubernetes-validate, strict), the image is pinned by the
digest build.json records (else a comment and a warning say it is not), the GPUs per pod and
NCCL_SOCKET_IFNAME come from the stack, and the node check's container runs the very command
the Slurm prolog runs (tests/test_cluster_slurm.py runs that one on a real cluster)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.env_index import index, stack_text  # noqa: F401 (the loopback index fixture)
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


# enroot's grammar for the image pyxis hands it (pyxis prefixes docker:// to a name that is not a path):
# the digest-bearing forms of docker::_parse_uri in github.com/NVIDIA/enroot src/docker.sh (4.0 and later),
# bash's [[:alnum:]] and [[:lower:][:digit:]] written out; the user@ part left out (never rendered).
_IMAGE, _TAG, _DIGEST = r"[a-z0-9/._-]+", r"[A-Za-z0-9._:-]+", r"sha256:[A-Za-z0-9]+"
ENROOT_DIGEST_FORMS = [
    re.compile(rf"^docker://(?P<registry>[^/#]+)/(?P<image>{_IMAGE}):{_TAG}@(?P<digest>{_DIGEST})$"),
    re.compile(rf"^docker://(?P<registry>[^/@#:]+):{_TAG}@(?P<digest>{_DIGEST})$"),
    re.compile(rf"^docker://(?P<registry>[^#/@]+)#(?P<image>{_IMAGE}):{_TAG}@(?P<digest>{_DIGEST})$"),
]


def _enroot_reads(uri: str) -> tuple[str, str, str]:
    """(registry, repository, digest) as enroot 4 parses docker://URI: a first component without a dot
    or a colon is a Docker Hub namespace; REGISTRY#IMAGE names the registry."""
    for number, form in enumerate(ENROOT_DIGEST_FORMS):
        m = form.match(f"docker://{uri}")
        if m is None:
            continue
        groups = m.groupdict()
        if number == 0 and not re.search(r"[.:]", groups["registry"]):
            return "registry-1.docker.io", f"{groups['registry']}/{groups['image']}", groups["digest"]
        if number == 1:
            return "registry-1.docker.io", f"library/{groups['registry']}", groups["digest"]
        return groups["registry"], groups["image"], groups["digest"]
    raise AssertionError(f"enroot reads no digest in {uri}")


@pytest.mark.parametrize(("image", "expected"), [
    (f"ghcr.io/org/envs:1.0@{DIGEST}", ("ghcr.io", "org/envs", DIGEST)),
    (f"localhost:5000/envs:1.0-x@{DIGEST}", ("localhost:5000", "envs", DIGEST)),
    (f"{TAG}@{DIGEST}", ("registry-1.docker.io", "trainstack/envs", DIGEST)),
])
def test_the_image_is_named_as_enroot_reads_it_by_digest(image: str, expected: tuple[str, str, str]) -> None:
    from trainstack.render.slurm import enroot_uri

    assert _enroot_reads(enroot_uri(image)) == expected


def _srun_lines(script: str) -> list[str]:
    return [line for line in script.splitlines() if line.startswith("srun ")]


def test_with_image_every_sbatch_step_runs_in_the_image_through_pyxis(rendered: Path, capsys) -> None:
    (rendered / "build" / SLUG).mkdir(parents=True)
    (rendered / "build" / SLUG / "build.json").write_text(json.dumps(
        {"flavour": SLUG, "image": TAG, "image_digest": DIGEST}))
    folder = _render(rendered, "slurm", "--image")
    assert "not pinned" not in capsys.readouterr().err
    for name, steps in (("health.sbatch", 3), ("bench.sbatch", 1)):
        script = (folder / name).read_text()
        assert subprocess.run(["bash", "-n", str(folder / name)]).returncode == 0
        image_line = next(line for line in script.splitlines() if line.startswith("IMAGE=("))
        words = shlex.split(image_line.removeprefix("IMAGE=(").removesuffix(")"))
        assert words == [f"--container-image={TAG}@{DIGEST}", "--container-mounts=$OUT:$OUT", "--container-workdir=$OUT"]
        assert "PY=python" in script.splitlines()
        # every step is an srun in the image; nothing of the stack runs on the batch host
        assert len(_srun_lines(script)) == steps
        assert all('"${IMAGE[@]}" "$PY" -m ' in line for line in _srun_lines(script))
        assert [line for line in script.splitlines() if '"$PY"' in line and not line.startswith("srun ")] == []
        assert not any(line.startswith("#SBATCH --container") for line in script.splitlines())
    # the prolog runs on the node, outside any container: the interpreter it names
    assert "PY=python" not in (folder / "prolog.sh").read_text()
    folder = _render(rendered, "slurm", "--image", "--squashfs", "/shared/images/envs.sqsh")
    assert "IMAGE=(--container-image=/shared/images/envs.sqsh " in (folder / "bench.sbatch").read_text()


def test_an_image_not_pinned_is_said_and_image_options_are_checked(rendered: Path, capsys) -> None:
    folder = _render(rendered, "slurm", "--image")
    assert f"{SLUG}: the sbatch scripts name the image by its tag, not pinned" in capsys.readouterr().err
    assert "# image NOT pinned by digest: no " in (folder / "health.sbatch").read_text()
    stack = str(rendered / "envs.toml")
    for argv, expected in (
        (["--cluster", "kubernetes", "--image"], "error: --image: accepted only with --cluster slurm"),
        (["--cluster", "slurm", "--squashfs", "/x.sqsh"], "error: --squashfs: accepted only with --image"),
        (["--cluster", "slurm", "--image", "--squashfs", "images/envs.sqsh"],
         "error: --squashfs images/envs.sqsh: accepted: an absolute path on the nodes"),
    ):
        assert main(["render", stack, "--out", str(rendered / "render"), *argv]) == 2
        assert expected in capsys.readouterr().err
