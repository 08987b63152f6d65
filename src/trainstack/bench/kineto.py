"""The lines torch's profiler (kineto, in C++) writes to the process's stderr by itself, kept out
of bench's output.

kineto writes beside Python, to file descriptor 2: torch 2.13 a line as each profile starts and
stops (``USDT:<date> <time> <pid>:<tid> SyncActivityProfilerHandler.cpp:52] profiler_start``),
whatever ``KINETO_LOG_LEVEL`` allows short of silencing its errors too; and a CUDA build of torch
on a machine without a usable GPU, once per process whatever activities were asked (kineto reads
the devices' properties for the trace it keeps), ``ERROR:<date> <time> <pid>:<tid>
DeviceProperties.cpp:48] gpuGetDeviceCount failed with code 35`` (CUDA's "insufficient
driver"). Everything else written meanwhile, kineto's other errors included, is passed on.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

_PREFIX = r"\S+ \S+ \d+:\d+ \S+\.cpp:\d+\] "  # <date> <time> <pid>:<tid> <source>.cpp:<line>]
MARKS = re.compile(rf"^USDT:{_PREFIX}profiler_(start|stop)$")
NO_GPU = re.compile(rf"^ERROR:{_PREFIX}gpuGetDeviceCount failed with code \d+$")


def without_kineto_noise(text: str, *, gpu: bool) -> str:
    """``text`` less kineto's start and stop marks and, where ``gpu`` is False (no usable GPU
    here), its failed device count; every other line as it was."""
    lines = text.splitlines(keepends=True)
    return "".join(line for line in lines if not _noise(line.rstrip("\r\n"), gpu))


def _noise(line: str, gpu: bool) -> bool:
    return bool(MARKS.match(line)) or (not gpu and bool(NO_GPU.match(line)))


@contextmanager
def kineto_noise_dropped(*, gpu: bool) -> Iterator[None]:
    """What the process writes to stderr while the block runs is held in a temporary file and
    passed on when it ends (an error's included), less kineto's noise (``without_kineto_noise``)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = without_kineto_noise(held.read().decode("utf-8", "replace"), gpu=gpu).encode()
            while kept:
                kept = kept[os.write(2, kept) :]
