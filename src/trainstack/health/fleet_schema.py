"""What `trainstack health --fleet DIR` reads and writes: the all-reduce sweep across nodes
(written by the all-reduce worker) and the fleet report (schema_version 1)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from trainstack.health.schema import Status

NODE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$"
MAX_NODES = 4096


class SizeRow(BaseModel):
    """One message size, as nccl-tests prints it."""

    model_config = ConfigDict(extra="forbid")

    world_size: int = Field(ge=1, le=1 << 20)
    backend: str = Field(max_length=16)
    bytes: int = Field(ge=0, le=1 << 40)
    median_s: float = Field(ge=0, allow_inf_nan=False)
    algbw_gbps: float = Field(ge=0, allow_inf_nan=False, description="bytes / time")
    busbw_gbps: float = Field(ge=0, allow_inf_nan=False, description="algbw * 2(n-1)/n")
    correct: bool
    iters: int = Field(ge=1)


class PairRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    nodes: list[Annotated[str, Field(pattern=NODE_NAME)]] = Field(min_length=2, max_length=2)
    bytes: int = Field(ge=0, le=1 << 40)
    busbw_gbps: float = Field(ge=0, allow_inf_nan=False)
    slow: bool = Field(description="below 90% of the median of the nodes' best pairs")


class AllreduceSweep(BaseModel):
    """What the all-reduce worker writes with --sizes: all ranks at each size, then node pairs."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["allreduce"]
    schema_version: Literal[1]
    backend: str = Field(max_length=16)
    world_size: int = Field(ge=1, le=1 << 20)
    nodes: list[Annotated[str, Field(pattern=NODE_NAME)]] = Field(max_length=MAX_NODES)
    ranks: list[Annotated[str, Field(pattern=NODE_NAME)]] = Field(max_length=1 << 20, description="the node of each rank")
    sizes: list[SizeRow] = Field(max_length=64)
    pairs: list[PairRow] = Field(max_length=MAX_NODES * 8)


class Outlier(BaseModel):
    model_config = ConfigDict(extra="forbid")

    node: str
    metric: str = Field(description="gemm_tflops, hbm_gbps, h2d_gbps or allreduce_busbw_gbps")
    value: float
    median: float = Field(description="the fleet's median of this metric")
    ratio: float = Field(description="value / median")


class FleetNode(BaseModel):
    model_config = ConfigDict(extra="forbid")

    node: str
    file: str
    status: Status
    exit_code: int
    reason: str
    level: int
    gpu_model: str | None
    gemm_tflops: float | None = Field(description="slowest GPU's bf16 GEMM; the host's on a node without GPU")
    hbm_gbps: float | None = Field(description="slowest GPU's device copy; the host's memory copy without GPU")
    h2d_gbps: float | None = Field(description="slowest GPU's pinned host-to-device copy")
    allreduce_busbw_gbps: float | None = Field(description="best node pair holding this node, else the sweep's largest size")


class FleetReport(BaseModel):
    """What `trainstack health --fleet DIR --json` prints."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    outlier_fraction: float = Field(description="a node this fraction below the fleet's median is an outlier")
    nodes: list[FleetNode]
    medians: dict[str, float]
    outliers: list[Outlier]
    failing: list[str] = Field(description="nodes whose check failed (their reason in nodes)")
    allreduce: AllreduceSweep | None = None
