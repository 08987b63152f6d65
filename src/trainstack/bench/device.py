"""The edge between the benchmark and the hardware: device choice, memory caps, timers,
the process group under torchrun, and what counts as running out of memory."""

from __future__ import annotations

import os
import platform
import resource
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch

# Attention backends in the order tried: cuDNN's Hopper kernels first, then FlashAttention-2.
_SDPA_ORDER = ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH")


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def dist_from_env() -> Dist:
    """Rank and world size as torchrun sets them; a single process otherwise."""
    env = os.environ
    return Dist(int(env.get("RANK", 0)), int(env.get("WORLD_SIZE", 1)), int(env.get("LOCAL_RANK", 0)))


def pick_device(requested: str, dist: Dist) -> torch.device:
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda":
        torch.cuda.set_device(dist.local_rank)
        return torch.device("cuda", dist.local_rank)
    return torch.device(requested)


# Under torchrun each bench worker is a process torchrun does not know; the workers of one launch
# (one mode, one environment) meet through a store of their own: rank 0's worker serves it on a port
# the kernel gives it and publishes that port in torchrun's store under the launch's key, where the
# other ranks' workers read it. No port is guessed, and a rank whose peers never come gives up.
MEETING = "TRAINSTACK_BENCH_MEETING"  # the launch's key, set by the parent for each worker
MEETING_TIMEOUT = "TRAINSTACK_BENCH_MEETING_TIMEOUT_S"
MEETING_TIMEOUT_S = 300.0


class MeetingError(RuntimeError):
    """The workers of one launch did not meet (rank 0's never published its store)."""


def init_process_group(dist: Dist, device: torch.device) -> None:
    if dist.enabled and not torch.distributed.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        kwargs: dict[str, Any] = {"device_id": device} if device.type == "cuda" else {}
        store = launch_store(dist)
        if store is not None:
            kwargs |= {"store": store, "rank": dist.rank, "world_size": dist.world_size}
        torch.distributed.init_process_group(backend, **kwargs)


def launch_store(dist: Dist) -> torch.distributed.Store | None:
    """This launch's own store, met through torchrun's; None where torchrun's store cannot be
    shared (its workers then meet as the environment says)."""
    env = os.environ
    key = env.get(MEETING)
    if key is None or env.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    seconds = _meeting_seconds(env.get(MEETING_TIMEOUT))
    timeout = timedelta(seconds=seconds)
    host = env["MASTER_ADDR"]
    agents = torch.distributed.TCPStore(host, int(env["MASTER_PORT"]), is_master=False, timeout=timeout)
    name = f"trainstack/bench/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}/{key}"
    if dist.rank == 0:
        own = torch.distributed.TCPStore(host, 0, dist.world_size, is_master=True, timeout=timeout, wait_for_workers=False)
        agents.set(name, str(own.port))
        return own
    try:
        port = int(agents.get(name))  # waits for rank 0's worker, at most the timeout
    except RuntimeError as exc:  # torch's DistStoreError on a timeout
        raise MeetingError(
            f"rank {dist.rank}: rank 0's bench worker did not publish its store within {seconds:.0f} s "
            f"(it failed before meeting, or is slower than {MEETING_TIMEOUT}): {str(exc).splitlines()[0]}"
        ) from exc
    return torch.distributed.TCPStore(host, port, dist.world_size, is_master=False, timeout=timeout)


def _meeting_seconds(given: str | None) -> float:
    """MEETING_TIMEOUT's seconds (MEETING_TIMEOUT_S unset); anything but 1 to 86400 seconds is refused in one line."""
    if given is None:
        return MEETING_TIMEOUT_S
    try:
        seconds = float(given)
    except ValueError:
        seconds = 0.0
    if not 1 <= seconds <= 86400:
        raise MeetingError(f"{MEETING_TIMEOUT}={given[:40]!r}: accepted: seconds from 1 to 86400")
    return seconds


def close_process_group() -> None:
    """Wait for every rank, then tear the group down, so no rank exits mid-collective."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.machine()}, {os.cpu_count()} cores)"


def cap_memory(device: torch.device, cap_bytes: int | None) -> None:
    """Make allocations beyond ``cap_bytes`` fail as a real out-of-memory would."""
    if not cap_bytes:
        return
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, cap_bytes / total), device)
        return
    # CPU: cap the address space at what is mapped now plus the budget
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _mapped_bytes() + cap_bytes
    resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))


def _mapped_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("VmSize missing from /proc/self/status")


def memory_budget(device: torch.device, cap_bytes: int | None) -> int:
    """Bytes a mode may plan for: the cap if given, else what PyTorch can have of the
    device's memory: its free bytes and what PyTorch holds already (the CUDA context and
    libraries outside the allocator are not for the plan)."""
    if cap_bytes:
        return cap_bytes
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return free + torch.cuda.memory_reserved(device)
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def is_oom(exc: BaseException) -> bool:
    """CUDA's OutOfMemoryError, the CPU allocator's failure, also when torch.compile wraps them."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(exc).lower()
    return "out of memory" in text or "can't allocate memory" in text


def sdpa_context(device: torch.device, order: tuple[str, ...] = _SDPA_ORDER) -> AbstractContextManager:
    """Attention backends tried in ``order`` (SDPBackend names) inside the context, on a GPU."""
    if device.type != "cuda":
        return nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([getattr(SDPBackend, name) for name in order], set_priority=True)


def fastest_sdpa_order(
    device: torch.device, *, batch: int, seq: int, n_heads: int, n_kv_heads: int, head_dim: int, reps: int = 5
) -> tuple[tuple[str, ...], dict[str, float]]:
    """The fused attention backends ordered by measured time, with the milliseconds of each.

    Which kernel is fastest depends on the GPU, the head size and the library versions, so
    each backend that accepts the model's shapes (causal, GQA, bf16, q/k/v laid out as the
    model's projections leave them) runs forward and backward ``reps`` times. On a CPU:
    the default order, no times.
    """
    if device.type != "cuda":
        return _SDPA_ORDER, {}
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    def qkv(heads: int) -> torch.Tensor:  # (B, H, T, hd) viewed from (B, T, H, hd)
        return torch.randn(batch, seq, heads, head_dim, device=device, dtype=torch.bfloat16).transpose(1, 2).requires_grad_()

    inputs = [
        qkv(n_heads),
        qkv(n_kv_heads),
        qkv(n_kv_heads),
        torch.randn(batch, n_heads, seq, head_dim, device=device, dtype=torch.bfloat16),
    ]

    def step() -> None:
        q, k, v, grad = inputs
        out = scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=n_heads != n_kv_heads)
        out.backward(grad)

    times: dict[str, float] = {}
    for name in _SDPA_ORDER[:-1]:  # MATH materialises the scores: never the fastest
        try:
            with sdpa_kernel([getattr(SDPBackend, name)]):
                step()
                timer = StepTimer(device)
                timer.mark()
                for _ in range(reps):
                    step()
                    timer.mark()
                times[name] = sorted(timer.step_seconds())[reps // 2] * 1e3
        except RuntimeError:  # this backend does not take these shapes
            continue
    inputs.clear()  # the GPU's memory back before anything else runs
    order = tuple(sorted(times, key=times.__getitem__)) + tuple(n for n in _SDPA_ORDER if n not in times)
    return order, times


def sdpa_backend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gqa: bool) -> str:
    """Which fused attention kernel PyTorch picks for these shapes in the current context."""
    from torch.nn.attention import SDPBackend

    index = torch._fused_sdp_choice(q, k, v, is_causal=True, enable_gqa=gqa)
    names = {member.value: name.lower() for name, member in SDPBackend.__members__.items()}
    return names.get(int(index), str(index))


class StepTimer:
    """Per-step times without host syncs: CUDA events on a GPU, the wall clock on a CPU
    (where every op already runs to completion before the next)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.marks: list = []

    def mark(self) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def step_seconds(self) -> list[float]:
        """Seconds between consecutive marks; syncs once, at the end of the timed window."""
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) / 1000 for a, b in zip(self.marks, self.marks[1:])]
        return [b - a for a, b in zip(self.marks, self.marks[1:])]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device: torch.device) -> tuple[int | None, int | None]:
    """(max allocated, max reserved) bytes by PyTorch's allocator; (None, None) on a CPU."""
    if device.type != "cuda":
        return None, None
    return torch.cuda.max_memory_allocated(device), torch.cuda.max_memory_reserved(device)
