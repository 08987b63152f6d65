"""AdamW with its fp32 state in host memory: memplan's offload rungs for one process, run.

The model trains bf16 parameters on the device and its bf16 gradients accumulate there over
the micro-batches, as in a ``bf16`` mode (bench.precision). Where memplan moves the
optimizer state to the host (``{"optimizer"}``), the fp32 master weights stay on the device
and each chunk's two moments go up, are updated there and come back down. Where it moves the
master weights too (``{"optimizer", "master"}``) the step runs on the CPU, chunk by chunk,
in three stages that overlap: the bf16 gradient goes down to a pinned buffer (a copy stream),
the CPU updates the chunk's master weight and moments, the rounded bf16 weight comes up (a
second copy stream). On the last micro-batch the stages start as soon as a block's gradients
are final (post-accumulate-grad hooks), so the CPU steps the last blocks while the device
still computes the backward of the first. Nothing is held twice: the staging buffers hold
two chunks each (memplan.placement.CHUNK_BYTES, as memplan costs them).

On the CPU device (no GPU: the tests, bench on a CPU) the same buffers are made and the same
copies run, the device's memory being the host's: the bytes a step holds there are those it
holds on a GPU, which memplan's prediction is checked against.

The update is torch's fused AdamW (``fused``: one pass over each chunk's state, the CPU's
vector units and threads) or bench.precision's (``reference``: the arithmetic a ``bf16``
mode runs, so the two give the same losses).
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import torch
from torch import nn

from trainstack.bench.precision import adamw_update
from trainstack.memplan.placement import CHUNK_BYTES

CHUNK_ELEMENTS = CHUNK_BYTES // 4  # fp32 elements of one chunk of master weights
HOST_RUNGS = (frozenset({"optimizer"}), frozenset({"optimizer", "master"}))
KERNELS = ("fused", "reference")
_STOP = None


@dataclass(frozen=True)
class Chunk:
    """Elements [start, stop) of parameter ``index``, flattened."""

    index: int
    start: int
    stop: int


def chunks_of(numel: int, index: int, size: int = CHUNK_ELEMENTS) -> list[Chunk]:
    return [Chunk(index, s, min(s + size, numel)) for s in range(0, numel, size)]


@dataclass
class StepStats:
    """What one step moved and how long its stages took (seconds of the worker's wall time)."""

    d2h_bytes: int = 0
    h2d_bytes: int = 0
    cpu_seconds: float = 0.0  # the CPU's update of every chunk
    wait_seconds: float = 0.0  # step() waiting for the worker: what the backward did not hide
    early_chunks: int = 0  # chunks started during the last backward
    chunks: int = 0

    def to_json(self) -> dict:
        return {
            "d2h_bytes": self.d2h_bytes,
            "h2d_bytes": self.h2d_bytes,
            "cpu_ms": self.cpu_seconds * 1e3,
            "exposed_ms": self.wait_seconds * 1e3,
            "chunks": self.chunks,
            "chunks_during_backward": self.early_chunks,
        }


@dataclass
class _Staging:
    """Two pinned buffers each way (bf16 gradients down, bf16 weights up) and their events."""

    down: list[torch.Tensor]
    up: list[torch.Tensor]
    up_done: list[torch.cuda.Event | None] = field(default_factory=lambda: [None, None])


class HostAdamW:
    """AdamW over fp32 master copies of bf16 parameters, its state in host memory; the
    interface of torch's optimizers for the training loop: ``step()``, ``zero_grad()``,
    ``param_groups``; ``arm(last)`` before each micro-batch lets the last one start the step."""

    def __init__(
        self,
        params: list[nn.Parameter],
        masters: list[torch.Tensor],
        *,
        kinds: frozenset[str],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        kernel: str = "fused",
        chunk_elements: int = CHUNK_ELEMENTS,
        early: frozenset[int] = frozenset(),
    ) -> None:
        if kinds not in HOST_RUNGS:
            raise ValueError(f"host state {sorted(kinds)}: accepted {[sorted(r) for r in HOST_RUNGS]}")
        if kernel not in KERNELS:
            raise ValueError(f"kernel {kernel!r}: accepted {', '.join(KERNELS)}")
        self.params = params
        self.device = params[0].device if params else torch.device("cpu")
        self.cuda = self.device.type == "cuda"
        self.on_cpu = "master" in kinds  # the step runs on the host's CPU
        self.kinds = kinds
        self.kernel = kernel
        self.hyper = (betas[0], betas[1], eps, weight_decay)
        self.param_groups = [{"lr": lr}]
        pin = self.cuda and not self.on_cpu  # moments streamed straight from their home
        self.masters = [m.reshape(-1) for m in masters] if self.on_cpu else [m.reshape(-1).to(self.device) for m in masters]
        self.exp_avgs = [_host_zeros(m.numel(), pin) for m in self.masters]
        self.exp_avg_sqs = [_host_zeros(m.numel(), pin) for m in self.masters]
        self.chunks = [chunks_of(p.numel(), i, chunk_elements) for i, p in enumerate(params)]
        largest = max((c.stop - c.start for cs in self.chunks for c in cs), default=0)
        self.step_count = 0
        self.stats = StepStats()
        self.history: list[StepStats] = []
        self._early = early  # parameters whose gradients are final once the last backward reaches them
        self._armed = False
        self._announced: set[int] = set()
        self._queue: queue.Queue = queue.Queue()
        self._worker: threading.Thread | None = None
        self._error: BaseException | None = None
        self._staging = self._make_staging(largest)
        # the fp32 gradient each CPU update reads, made once: a fresh buffer a chunk costs page faults
        self._g32 = [torch.empty(largest, dtype=torch.float32) for _ in range(2)] if self.on_cpu else None
        self._streams = (torch.cuda.Stream(self.device), torch.cuda.Stream(self.device)) if self.cuda else None
        self._hooks = [params[i].register_post_accumulate_grad_hook(self._hook(i)) for i in sorted(early)]

    # -- the training loop's interface -------------------------------------------------------

    def arm(self, last: bool) -> None:
        """Before a micro-batch: on the last one, final gradients start the step (the learning
        rate is read now: a schedule sets it before the step's first micro-batch)."""
        self._armed = last
        if last and self._early and self._worker is None:
            self._start()

    @torch.no_grad()
    def step(self) -> None:
        worker = self._worker if self._worker is not None else self._start()
        ready = _event(self.cuda)
        for i, p in enumerate(self.params):
            if i not in self._announced and p.grad is not None:
                self._queue.put((i, ready, False))
        self._queue.put(_STOP)
        start = time.perf_counter()
        worker.join()
        self.stats.wait_seconds = time.perf_counter() - start
        self._worker, self._armed = None, False
        self._announced.clear()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        if self._streams is not None:  # on a GPU: the next forward reads the weights the copy streams wrote
            for s in self._streams:
                torch.cuda.current_stream(self.device).wait_stream(s)
        self.history.append(self.stats)
        self.stats = StepStats()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    # -- the worker ---------------------------------------------------------------------------

    def _hook(self, index: int):
        def hook(param: torch.Tensor) -> None:
            if self._armed and index not in self._announced:
                self._announced.add(index)
                self._queue.put((index, _event(self.cuda), True))

        return hook

    def _start(self) -> threading.Thread:
        self.step_count += 1
        lr = float(self.param_groups[0]["lr"])
        self._worker = threading.Thread(target=self._run, args=(lr,), name="trainstack-host-adamw", daemon=True)
        self._worker.start()
        return self._worker

    def _run(self, lr: float) -> None:
        try:
            self._drain(lr)
        except BaseException as exc:  # noqa: BLE001 - handed to the training loop's thread, raised there by step(
            self._error = exc
            while self._queue.get() is not _STOP:
                pass

    @torch.no_grad()
    def _drain(self, lr: float) -> None:
        """Take announced parameters off the queue, chunk by chunk, two chunks in flight."""
        pending: deque = deque()
        todo: deque = deque()
        stopped = False
        slot = 0
        while True:
            if not stopped and not todo and not pending:
                item = self._queue.get()
                if item is _STOP:
                    stopped = True
                else:
                    index, ready, early = item
                    todo.extend((c, ready, early) for c in self.chunks[index])
            while todo and len(pending) < 2:
                chunk, ready, early = todo.popleft()
                pending.append((chunk, slot, ready, self._down(chunk, slot, ready), early))
                slot ^= 1
            if not pending:
                if stopped:
                    return
                continue
            chunk, s, ready, down, early = pending.popleft()
            if self.on_cpu:
                self._update_on_host(chunk, s, down, lr)
            else:
                self._update_on_device(chunk, down, ready, lr)
            self.stats.chunks += 1
            self.stats.early_chunks += int(early)
            if not stopped and not todo:  # more announced meanwhile: keep two in flight
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    continue
                if item is _STOP:
                    stopped = True
                else:
                    index, ready, early = item
                    todo.extend((c, ready, early) for c in self.chunks[index])

    def _down(self, chunk: Chunk, slot: int, ready):
        """The chunk's bf16 gradient to the host's staging buffer (the optimizer rung: a view,
        the device steps it where it is); with the event the copy records (None on the CPU)."""
        grad = _announced_grad(self.params[chunk.index]).reshape(-1)[chunk.start : chunk.stop]
        if not self.on_cpu:
            return grad
        buf = self._staged().down[slot][: chunk.stop - chunk.start]
        self.stats.d2h_bytes += buf.numel() * buf.element_size()
        if self._streams is None:  # on the CPU
            buf.copy_(grad)
            return (buf, None)
        down = self._streams[0]
        down.wait_event(ready)
        with torch.cuda.stream(down):
            buf.copy_(grad, non_blocking=True)
            done = torch.cuda.Event()
            done.record(down)
        return (buf, done)

    def _update_on_host(self, chunk: Chunk, slot: int, down, lr: float) -> None:
        param = self.params[chunk.index].data.reshape(-1)[chunk.start : chunk.stop]
        grad, done = down
        if done is not None:
            done.synchronize()
        staging = self._staged()
        event = staging.up_done[slot]
        if event is not None:
            event.synchronize()  # the upload that last read this buffer is done
        out = staging.up[slot][: chunk.stop - chunk.start]
        start = time.perf_counter()
        m = self.exp_avgs[chunk.index][chunk.start : chunk.stop]
        v = self.exp_avg_sqs[chunk.index][chunk.start : chunk.stop]
        scratch = self._g32[slot] if self._g32 is not None else None  # made wherever the step runs on the CPU
        self._adamw(out, grad, self.masters[chunk.index][chunk.start : chunk.stop], m, v, lr, scratch)
        self.stats.cpu_seconds += time.perf_counter() - start
        self.stats.h2d_bytes += out.numel() * out.element_size()
        if self._streams is None:  # on the CPU
            param.copy_(out)
            return
        up = self._streams[1]
        with torch.cuda.stream(up):
            param.copy_(out, non_blocking=True)
            event = torch.cuda.Event()
            event.record(up)
        staging.up_done[slot] = event

    def _update_on_device(self, chunk: Chunk, grad: torch.Tensor, ready, lr: float) -> None:
        """The optimizer rung: the moments come up, are updated with the device's master
        weight, and go back down, in order on one side stream (on the CPU: copied and
        copied back, as on a GPU)."""
        param = self.params[chunk.index].data.reshape(-1)[chunk.start : chunk.stop]
        master = self.masters[chunk.index][chunk.start : chunk.stop]
        m_home = self.exp_avgs[chunk.index][chunk.start : chunk.stop]
        v_home = self.exp_avg_sqs[chunk.index][chunk.start : chunk.stop]
        moved = 2 * m_home.numel() * m_home.element_size()
        self.stats.h2d_bytes += moved
        self.stats.d2h_bytes += moved
        if self._streams is None:  # on the CPU
            m, v = m_home.clone(), v_home.clone()
            self._adamw(param, grad, master, m, v, lr)
            m_home.copy_(m)
            v_home.copy_(v)
            return
        side = self._streams[0]
        side.wait_event(ready)
        with torch.cuda.stream(side):
            m = m_home.to(self.device, non_blocking=True)
            v = v_home.to(self.device, non_blocking=True)
            self._adamw(param, grad, master, m, v, lr)
            m_home.copy_(m, non_blocking=True)
            v_home.copy_(v, non_blocking=True)

    def _adamw(
        self,
        out: torch.Tensor,
        grad: torch.Tensor,
        master: torch.Tensor,
        m: torch.Tensor,
        v: torch.Tensor,
        lr: float,
        scratch: torch.Tensor | None = None,
    ) -> None:
        """One chunk's AdamW on its fp32 state, in place; the rounded weight into ``out``;
        ``scratch``: where the fused kernel's fp32 gradient goes (else a new tensor)."""
        beta1, beta2, eps, weight_decay = self.hyper
        step = torch.full((), float(self.step_count), dtype=torch.float32, device=master.device)
        if self.kernel == "reference":  # the rate as a 0-d fp32 tensor, as MasterAdamW holds it: the same rounding
            rate = torch.full((), lr, dtype=torch.float32, device=master.device)
            adamw_update(out, grad, master, m, v, step, rate, beta1, beta2, eps, weight_decay)
            return
        g32 = grad.float() if scratch is None else scratch[: grad.numel()].copy_(grad)
        torch._fused_adamw_(
            [master],
            [g32],
            [m],
            [v],
            [],
            [step],
            lr=lr,
            beta1=beta1,
            beta2=beta2,
            weight_decay=weight_decay,
            eps=eps,
            amsgrad=False,
            maximize=False,
        )
        out.copy_(master)

    def _staged(self) -> _Staging:
        """The staging buffers, made wherever a chunk goes through the host (the step on its CPU)."""
        if self._staging is None:
            raise RuntimeError("no staging buffers: the step runs on the device, or there is no parameter to step")
        return self._staging

    def _make_staging(self, largest: int) -> _Staging | None:
        if not self.on_cpu or largest == 0:
            return None

        def make() -> torch.Tensor:
            return torch.empty(largest, dtype=torch.bfloat16, pin_memory=self.cuda)

        return _Staging(down=[make(), make()], up=[make(), make()])  # two of each

    def host_tensors(self) -> list[torch.Tensor]:
        """What this optimizer keeps in host memory: its state there and its buffers."""
        kept = [*self.exp_avgs, *self.exp_avg_sqs]
        if self.on_cpu:
            kept += [*self.masters, *(self._g32 or [])] + ([*self._staging.down, *self._staging.up] if self._staging else [])
        return kept

    def where(self) -> dict[str, str]:
        return {"params": "gpu", "grads": "gpu", "master": "host" if self.on_cpu else "gpu", "optimizer": "host"}


def _host_zeros(numel: int, pin: bool) -> torch.Tensor:
    return torch.zeros(numel, dtype=torch.float32, pin_memory=pin)


def _announced_grad(param: nn.Parameter) -> torch.Tensor:
    """The gradient of a parameter on the queue: step() puts those that have one, the
    post-accumulate-grad hook those whose gradient it was just called for."""
    if param.grad is None:
        raise RuntimeError("a parameter without a gradient was announced to the host optimizer")
    return param.grad


def _event(cuda: bool):
    if not cuda:
        return None
    event = torch.cuda.Event()
    event.record()
    return event


def block_parameters(model: nn.Module, params: list[nn.Parameter]) -> frozenset[int]:
    """The indices of ``params`` that belong to one block of ``model.layers`` only: their
    gradients are final once the last micro-batch's backward has passed that block (a
    parameter used elsewhere too, as a tied embedding, waits for the end of the backward)."""
    layers = getattr(model, "layers", None)
    if layers is None:
        return frozenset()
    inside = {id(p) for block in layers for p in block.parameters()}
    outside = {id(p) for name, p in model.named_parameters(remove_duplicate=False) if not name.startswith("layers.")}
    return frozenset(i for i, p in enumerate(params) if id(p) in inside and id(p) not in outside)


def to_bf16_with_host_state(
    model: nn.Module, *, lr: float, kinds: frozenset[str], kernel: str = "fused", chunk_elements: int = CHUNK_ELEMENTS
) -> HostAdamW:
    """Cast ``model``'s parameters to bf16 in place and return the optimizer holding their
    fp32 values in host memory (or, for the optimizer rung, on the device), taken before the
    cast so the master weights start exact."""
    params = [p for p in model.parameters() if p.requires_grad]
    where = "cpu" if "master" in kinds else None
    masters = [p.detach().to(where or p.device, torch.float32, copy=True) for p in params]
    with torch.no_grad():
        for p in params:
            p.data = p.data.to(torch.bfloat16)
    return HostAdamW(
        params, masters, kinds=kinds, lr=lr, kernel=kernel, chunk_elements=chunk_elements, early=block_parameters(model, params)
    )
