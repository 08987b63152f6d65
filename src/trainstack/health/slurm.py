"""The edge between a health check and Slurm: this node's name, and the optional drain with a
reason of trainstack's own through `scontrol`, as NHC does.

By default a prolog calls no Slurm command (Slurm's advice: a prolog that calls back into
slurmctld can stall scheduling); a failed prolog exits 1 and slurmd drains the node with its
fixed reason ("Prolog error"). ``--drain`` sets trainstack's reason instead.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess

from trainstack import proc
from trainstack.errors import UsageError

NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


def node_name(*, strict: bool = True) -> str | None:
    """Slurm's name for this node (SLURMD_NODENAME, set in a prolog and in a job step), else
    the hostname. One that is not a host name is refused where it names a file or a drain
    (``strict``), else left out of the report (None)."""
    name = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    if NODE_NAME.match(name):
        return name
    if strict:
        raise UsageError(f"node name {name[:60]!r}: not a host name (accepted: letters, digits, '.', '_', '-')")
    return None


def drain(node: str, reason: str, *, timeout: float = 30) -> str:
    """Drain ``node`` with ``reason`` through scontrol; '' when done, else why not (one line)."""
    argv = ["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"]
    try:
        result = proc.run(argv, echo=False, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"scontrol did not answer in {timeout:g} s"
    if result.ok:
        return ""
    return f"scontrol exited {result.returncode}: {(result.stderr or result.stdout).strip()[:200]}"
