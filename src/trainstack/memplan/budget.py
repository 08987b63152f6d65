"""Budgets as the user writes them: bytes with a unit ("60GiB", "80GB") or a fraction of the GPU ("0.8")."""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal

from trainstack.errors import UsageError

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_BUDGET = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")
MOST = 2**60  # 1 EiB: no memory a budget could be of is larger
GPU_MEMORY = "the GPU's memory"
HOST_MEMORY = "this host's memory"
ACCEPTED = "bytes with a unit such as '60GiB' or '80GB', or a fraction of {of} such as '0.8'"


def parse_budget(text: str, gpu_bytes: Callable[[], int | None], flag: str = "--budget", of: str = GPU_MEMORY) -> int:
    """Bytes for ``text``; a fraction in (0, 1] is taken of ``gpu_bytes()``. ``flag`` names
    the option (or variable) in errors, ``of`` what a fraction is of."""
    m = _BUDGET.match(text)
    if not m or m.group(2).lower() not in _UNITS:
        raise UsageError(f"{flag}: '{text}' is not a budget; accepted: {ACCEPTED.format(of=of)}")
    value, unit = Decimal(m.group(1)), m.group(2).lower()  # exact: a thousand digits stay a number
    if unit == "" and value > 1:
        raise UsageError(
            f"{flag}: '{text}' has no unit; write bytes with a unit such as '{m.group(1)}GiB' or '{m.group(1)}GB', or a fraction of {of} such as '0.8'"
        )
    if unit == "" and value <= 1:
        if value <= 0:
            raise UsageError(f"{flag}: fraction '{text}' must be above 0")
        total = gpu_bytes()
        if total is None:
            missing = "no GPU was found" if of == GPU_MEMORY else f"{of} could not be read"
            raise UsageError(f"{flag}: '{text}' is a fraction of {of}, but {missing}; give bytes such as '60GiB'")
        nbytes = int(total * value)
    else:
        nbytes = int(value * _UNITS[unit])
    if nbytes <= 0:
        raise UsageError(f"{flag}: '{text}' must be more than 0 bytes")
    if nbytes > MOST:
        raise UsageError(f"{flag}: '{text}' is more than 1 EiB; write the memory to fit in, such as '60GiB'")
    return nbytes


def device_memory_bytes() -> int | None:
    """What a fraction budget is of: GPU 0's memory, or on a machine without a GPU, where
    training runs on the host, the host's memory."""
    return gpu_memory_bytes() or host_memory_bytes()


def host_memory_bytes() -> int | None:
    import os

    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


def gpu_memory_bytes() -> int | None:
    """Total memory of GPU 0 through NVML, or None where there is no NVIDIA GPU."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).total)
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()
