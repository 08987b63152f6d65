"""trainstack on a real Slurm cluster: Debian's slurmctld, two slurmd and munge, each node in
namespaces of its own (tests.slurm_cluster). The rendered prolog runs on each node for each job;
a fault planted on one node (a 1 MiB /dev/shm in that node's own mount namespace, so that the
shm check really fails there) drains exactly that node with trainstack's reason, and the next
job lands on the healthy one. The rendered sbatch scripts run the all-reduce (gloo) and bench's
tiny preset under FSDP2 across the two nodes; the fleet report names the node whose CPU a
cgroup caps. The host's hostname, /etc/hosts, mounts, links, addresses and routes are asserted
unchanged, and no daemon is left running."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.env_index import Index
from tests.loopback import serve
from tests.slurm_cluster import Cluster, HostState, cmdline, missing_tools, run_batch, use_prolog, use_script, wait_for
from tests.stacks import demo_stack
from trainstack.cli import main

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or bool(missing_tools()),
                                reason=f"needs root and Slurm's programs (missing: {', '.join(missing_tools())})")

SLUG = "cpu-debian12-py311-release"
TAIL = """
[verify]
smoke = []

[env]
NCCL_SOCKET_IFNAME = "eth0"

[bench]
preset = "tiny"
batch = 2
seq = 64
steps = 3
warmup = 1
modes = ["eager"]

[cluster]
nodes = 2
gpus_per_node = 0
port = 29511
allreduce_sizes = [65536, 1048576, 4194304]
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stack locked from a loopback index and rendered for Slurm, with this interpreter on the nodes."""
    tmp = tmp_path_factory.mktemp("stack")
    with pytest.MonkeyPatch.context() as mp, serve(Index) as url:
        mp.setenv("UV_CACHE_DIR", str(tmp / "uv-cache"))
        for var in ("UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL", "UV_INDEX"):
            mp.delenv(var, raising=False)
        stack = tmp / "fleet.toml"
        stack.write_text(demo_stack("fleet", url, tail=TAIL))
        assert main(["lock", str(stack)]) == 0
        assert main(["render", str(stack), "--out", str(tmp / "render"), "--cluster", "slurm",
                     "--build-dir", str(tmp / "build"), "--python", sys.executable]) == 0
    return tmp / "render" / SLUG / "slurm"


@pytest.fixture(scope="module")
def cluster(rendered: Path) -> Iterator[Cluster]:
    before = HostState.take()
    base = Path(tempfile.mkdtemp(prefix="ts-slurm-"))  # short: munge's socket path has a limit
    (base / "node-out").mkdir()
    (base / "epilog-out").mkdir()
    c = Cluster(base, ["n1", "n2"], base / "prolog", base / "epilog")
    use_prolog(c, rendered / "prolog-drain.sh")
    use_script(c.epilog, rendered / "epilog-drain.sh", base / "epilog-out")
    try:
        c.start()
        yield c
    finally:
        c.stop()
        after = HostState.take()
        leftover = [p for p in os.listdir("/proc") if p.isdigit() and cmdline(p).startswith(str(base))]
        shutil.rmtree(base, ignore_errors=True)
        assert after == before, "the cluster changed the host"
        assert not leftover


def plant_small_shm(c: Cluster, node: str) -> None:
    """The fault, once earlier jobs are done (their epilogs too, which would meet it first)."""
    wait_for("no job left", lambda: not c.client(["squeue", "-h"]).stdout.strip(), 60)
    c.wait_idle(c.node_names)
    c.nodes[node].run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", "/dev/shm"])


def remove_fault(c: Cluster, node: str) -> None:
    c.nodes[node].run(["umount", "/dev/shm"])
    c.client(["scontrol", "update", f"nodename={node}", "state=resume"], check=False)
    c.wait_idle([node])


def test_the_prolog_runs_on_each_node_for_each_job(cluster: Cluster) -> None:
    done = cluster.client(["srun", "-N2", "hostname"])
    assert sorted(done.stdout.split()) == ["n1", "n2"]
    for node in ("n1", "n2"):
        report = json.loads((cluster.base / "node-out" / f"{node}.json").read_text())
        assert (report["node"], report["mode"], report["exit_code"], report["reason"]) == (node, "prolog", 0, "")
        gpu = {c["name"]: c for c in report["checks"]}["gpu.count"]
        assert (gpu["status"], gpu["message"]) == ("skip", "skip: no GPU")


def test_slurm_accepts_the_sbatch_scripts_that_run_the_image_through_pyxis(cluster: Cluster, rendered: Path) -> None:
    """pyxis and enroot cannot be installed here. Slurm's own `sbatch --test-only` checks what plain
    Slurm reads of the scripts rendered with --image (their #SBATCH directives, the script's form;
    no job runs); the --container-* options are on the srun lines, pyxis's options, which plain
    Slurm's srun refuses, as the last assertion shows: their content is tests/test_cluster_render.py's."""
    tmp = rendered.parents[2]
    build = tmp / "build-image" / SLUG
    build.mkdir(parents=True)
    (build / "build.json").write_text(json.dumps({"flavour": SLUG, "image": f"trainstack/fleet:2026.12.0-{SLUG}",
                                                  "image_digest": "sha256:" + "ef" * 32}))
    assert main(["render", str(tmp / "fleet.toml"), "--out", str(tmp / "render-image"), "--cluster", "slurm",
                 "--build-dir", str(tmp / "build-image"), "--image"]) == 0
    folder = tmp / "render-image" / SLUG / "slurm"
    for name in ("health.sbatch", "bench.sbatch"):
        script = (folder / name).read_text()
        assert f"--container-image=trainstack/fleet:2026.12.0-{SLUG}@sha256:" in script and "NOT pinned" not in script
        done = cluster.client(["sbatch", "--test-only", f"--chdir={cluster.base}", str(folder / name),
                               str(cluster.base / "pyxis-out")], check=False)
        assert done.returncode == 0 and " to start at " in done.stderr, done
    assert "trainstack-" not in cluster.client(["squeue", "-h", "-o", "%j"]).stdout  # nothing was submitted
    refused = cluster.client(["srun", "-N1", "--container-image=x", "true"], check=False)
    assert refused.returncode != 0 and "container-image" in refused.stderr, refused


def test_a_planted_fault_drains_exactly_that_node_with_trainstacks_reason(cluster: Cluster) -> None:
    plant_small_shm(cluster, "n2")
    try:
        job = cluster.client(["sbatch", "--parsable", "-N1", "-w", "n2", f"--chdir={cluster.base}",
                              "--wrap", "hostname"]).stdout.strip()
        wait_for("n2 drained", lambda: cluster.states().get("n2", "").startswith("drain"), 60)
        assert cluster.reasons() == {"n2": "trainstack: shm small"}
        assert cluster.states()["n1"] == "idle"
        report = json.loads((cluster.base / "node-out" / "n2.json").read_text())
        assert report["exit_code"] == 1 and report["reason"] == "trainstack: shm small"
        # the next job lands on the healthy node
        assert cluster.client(["srun", "-N1", "hostname"]).stdout.strip() == "n1"
        cluster.client(["scancel", job], check=False)
    finally:
        remove_fault(cluster, "n2")


def test_without_drain_slurm_gives_its_fixed_reason_and_the_log_holds_trainstacks(cluster: Cluster,
                                                                                    rendered: Path) -> None:
    use_prolog(cluster, rendered / "prolog.sh")
    use_script(cluster.epilog, rendered / "epilog.sh", cluster.base / "epilog-out")
    plant_small_shm(cluster, "n2")
    try:
        job = cluster.client(["sbatch", "--parsable", "-N1", "-w", "n2", f"--chdir={cluster.base}",
                              "--wrap", "hostname"]).stdout.strip()
        wait_for("n2 drained", lambda: cluster.states().get("n2", "").startswith("drain"), 60)
        assert cluster.reasons() == {"n2": "Prolog error"}
        log = wait_for("the reason in slurmd's log", lambda: "trainstack: shm small" in
                       (cluster.base / "slurmd-n2.log").read_text(errors="replace"), 20)
        assert log
        assert json.loads((cluster.base / "node-out" / "n2.json").read_text())["reason"] == "trainstack: shm small"
        cluster.client(["scancel", job], check=False)
    finally:
        remove_fault(cluster, "n2")
        use_prolog(cluster, rendered / "prolog-drain.sh")
        use_script(cluster.epilog, rendered / "epilog-drain.sh", cluster.base / "epilog-out")


def test_the_epilog_checks_deeper_after_a_failed_job(cluster: Cluster) -> None:
    report = cluster.base / "epilog-out" / "n1.json"
    after_good = wait_for("the epilog after the jobs above", lambda: report.exists() and json.loads(report.read_text()), 60)
    assert after_good["level"] == 1  # the jobs above ended well: the quick check
    report.unlink()
    cluster.client(["sbatch", "-N1", "-w", "n1", f"--chdir={cluster.base}", "--wrap", "exit 3"])
    after_failed = wait_for("the epilog's report", lambda: report.exists() and json.loads(report.read_text()), 60)
    assert after_failed["level"] == 2 and after_failed["exit_code"] == 0
    checks = {c["name"]: c for c in after_failed["checks"]}
    assert checks["gemm.bf16"]["status"] == "skip" and checks["host.gemm_bf16"]["value"] > 0
    cluster.wait_idle(["n1", "n2"])


def test_bench_sbatch_runs_fsdp2_across_two_nodes_and_names_them(cluster: Cluster, rendered: Path) -> None:
    out = cluster.base / "bench"
    state, log = run_batch(cluster, rendered / "bench.sbatch", str(out))
    assert state == "COMPLETED", (log, cluster.logs())
    (row,) = [json.loads(line) for line in (out / "bench-tiny-b2-s64.jsonl").read_text().splitlines()]
    assert row["status"] == "ok" and row["world_size"] == 2 and "FSDP2" in row["precision"]
    assert sorted(row["nodes"]) == ["n1", "n2"]


def test_health_sbatch_reduces_across_nodes_and_the_fleet_report_names_the_capped_node(
        cluster: Cluster, rendered: Path) -> None:
    cluster.cap_cpu("n2")
    try:
        out = cluster.base / "fleet"
        state, log = run_batch(cluster, rendered / "health.sbatch", str(out))
    finally:
        cluster.uncap_cpu()
    assert state == "COMPLETED" and "finding: n2: " in log and "trainstack: findings in" in log, (log, cluster.logs())
    sweep = json.loads((out / "allreduce.json").read_text())
    assert sweep["nodes"] == ["n1", "n2"] and sweep["world_size"] == 2 and sweep["backend"] == "gloo"
    assert [s["bytes"] for s in sweep["sizes"]] == [65536, 1048576, 4194304]
    for size in sweep["sizes"]:
        assert size["correct"] and size["busbw_gbps"] == pytest.approx(size["algbw_gbps"] * 2 * (2 - 1) / 2)
    fleet = json.loads((out / "fleet.json").read_text())
    assert [n["node"] for n in fleet["nodes"]] == ["n1", "n2"] and fleet["failing"] == []
    assert {o["node"] for o in fleet["outliers"]} == {"n2"}, (fleet, log)
    page = (out / "fleet.html").read_text()
    assert "n2" in page and "outlier" in page
