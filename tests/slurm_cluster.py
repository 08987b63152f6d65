"""A real Slurm cluster for the tests: Debian's slurmctld, a slurmd a node and munge, each node in a
network, UTS and mount namespace of its own (its own hostname and private address), joined by
veth pairs to a bridge that lives inside the controller's namespace. The host gets no interface,
address, route, mount or name: `HostState` is taken before and compared after.

Safety: every namespace is made by one `unshare` process whose own command sets the hostname,
so nothing meant for a node can run on the host; a command is entered into a namespace (nsenter)
only after its network and UTS namespaces are seen to differ from the host's and its hostname
reads the node's name.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SUBNET = "10.231.77"  # private; exists only inside the namespaces made here
TOOLS = ("slurmctld", "slurmd", "sbatch", "sinfo", "scontrol", "munged", "unshare", "nsenter", "ip", "tc")


def slurm_version() -> tuple[int, int]:
    """slurmd's release as (year, month): 'slurm 24.11.5' or 'slurm-wlm 22.05.8'."""
    said = subprocess.run(["slurmd", "-V"], capture_output=True, text=True, check=True).stdout.split()[-1]
    year, month = said.split(".")[:2]
    return int(year), int(month)


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


@dataclass(frozen=True)
class HostState:
    """What the cluster must leave as it found it."""

    hostname: str
    hosts: bytes
    mounts: tuple[str, ...]
    links: str
    addresses: str
    routes: str

    @classmethod
    def take(cls) -> HostState:
        def ip(*args: str) -> str:
            return subprocess.run(["ip", "-o", *args], capture_output=True, text=True, check=True).stdout

        temp = tempfile.gettempdir()
        mounts = []
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4]
            if not point.startswith(temp):  # other tests mount their own tmpfs under the temp dir
                mounts.append(" ".join(line.split()[3:]))
        return cls(socket.gethostname(), Path("/etc/hosts").read_bytes(), tuple(sorted(mounts)),
                   # statistics and link state flags move by themselves; names, kinds and addresses do not
                   "\n".join(sorted(ln.split(":")[1].strip() for ln in ip("link").splitlines())),
                   ip("addr"), ip("route"))


@dataclass
class Node:
    """One namespace: its name, its address, the unshare process that holds it."""

    name: str
    address: str
    holder: subprocess.Popen
    daemons: list[subprocess.Popen] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.holder.pid

    def isolated(self) -> bool:
        if self.holder.poll() is not None:
            return False
        try:
            own = [os.readlink(f"/proc/{self.pid}/ns/{kind}") for kind in ("net", "uts", "mnt")]
        except OSError:
            return False
        host = [os.readlink(f"/proc/self/ns/{kind}") for kind in ("net", "uts", "mnt")]
        return all(a != b for a, b in zip(own, host))

    def argv(self, command: Sequence[str]) -> list[str]:
        if not self.isolated():
            raise RuntimeError(f"namespace of {self.name} is not isolated from the host: refusing to enter it")
        return ["nsenter", "-t", str(self.pid), "-n", "-u", "-m", "-r", "-w", "--", *command]

    def run(self, command: Sequence[str], *, env: dict[str, str] | None = None, timeout: float = 60,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(self.argv(command), capture_output=True, text=True, env=env, timeout=timeout)
        if check and done.returncode:
            raise RuntimeError(f"{self.name}: {' '.join(command)} exited {done.returncode}: {done.stderr.strip()}")
        return done

    def start(self, command: Sequence[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
        with log.open("ab") as sink:
            daemon = subprocess.Popen(self.argv(command), stdout=sink, stderr=subprocess.STDOUT, env=env,
                                      start_new_session=True)
        self.daemons.append(daemon)
        return daemon


def _namespace(name: str, address: str, hosts: Path) -> Node:
    """A new namespace whose own first command names it and mounts its /etc/hosts privately."""
    script = f"hostname {name} && mount --bind {hosts} /etc/hosts && exec sleep 86400"
    holder = subprocess.Popen(["unshare", "--net", "--uts", "--mount", "--propagation", "private", "--fork",
                               "--kill-child", "sh", "-c", script], start_new_session=True)
    node = Node(name, address, holder)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if node.isolated() and subprocess.run(node.argv(["hostname"]), capture_output=True,
                                              text=True).stdout.strip() == name:
            return node
        if holder.poll() is not None:
            break
        time.sleep(0.05)
    _stop(holder)
    raise RuntimeError(f"namespace {name} did not come up")


def _stop(process: subprocess.Popen, grace: float = 5) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(grace)


SLURM_CONF = """\
ClusterName=trainstack
SlurmctldHost=ctl({subnet}.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={base}/munge.sock
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
StateSaveLocation={base}/state
SlurmdSpoolDir={base}/spool/%n
SlurmctldPidFile={base}/slurmctld.pid
SlurmdPidFile={base}/slurmd-%n.pid
SlurmctldLogFile={base}/slurmctld.log
SlurmdLogFile={base}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=20
InactiveLimit=0
KillWait=5
Prolog={prolog}
PrologFlags=Alloc
Epilog={epilog}
{nodes}
PartitionName=main Nodes={names} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""


class Cluster:
    """slurmctld in namespace ``ctl``, one slurmd per node namespace, one munged for all."""

    def __init__(self, base: Path, nodes: Sequence[str], prolog: Path, epilog: Path, *, cpus: int = 2) -> None:
        self.base = base
        self.node_names = list(nodes)
        self.prolog = prolog
        self.epilog = epilog
        self.cpus = cpus
        self.conf = base / "slurm.conf"
        self.ctl: Node | None = None
        self.nodes: dict[str, Node] = {}
        self.munged: subprocess.Popen | None = None
        self.cgroup: Path | None = None
        self.capped: int | None = None

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self) -> None:
        for sub in ("state", "spool", "spool/ctl", *(f"spool/{n}" for n in self.node_names), "jobs"):
            (self.base / sub).mkdir()
        self._munge()
        hosts = self.base / "hosts"
        lines = ["127.0.0.1 localhost", f"{SUBNET}.1 ctl"]
        lines += [f"{SUBNET}.{11 + i} {n}" for i, n in enumerate(self.node_names)]
        hosts.write_text("\n".join(lines) + "\n")
        self.ctl = _namespace("ctl", f"{SUBNET}.1", hosts)
        for i, name in enumerate(self.node_names):
            self.nodes[name] = _namespace(name, f"{SUBNET}.{11 + i}", hosts)
        self._wire()
        node_lines = "\n".join(f"NodeName={n.name} NodeAddr={n.address} CPUs={self.cpus} State=UNKNOWN"
                               for n in self.nodes.values())
        if slurm_version() >= (24, 5):
            # Slurm 24.05 and newer set cgroups up in every slurmd, and refuse a host with cgroup v1
            # and v2 both mounted; nothing here needs them (proctrack/linuxproc, task/none)
            (self.base / "cgroup.conf").write_text("CgroupPlugin=disabled\n")
        self.conf.write_text(SLURM_CONF.format(subnet=SUBNET, base=self.base, prolog=self.prolog, epilog=self.epilog, nodes=node_lines,
                                               names=",".join(self.node_names)))
        self.ctl.start(["slurmctld", "-D", "-i", "-f", str(self.conf)], self.base / "slurmctld.out", self.env)
        for node in self.nodes.values():
            node.start(["slurmd", "-D", "-N", node.name, "-f", str(self.conf)],
                       self.base / f"slurmd-{node.name}.out", self.env)
        self.wait_idle(self.node_names)

    def _munge(self) -> None:
        key = self.base / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.munged = subprocess.Popen(
            ["munged", "--foreground", "--force", f"--socket={self.base}/munge.sock", f"--key-file={key}",
             f"--pid-file={self.base}/munged.pid", f"--log-file={self.base}/munged.log",
             f"--seed-file={self.base}/munged.seed"],
            stdout=subprocess.DEVNULL, stderr=(self.base / "munged.err").open("wb"), start_new_session=True)
        deadline = time.monotonic() + 10
        while not (self.base / "munge.sock").exists():
            if self.munged.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"munged did not start: {(self.base / 'munged.err').read_text()}")
            time.sleep(0.05)

    def _wire(self) -> None:
        """A bridge inside ctl's namespace; a veth pair per node, its far end moved into the node."""
        assert self.ctl is not None
        ctl = self.ctl
        ctl.run(["ip", "link", "set", "lo", "up"])
        ctl.run(["ip", "link", "add", "br0", "type", "bridge"])
        ctl.run(["ip", "addr", "add", f"{ctl.address}/24", "dev", "br0"])
        ctl.run(["ip", "link", "set", "br0", "up"])
        for i, node in enumerate(self.nodes.values()):
            port = f"port{i}"
            ctl.run(["ip", "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", str(node.pid)])
            ctl.run(["ip", "link", "set", port, "master", "br0"])
            ctl.run(["ip", "link", "set", port, "up"])
            node.run(["ip", "link", "set", "lo", "up"])
            node.run(["ip", "addr", "add", f"{node.address}/24", "dev", "eth0"])
            node.run(["ip", "link", "set", "eth0", "up"])

    def slow_link(self, name: str, rate: str = "200mbit") -> None:
        """Slow ``name``'s link down for real: a token bucket filter (tc tbf) of ``rate`` on both ends
        of its veth pair, the node's eth0 (what it sends) and its port on the bridge (what it receives).
        Both live in the namespaces made here and go with them."""
        assert self.ctl is not None
        port = f"port{self.node_names.index(name)}"
        shape = ["root", "tbf", "rate", rate, "burst", "64kb", "latency", "200ms"]
        self.nodes[name].run(["tc", "qdisc", "add", "dev", "eth0", *shape])
        self.ctl.run(["tc", "qdisc", "add", "dev", port, *shape])

    def cap_cpu(self, name: str, percent: int = 10) -> None:
        """Slow ``name`` down on purpose: its slurmd (and every job step it starts from now on)
        under a CFS quota of ``percent`` of one CPU, in a cpu cgroup of this test's own. (Under
        gVisor 10% runs a loop about 3 times slower, 20% only 1.6 times: too close to the noise
        of two nodes sharing two cores.)"""
        slurmd = self.nodes[name].daemons[0]
        group = Path("/sys/fs/cgroup/cpu") / f"trainstack-test-{os.getpid()}-{name}"
        try:
            group.mkdir()
            (group / "cpu.cfs_period_us").write_text("100000")
            (group / "cpu.cfs_quota_us").write_text(str(1000 * percent))
            (group / "cgroup.procs").write_text(str(slurmd.pid))
        except OSError as exc:
            pytest.skip(f"cannot cap a node's CPU with a cgroup here: {exc}")
        self.cgroup = group
        self.capped = slurmd.pid

    def uncap_cpu(self) -> None:
        """Every process of the capped group back to the root cpu group, the group removed."""
        if self.cgroup is None:
            return
        root = self.cgroup.parent / "cgroup.procs"
        for _ in range(50):
            for pid in (self.cgroup / "cgroup.procs").read_text().split():
                try:
                    root.write_text(pid)
                except OSError:
                    pass  # gone meanwhile
            try:
                self.cgroup.rmdir()
                self.cgroup = None
                return
            except OSError:
                time.sleep(0.1)

    def wait_idle(self, names: Sequence[str], timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = self.states()
            if all(states.get(n) == "idle" for n in names):
                return
            time.sleep(0.2)
        raise RuntimeError(f"nodes not idle after {timeout} s: {self.states()}; {self.logs()}")

    def client(self, command: Sequence[str], *, timeout: float = 60, check: bool = True,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """A Slurm client command, run on ctl (the submit host)."""
        assert self.ctl is not None
        return self.ctl.run(command, env={**self.env, **(env or {})}, timeout=timeout, check=check)

    def states(self) -> dict[str, str]:
        done = self.client(["sinfo", "-h", "-N", "-o", "%N %t"], check=False)
        return dict(line.split() for line in done.stdout.splitlines() if len(line.split()) == 2)

    def reasons(self) -> dict[str, str]:
        done = self.client(["sinfo", "-h", "-R", "-o", "%n|%E"], check=False)
        return dict(line.split("|", 1) for line in done.stdout.splitlines() if "|" in line)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(self.base.glob("*.log")))

    def stop(self) -> None:
        namespaces = {n.holder.pid: _net_ns(n.holder.pid) for n in [*self.nodes.values(), *([self.ctl] if self.ctl else [])]}
        for node in [*self.nodes.values(), *([self.ctl] if self.ctl else [])]:
            for daemon in node.daemons:
                _stop(daemon)
        for node in [*self.nodes.values(), *([self.ctl] if self.ctl else [])]:
            _stop(node.holder)
        _sweep({ns for ns in namespaces.values() if ns})
        if self.munged is not None:
            _stop(self.munged)
        self.uncap_cpu()

def _net_ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def _sweep(namespaces: set[str]) -> None:
    """Kill what is left in the namespaces made here (slurmstepd and job steps leave slurmd's session)."""
    host = _net_ns(os.getpid())
    namespaces.discard(host)  # never the host's
    for _ in range(3):
        left = [int(p) for p in os.listdir("/proc") if p.isdigit() and _net_ns(int(p)) in namespaces]
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)


def cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def use_prolog(c: Cluster, script: Path) -> None:
    """slurm.conf's Prolog: the rendered script, its node JSON kept in node-out (slurmd reads the file each job)."""
    use_script(c.prolog, script, c.base / "node-out")


def use_script(place: Path, script: Path, node_out: Path) -> None:
    """``place`` (named in slurm.conf) runs the rendered ``script`` with TRAINSTACK_NODE_OUT set."""
    shim = f"#!/bin/sh\nTRAINSTACK_NODE_OUT={node_out}\nexport TRAINSTACK_NODE_OUT\nexec /bin/sh {script}\n"
    tmp = place.with_suffix(".new")
    tmp.write_text(shim)
    tmp.chmod(0o755)
    tmp.replace(place)


def wait_for(what: str, predicate, timeout: float = 60):  # noqa: ANN001, ANN201 - a test helper
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def job_state(c: Cluster, job: str) -> str:
    done = c.client(["scontrol", "show", "job", job, "-o"], check=False)
    fields = dict(f.split("=", 1) for f in done.stdout.split() if "=" in f)
    return fields.get("JobState", "")


def run_batch(c: Cluster, script: Path, *args: str, timeout: float = 150) -> tuple[str, str]:
    """(the job's end state, its output) of ``sbatch script args``."""
    job = c.client(["sbatch", "--parsable", f"--chdir={c.base}", script, *args]).stdout.strip().split(";")[0]
    state = wait_for(f"job {job}", lambda: (s := job_state(c, job)) in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT",
                                                                         "NODE_FAIL") and s, timeout)
    return state, "\n".join(p.read_text(errors="replace")[-4000:] for p in c.base.glob(f"*-{job}.out"))
