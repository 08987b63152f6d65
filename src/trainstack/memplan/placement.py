"""Where each kind of a training step's state lives: whole on every GPU, sharded over the
ranks, or in the host's memory. Pure data and arithmetic.

Four kinds: the parameters as the step computes with them (``params``), their gradients
(``grads``), the fp32 master weights an optimizer keeps beside bf16 parameters (``master``)
and the optimizer's own state (``optimizer``: AdamW's two moments). A sharding says which
kinds are split over the ranks, as the frameworks do:

- ``none``: one process, or data parallel: every kind whole on each GPU;
- ``fsdp2`` and ``zero3``: all four sharded (FSDP2's ``fully_shard``, DeepSpeed ZeRO stage 3);
- ``zero1``: master weights and optimizer state sharded, parameters and gradients whole;
- ``zero2``: gradients sharded too.

Offload moves kinds into the host's memory, each rank keeping there what it would have kept
on its GPU (its shard). Master weights and optimizer state on the host mean the optimizer's
step runs on the CPU: gradients go down to it and updated parameters come back, in chunks,
so the host never holds a second full copy of either.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from trainstack.errors import UsageError

KINDS = ("params", "grads", "master", "optimizer")
SHARDS = ("none", "fsdp2", "zero1", "zero2", "zero3")
SHARDED_KINDS = {
    "none": frozenset(),
    "fsdp2": frozenset(KINDS),
    "zero1": frozenset({"master", "optimizer"}),
    "zero2": frozenset({"grads", "master", "optimizer"}),
    "zero3": frozenset(KINDS),
}
# what an offloaded kind needs on the host with it: the CPU step reads master weights and
# optimizer state together; parameters on the host are updated there, by that step
OFFLOAD_NEEDS = {
    "optimizer": frozenset(),
    "master": frozenset({"optimizer"}),
    "params": frozenset({"master", "optimizer"}),
    "grads": frozenset({"master", "optimizer"}),
}
# the ladder the planner climbs when the GPU's budget needs it: the least moved first
OFFLOAD_LADDER: tuple[frozenset[str], ...] = (
    frozenset(),
    frozenset({"optimizer"}),
    frozenset({"optimizer", "master"}),
    frozenset({"optimizer", "master", "params"}),
)
# the shardings whose offloaded gradients the host keeps in fp32 (DeepSpeed's ZeRO-Offload
# copies each gradient partition into an fp32 buffer beside the fp32 master weights it steps)
FP32_HOST_GRADS = frozenset({"zero1", "zero2", "zero3"})
# the shardings whose optimizer steps an fp32 copy of each partition whatever the parameters'
# dtype (DeepSpeed ZeRO: fp32 master weights also in fp32 training)
FP32_MASTER_SHARDS = frozenset({"zero1", "zero2", "zero3"})
# gradients streamed to the host's optimizer in chunks of about this many fp32 bytes, two in flight
CHUNK_BYTES = 256 << 20


class Where(str, Enum):
    GPU = "gpu"  # whole on each GPU
    SHARDED = "sharded"  # 1/world_size on each GPU
    HOST = "host"  # each rank's part in pinned host memory

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Layout:
    """A sharding over ``world_size`` ranks and the kinds moved to the host."""

    shard: str = "none"
    world_size: int = 1
    offload: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if self.shard not in SHARDS:
            raise UsageError(f"--shard: '{self.shard}' is not a sharding; accepted: {', '.join(SHARDS)}")
        if self.world_size < 1:
            raise UsageError(f"--world-size: {self.world_size} must be at least 1")
        for kind in self.offload:
            if kind not in KINDS:
                raise UsageError(f"--offload: '{kind}' is not a kind of state; accepted: {', '.join(KINDS)} (commas)")
            missing = OFFLOAD_NEEDS[kind] - self.offload
            if missing:
                raise UsageError(
                    f"--offload: {kind} on the host needs {', '.join(sorted(missing))} there too (the step that updates it runs on the CPU)"
                )

    def where(self, kind: str) -> Where:
        if kind in self.offload:
            return Where.HOST
        if self.world_size > 1 and kind in SHARDED_KINDS[self.shard]:
            return Where.SHARDED
        return Where.GPU

    def gpu_bytes(self, kind: str, total: int) -> int:
        """Of ``total`` bytes of ``kind``, what one rank keeps on its GPU throughout."""
        where = self.where(kind)
        return 0 if where is Where.HOST else total if where is Where.GPU else shard(total, self.world_size)

    def host_bytes(self, kind: str, total: int) -> int:
        """Of ``total`` bytes of ``kind``, what one rank keeps in host memory."""
        if kind not in self.offload:
            return 0
        return shard(total, self.world_size) if kind in SHARDED_KINDS[self.shard] else total

    @property
    def cpu_step(self) -> bool:
        """The optimizer's step runs on the CPU (master weights and state on the host)."""
        return {"master", "optimizer"} <= self.offload

    @property
    def gathers_params(self) -> bool:
        """Blocks' parameters are gathered (or copied up) before they compute."""
        return self.where("params") is not Where.GPU

    def name(self) -> str:
        text = self.shard if self.world_size > 1 or self.shard != "none" else "one process"
        if self.world_size > 1:
            text += f" over {self.world_size} ranks"
        if self.offload:
            text += ", on the host: " + ", ".join(k for k in KINDS if k in self.offload)
        return text

    def to_json(self) -> dict:
        return {
            "shard": self.shard,
            "world_size": self.world_size,
            "offload": [k for k in KINDS if k in self.offload],
            "where": {k: str(self.where(k)) for k in KINDS},
        }


def shard(nbytes: int, world_size: int) -> int:
    return -(-nbytes // world_size)


def parse_offload(text: str | None) -> frozenset[str]:
    """``--offload``: kinds joined by commas ('optimizer,master'), 'none' or empty for none."""
    if not text or text.strip().lower() == "none":
        return frozenset()
    return frozenset(k.strip().lower() for k in text.split(",") if k.strip())


def layout_for(shard_kind: str | None, world_size: int, offload: frozenset[str] = frozenset()) -> Layout:
    """The layout memplan plans when no sharding is named: FSDP2 over several ranks, none on one."""
    if shard_kind is None:
        shard_kind = "fsdp2" if world_size > 1 else "none"
    return Layout(shard_kind, world_size, frozenset(offload))
