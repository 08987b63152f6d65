"""`trainstack health`: gather the node's facts at the edge, run the checks of each level, build the report."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainstack.errors import RuleViolation
from trainstack.health import gpu_checks, host
from trainstack.health.level1 import Expectations, host_checks, node_checks, nvml_missing_checks
from trainstack.health.nvml import NodeSnapshot, NvmlSource, NvmlUnavailable, PynvmlSource, parse_node
from trainstack.health.reason import prolog_exit, reason_line
from trainstack.health.schema import Check, HealthReport, worst
from trainstack.health.thresholds import Thresholds, load_thresholds
from trainstack.rules import min_driver, shipped_rules


@dataclass(frozen=True)
class HealthOptions:
    level: int = 1
    expect_gpus: int | None = None
    thresholds_file: Path | None = None
    min_driver: str | None = None
    disk_path: Path = Path(".")
    sustained_s: float = 30.0
    allreduce_bytes: int = 2 * 1024**3
    prolog: bool = False  # Slurm's convention: exit 0 passes, 1 drains; GPU checks skip on a node without one
    node: str | None = None


@dataclass(frozen=True)
class Torch:
    """What torch offers on this node, or why it offers nothing."""

    cuda: str | None = None  # CUDA version torch was built for
    devices: int = 0
    reason: str = ""


def probe_torch() -> Torch:
    try:
        import torch
    except ImportError:
        return Torch(reason="torch is not installed")
    if not torch.cuda.is_available():
        return Torch(cuda=torch.version.cuda, reason="no GPU: torch.cuda.is_available() is False")
    return Torch(cuda=torch.version.cuda, devices=torch.cuda.device_count())


def open_nvml() -> NvmlSource:
    return PynvmlSource()


def run_health(
    opts: HealthOptions, *, nvml_factory: Callable[[], NvmlSource] = open_nvml, torch_probe: Callable[[], Torch] = probe_torch
) -> HealthReport:
    start = time.perf_counter()
    nvml, node, nvml_reason = _snapshot(nvml_factory)
    gpu_name = node.gpus[0].name if node and node.gpus else None
    t = load_thresholds(gpu_name, opts.thresholds_file)
    # A node without NVML has no NVIDIA driver: level 1 needs no torch there (a prolog stays quick)
    quick = opts.prolog and opts.level == 1 and node is None and not opts.expect_gpus
    tor = Torch(reason="not probed: no NVML, level 1") if quick else torch_probe()
    checks = host_checks(host.shm_size(), host.disk_free(opts.disk_path), t)
    no_gpu = _no_gpu(opts, node, tor)
    if no_gpu:
        checks += gpu_checks.skip_checks(("gpu.count", "driver.version"), 1, no_gpu)
    elif node is None:
        checks += nvml_missing_checks(nvml_reason)
    else:
        checks += node_checks(node, t, _expectations(opts, t, tor))
    if opts.level >= 2:
        checks += gpu_checks.host_rates() if no_gpu else []  # no GPU: the host measured instead, for the fleet
        checks += _gpu_levels(opts, t, tor, nvml, node, no_gpu)
    status = worst([c.status for c in checks])
    return HealthReport.build(
        level=opts.level,
        checks=checks,
        gpu_model=gpu_name,
        profile=t.profile,
        seconds=time.perf_counter() - start,
        node=opts.node,
        mode="prolog" if opts.prolog else "check",
        reason=reason_line(checks),
        exit_code=prolog_exit(status) if opts.prolog else None,
    )


def _no_gpu(opts: HealthOptions, node: NodeSnapshot | None, tor: Torch) -> str:
    """In prolog mode, why this node has no GPU to check ('' when it has one, or must have one):
    neither NVML nor torch sees a GPU and --expect-gpus asks for none."""
    if not opts.prolog or (opts.expect_gpus or 0) > 0 or tor.devices > 0 or (node is not None and node.gpus):
        return ""
    return "skip: no GPU"


def _snapshot(factory: Callable[[], NvmlSource]) -> tuple[NvmlSource | None, NodeSnapshot | None, str]:
    try:
        nvml = factory()
        return nvml, parse_node(nvml.record()), ""
    except NvmlUnavailable as exc:
        return None, None, str(exc)


def _expectations(opts: HealthOptions, t: Thresholds, tor: Torch) -> Expectations:
    rules = _rules_min_driver(tor.cuda) if tor.cuda else None
    if opts.min_driver:
        minimum, source = opts.min_driver, "from --min-driver"
    elif rules:
        minimum, source = rules
    elif t.min_driver:
        minimum, source = t.min_driver, f"from thresholds profile {t.profile}"
    else:
        minimum, source = None, ""
    return Expectations(gpus=opts.expect_gpus, min_driver=minimum, min_driver_source=source, runtime_cuda=tor.cuda)


def _rules_min_driver(cuda: str) -> tuple[str, str] | None:
    """The compatibility rules' minimum driver for the CUDA torch was built for, with its source."""
    try:
        rules = shipped_rules()
        return min_driver(rules, cuda), f"rules: CUDA {cuda} ({rules.cuda.driver.source})"
    except RuleViolation:
        return None


def _gpu_levels(
    opts: HealthOptions, t: Thresholds, tor: Torch, nvml: NvmlSource | None, node: NodeSnapshot | None, no_gpu: str = ""
) -> list[Check]:
    if tor.devices == 0:
        absent = gpu_checks.skip_checks if no_gpu else gpu_checks.unknown_checks
        skipped = absent(gpu_checks.LEVEL2_NAMES, 2, no_gpu or tor.reason)
        if opts.level >= 3:
            skipped += absent(gpu_checks.LEVEL3_NAMES, 3, no_gpu or tor.reason)
        return skipped
    import torch

    devices = [torch.device("cuda", i) for i in range(tor.devices)]
    index = _nvml_index(node)
    checks: list[Check] = []
    for d in devices:
        checks += gpu_checks.level2(d, t, gpu=index(d.index))
        torch.cuda.empty_cache()
    if opts.level >= 3:
        # NCCL_NVLS_ENABLE and the rest of the environment pass to the ranks unchanged.
        checks.append(gpu_checks.allreduce_check(len(devices), t, backend="nccl", nbytes=opts.allreduce_bytes))
        checks += gpu_checks.sustained_checks(devices, opts.sustained_s, nvml, t, [index(d.index) for d in devices])
    return checks


def _nvml_index(node: NodeSnapshot | None) -> Callable[[int], int]:
    """Map a torch device index to the NVML index of the same GPU, by UUID."""
    import torch

    by_uuid = {g.uuid: g.index for g in (node.gpus if node else []) if g.uuid}

    def index(cuda_index: int) -> int:
        uuid = getattr(torch.cuda.get_device_properties(cuda_index), "uuid", None)
        return by_uuid.get(f"GPU-{uuid}", cuda_index)

    return index
