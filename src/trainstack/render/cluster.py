"""What `render --cluster` needs of a flavour, whichever engine runs it: the environment on the
nodes (the built venv's interpreter, or the image pinned by the digest its build record holds),
the stack's [cluster] and [bench] tables and its NCCL_SOCKET_IFNAME; and the node check's
command, one for the Slurm prolog and the Kubernetes DaemonSet alike. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from trainstack.stackfile import Stack

IFNAME_VARIABLES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")


@dataclass(frozen=True)
class Placement:
    stack: Stack
    slug: str
    python: str  # the interpreter on a Slurm node whose environment holds trainstack and torch
    image: str  # for Kubernetes: 'repo:tag@sha256:...' where the build recorded a digest, else 'repo:tag'
    pinned: bool  # the image is pinned by digest
    unpinned_why: str = ""
    pyxis: bool = False  # Slurm: the sbatch scripts' steps run in the image through pyxis (srun --container-image)
    squashfs: str | None = None  # with pyxis: the image as a squashfs file on the nodes, in place of the registry

    @property
    def gpus(self) -> int:
        return self.stack.cluster.gpus_per_node

    @property
    def ranks_per_node(self) -> int:
        return max(1, self.gpus)

    @property
    def backend(self) -> str:
        return "nccl" if self.gpus else "gloo"

    @property
    def device(self) -> str:
        return "cuda" if self.gpus else "cpu"

    @property
    def ifname(self) -> str | None:
        return self.stack.env.get("NCCL_SOCKET_IFNAME")

    def network_env(self) -> dict[str, str]:
        """NCCL_SOCKET_IFNAME from the stack's [env], and gloo's twin with the same interface."""
        return {name: self.ifname for name in IFNAME_VARIABLES} if self.ifname else {}


PROLOG_LEVEL = 1  # the quick readiness check before every job
EPILOG_LEVEL = 2  # the deeper one after a failed job
FLEET_LEVEL = 2  # every node's own measurements, for the fleet report


NODE_CHECK = ("-m", "trainstack", "health", "--prolog")  # the interpreter's arguments, before --level


def node_check(python: str, level: int, *options: str) -> list[str]:
    """The node check's command: Slurm's prolog, a job step and the Kubernetes DaemonSet run this."""
    return [python, *NODE_CHECK, "--level", str(level), *options]


def allreduce_worker(p: Placement) -> list[str]:
    """torchrun's module and arguments for the sweep between nodes (the caller adds --out)."""
    sizes = ",".join(str(s) for s in p.stack.cluster.allreduce_sizes)
    return ["-m", "trainstack.health.allreduce_worker", f"--backend={p.backend}", f"--sizes={sizes}"]


def bench_command(p: Placement) -> list[str]:
    """torchrun's module and arguments for the stack's bench (the caller adds --out)."""
    b = p.stack.bench
    return [
        "-m",
        "trainstack",
        "bench",
        "--preset",
        b.preset,
        "--batch",
        str(b.batch),
        "--seq",
        str(b.seq),
        "--steps",
        str(b.steps),
        "--warmup",
        str(b.warmup),
        "--modes",
        b.modes[0],
        "--device",
        p.device,
    ]
