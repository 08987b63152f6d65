"""The one-line reason a failing node gives, in the words `sinfo -R` shows, and the Slurm
prolog's verdict: exit 0 passes, 1 makes slurmd drain the node (the convention NHC follows).

The words are short and stable, so that a fleet's reasons can be counted by their text:
``trainstack: gpu3 ECC uncorrected``, ``trainstack: shm small``. The worst check comes first;
more failing checks add ``+N more``.
"""

from __future__ import annotations

from trainstack.health.schema import Check, Status

PREFIX = "trainstack:"
MAX_REASON = 120  # Slurm keeps a drain reason whole; a line a person reads at a glance

WORDS = {
    "gpu.count": "GPU count",
    "driver.version": "driver old",
    "driver.cuda": "driver CUDA old",
    "persistence_mode": "persistence off",
    "ecc.mode": "ECC off",
    "ecc.volatile_uncorrected": "ECC uncorrected",
    "ecc.aggregate_uncorrected": "ECC uncorrected (aggregate)",
    "ecc.volatile_corrected": "ECC corrected",
    "rows.remapped_uncorrectable": "rows remapped",
    "rows.remap_state": "row remap",
    "retired_pages": "pages retired",
    "clocks.events": "clock slowdown",
    "clocks.sm_max": "SM clock low",
    "temperature": "hot",
    "nvlink.links_up": "NVLink down",
    "host.shm_size": "shm small",
    "host.disk_free": "disk full",
    "gemm.bf16": "GEMM slow",
    "gemm.correctness": "GEMM wrong",
    "copy.device": "HBM slow",
    "copy.h2d": "H2D slow",
    "copy.d2h": "D2H slow",
    "allreduce.busbw": "all-reduce slow",
    "gemm.sustained": "sustained GEMM slow",
    "gemm.sustained_drop": "GEMM rate drops",
    "clocks.under_load": "clock slowdown under load",
}

# what fails a prolog: a known failure, and a node whose health could not be established
FAILING = (Status.critical, Status.unknown)


def words(check: Check) -> str:
    subject = "" if check.gpu is None else f"gpu{check.gpu} "
    text = WORDS.get(check.name, check.name)
    return subject + text + (" unknown" if check.status is Status.unknown else "")


def reason_line(checks: list[Check]) -> str:
    """``trainstack: <worst check's words>[ +N more]``; empty when no check fails."""
    failing = sorted((c for c in checks if c.status in FAILING), key=lambda c: -c.status.rank)
    if not failing:
        return ""
    line = f"{PREFIX} {words(failing[0])}"
    if len(failing) > 1:
        line += f" +{len(failing) - 1} more"
    return line[:MAX_REASON]


def prolog_exit(status: Status) -> int:
    """0 passes the node (ok, warn, skip); 1 drains it."""
    return 1 if status in FAILING else 0
