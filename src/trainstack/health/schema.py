"""The result model of `trainstack health`: one Check per measured fact, one report per node.

How statuses combine (worst wins), from best to worst:

    skip < ok < warn < unknown < critical

``skip`` is a check that does not apply to this node (a GPU check on a node without a GPU in
``--prolog`` mode): it passes, and says so, rather than reading as ``ok``.

``unknown`` ranks above ``warn``: a node whose health could not be established is
not known to be fit for a job, which is worse than a known, tolerable defect. It
ranks below ``critical``: a known failure is the stronger statement. The exit code
follows the Nagios convention (0 ok, 1 warn, 2 critical, 3 unknown) for the
combined status.
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field


class Status(str, Enum):
    skip = "skip"
    ok = "ok"
    warn = "warn"
    critical = "critical"
    unknown = "unknown"

    @property
    def exit_code(self) -> int:
        return _EXIT[self]

    @property
    def rank(self) -> int:
        return _RANK[self]


_EXIT = {Status.skip: 0, Status.ok: 0, Status.warn: 1, Status.critical: 2, Status.unknown: 3}
_RANK = {Status.skip: -1, Status.ok: 0, Status.warn: 1, Status.unknown: 2, Status.critical: 3}


def worst(statuses: list[Status]) -> Status:
    """The combined status: the worst of ``statuses`` by the order in the module docstring."""
    return max(statuses, key=lambda s: s.rank, default=Status.ok)


class Check(BaseModel):
    """One verdict: what was measured, against which threshold, in which unit."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="check identifier, e.g. 'ecc.volatile_uncorrected'")
    level: int = Field(ge=1, le=3)
    status: Status
    gpu: int | None = Field(default=None, description="GPU index; null for node-wide checks")
    value: int | float | str | None = Field(default=None, description="measured value; null when not measured")
    threshold: str | None = Field(default=None, description="the limit applied, e.g. '< 700 warn, < 550 critical'")
    unit: str = ""
    message: str = ""


class HealthReport(BaseModel):
    """What `trainstack health --json` prints."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = Field(default=2, ge=1, le=2, description="1: before node, reason and mode")
    level: int = Field(ge=1, le=3)
    status: Status
    exit_code: int = Field(ge=0, le=3, description="check mode: 0 ok, 1 warn, 2 critical, 3 unknown; prolog mode: 0 passes, 1 drains")
    gpu_model: str | None = Field(default=None, description="NVML name of GPU 0")
    thresholds_profile: str = Field(description="which thresholds section applied")
    seconds: float = Field(description="wall time of all checks")
    checks: list[Check]
    node: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$", description="the node's name (Slurm's, else the hostname)"
    )
    mode: str = Field(
        default="check", pattern="^(check|prolog)$", description="prolog: Slurm's convention, exit 0 passes and 1 drains the node"
    )
    reason: str = Field(
        default="",
        max_length=200,
        description="one line naming the worst failing checks, as `sinfo -R` shows it; empty when the node passes",
    )

    @classmethod
    def build(
        cls,
        *,
        level: int,
        checks: list[Check],
        gpu_model: str | None,
        profile: str,
        seconds: float,
        node: str | None = None,
        mode: str = "check",
        reason: str = "",
        exit_code: int | None = None,
    ) -> HealthReport:
        status = worst([c.status for c in checks])
        return cls(
            node=node,
            mode=mode,
            reason=reason,
            level=level,
            status=status,
            exit_code=exit_code if exit_code is not None else status.exit_code,
            gpu_model=gpu_model,
            thresholds_profile=profile,
            seconds=round(seconds, 3),
            checks=checks,
        )
