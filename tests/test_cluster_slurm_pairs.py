"""The all-reduce between three real Slurm nodes finds the slow one by its pairs. Debian's
slurmctld, three slurmd and munge, each node in namespaces of its own (tests.slurm_cluster); n3's
link is slowed for real, a token bucket filter (tc tbf) on both ends of its veth pair. The rendered
health.sbatch measures every size over the three nodes, then each pair of nodes on its own: the
two pairs holding n3 are slow, the other is not, and the fleet report names n3 as the outlier of
all-reduce bandwidth. The host is asserted unchanged and no process is left."""

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
from tests.slurm_cluster import Cluster, HostState, cmdline, missing_tools, run_batch, use_prolog, use_script
from tests.stacks import demo_stack
from trainstack.cli import main

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or bool(missing_tools()),
                                reason=f"needs root and Slurm's programs (missing: {', '.join(missing_tools())})")

SLUG = "cpu-debian12-py311-release"
NODES = ["n1", "n2", "n3"]
TAIL = """
[verify]
smoke = []

[env]
NCCL_SOCKET_IFNAME = "eth0"

[cluster]
nodes = 3
gpus_per_node = 0
port = 29512
allreduce_sizes = [65536, 1048576]
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("stack")
    with pytest.MonkeyPatch.context() as mp, serve(Index) as url:
        mp.setenv("UV_CACHE_DIR", str(tmp / "uv-cache"))
        for var in ("UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL", "UV_INDEX"):
            mp.delenv(var, raising=False)
        stack = tmp / "pairs.toml"
        stack.write_text(demo_stack("pairs", url, tail=TAIL))
        assert main(["lock", str(stack)]) == 0
        assert main(["render", str(stack), "--out", str(tmp / "render"), "--cluster", "slurm",
                     "--build-dir", str(tmp / "build"), "--python", sys.executable]) == 0
    return tmp / "render" / SLUG / "slurm"


@pytest.fixture(scope="module")
def cluster(rendered: Path) -> Iterator[Cluster]:
    before = HostState.take()
    base = Path(tempfile.mkdtemp(prefix="ts-pairs-"))  # short: munge's socket path has a limit
    (base / "node-out").mkdir()
    c = Cluster(base, NODES, base / "prolog", base / "epilog")
    use_prolog(c, rendered / "prolog.sh")
    use_script(c.epilog, rendered / "epilog.sh", base / "node-out")
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


def test_the_pairs_of_three_nodes_name_the_node_whose_link_is_slow(cluster: Cluster, rendered: Path) -> None:
    cluster.slow_link("n3")
    out = cluster.base / "fleet"
    state, log = run_batch(cluster, rendered / "health.sbatch", str(out))
    assert state == "COMPLETED" and "trainstack: findings in" in log, (log, cluster.logs())
    sweep = json.loads((out / "allreduce.json").read_text())
    assert sweep["nodes"] == NODES and sweep["world_size"] == 3 and sweep["backend"] == "gloo"
    for size in sweep["sizes"]:
        assert size["correct"] and size["busbw_gbps"] == pytest.approx(size["algbw_gbps"] * 2 * (3 - 1) / 3)
    pairs = {tuple(p["nodes"]): p for p in sweep["pairs"]}
    assert sorted(pairs) == [("n1", "n2"), ("n1", "n3"), ("n2", "n3")]
    assert {k for k, p in pairs.items() if p["slow"]} == {("n1", "n3"), ("n2", "n3")}, sweep["pairs"]
    assert all(p["bytes"] == 1048576 for p in pairs.values())
    fleet = json.loads((out / "fleet.json").read_text())
    assert [n["node"] for n in fleet["nodes"]] == NODES and fleet["failing"] == []
    named = {o["node"] for o in fleet["outliers"] if o["metric"] == "allreduce_busbw_gbps"}
    assert named == {"n3"}, fleet["outliers"]
    assert "finding: n3: allreduce_busbw_gbps" in log and "finding: n1 - n3: all-reduce pair slow" in log, log
