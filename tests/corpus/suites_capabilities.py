"""Corpus case: tests that reach for the machine through capabilities a root suite still holds in a
mount and PID namespace of its own: its clock, raw sockets (every process's traffic), real-time
scheduling, System V IPC shared with the machine, the machine's block devices (a disk, a loop device)
and its kernel log. Each passes only where the sandbox refused it."""

import os
import socket
import stat
import time
from pathlib import Path

import pytest

# CAP_NET_ADMIN, CAP_NET_RAW, CAP_IPC_OWNER, CAP_SYS_PACCT, CAP_SYS_NICE, CAP_SYS_TIME, CAP_SYSLOG,
# CAP_PERFMON, CAP_BPF
MACHINE_WIDE = (12, 13, 15, 20, 23, 25, 34, 38, 39)


def _effective() -> int:
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("CapEff:"))
    return int(line.split()[1], 16)


def test_no_machine_wide_capability_is_held():
    held = [cap for cap in MACHINE_WIDE if _effective() >> cap & 1]
    assert held == []


def test_the_clock_cannot_be_set():
    with pytest.raises(PermissionError):
        time.clock_settime(time.CLOCK_REALTIME, time.clock_gettime(time.CLOCK_REALTIME))  # to what it is


def test_no_raw_socket_opens():
    with pytest.raises(PermissionError):
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW).close()


def test_no_real_time_scheduling():
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except PermissionError:
        return
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    pytest.fail("the suite could take a CPU in real-time scheduling")


def test_system_v_ipc_is_its_own():
    assert os.readlink("/proc/self/ns/ipc") != os.environ["CORPUS_HOST_IPC"]


def test_no_device_but_the_kept_ones_reaches_the_machine():
    """Disks and loop devices (root writes them without any capability), /dev/kmsg, the consoles."""
    null = os.stat("/dev/null").st_rdev
    reached = []
    for folder, _, names in os.walk("/dev"):
        for name in names:
            found = os.lstat(os.path.join(folder, name))
            never = name in ("kmsg", "console", "tty0", "kvm", "watchdog") and stat.S_ISCHR(found.st_mode)
            if stat.S_ISBLK(found.st_mode) or (never and found.st_rdev != null):
                reached.append(os.path.join(folder, name))
    assert reached == []
