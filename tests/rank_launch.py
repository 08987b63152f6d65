"""Launch tests/rank_memory_worker.py (or another worker) over CPU ranks (gloo under torchrun, loopback only)
and read what each rank measured: the harness of the per-rank memory tests."""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("rank_memory_worker.py")


SPAN = 16  # bench's modes meet on MASTER_PORT + 1 + their index: the ports after it free too
LOWEST = 20000


def free_port() -> int:
    """A --master-port for torchrun whose next SPAN ports are free as well, below the kernel's
    ephemeral range: a port in that range may be given to any outgoing connection on the
    machine at any moment, and a mode's rank 0 then cannot serve its store while the other
    ranks wait on it."""
    first_ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    top = max(LOWEST + 1000, first_ephemeral) - SPAN - 1
    for _ in range(500):
        base = random.randrange(LOWEST, top)
        if all(_bindable(port) for port in range(base, base + SPAN + 1)):
            return base
    raise AssertionError(f"no {SPAN + 1} free ports in a row between {LOWEST} and {top}")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def launch(out: Path, ranks: int, *args: str, worker: Path = WORKER, env: dict | None = None) -> list[dict]:
    """``ranks`` processes of ``worker`` writing into ``out``; each rank's JSON, rank 0 first."""
    torchrun = shutil.which("torchrun") or pytest.skip("torchrun not on PATH")
    argv = [torchrun, "--nnodes", "1", "--nproc-per-node", str(ranks), "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
            str(worker), str(out), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}, cwd=out)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(ranks)]


def whole_step_plan(batch: int, seq: int, world_size: int):
    """memplan's plan of the step the worker runs: the tiny preset in fp32 without autocast,
    torch's for-loop AdamW, FSDP2 over ``world_size`` ranks (none on one process), no
    allocator overheads (the CPU has none)."""
    from trainstack.memplan import plan_memory
    from trainstack.memplan.costs import Overheads
    from trainstack.memplan.offload import Placement
    from trainstack.nn.presets import preset

    return plan_memory(preset("tiny"), batch=batch, seq=seq, budget_bytes=1 << 33, world_size=world_size, precision="fp32",
                       optimizer="adamw-forloop", placement=Placement(shard="fsdp2" if world_size > 1 else "none"), overheads=Overheads())


def matches_a_schedule(plan, measured: int) -> bool:
    """Whether a rank's measured whole-step peak is memplan's prediction within 3%, or, where a
    reduce-scatter sets the peak, that prediction with the collective still in flight when the
    backward copies the first block's parameters out: one block's unsharded fp32 parameters more
    (gloo on a loaded CPU finishes it late; measured 2,299,084 bytes against 2,114,312 + 184,832)."""
    predicted = plan.breakdown.allocated_peak
    late = predicted + plan.profile.block_param_bytes
    in_flight = plan.breakdown.transient_phase.startswith("reduce-scatter") and abs(measured - late) <= 0.03 * late
    return abs(measured - predicted) <= 0.03 * predicted or in_flight
