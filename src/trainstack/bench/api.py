"""What the bench verb does: validate options, run one mode or an ablation, print, write."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from rich.text import Text

from trainstack.bench.ablation import run_ablation
from trainstack.bench.device import close_process_group, dist_from_env
from trainstack.bench.flash import INSTALL
from trainstack.bench.fp8 import EXTRA, MIN_CAPABILITY, torchao_missing
from trainstack.bench.parity import LR, MAX_SEEDS, describe, parity_result
from trainstack.bench.plot import write_chart
from trainstack.bench.report import breakdown_table, explain, rescue, results_table, write_jsonl
from trainstack.bench.runner import RunSpec, run
from trainstack.console import err, out
from trainstack.errors import OutputError, ToolMissingError, UsageError
from trainstack.fsutil import atomic_write_json
from trainstack.nn import defaults
from trainstack.nn.decoder import ModelConfig
from trainstack.nn.hf import HfShape, resolve
from trainstack.nn.modes import Mode, parse_mode
from trainstack.nn.presets import preset

# Statuses that are results (the mode cannot run here), not failures of the benchmark.
EXPECTED = {"ok", "oom", "unavailable"}


@dataclass(frozen=True)
class BenchOptions:
    model: str = defaults.PRESET
    hf_config: Path | None = None
    batch: int = 1
    seq: int | None = None  # None: defaults.seq's
    steps: int = 20
    warmup: int = 3
    modes: tuple[Mode, ...] = field(default_factory=lambda: defaults.modes(None, ablation=False))  # parsed once, from --modes
    ablation: bool = False
    out: Path | None = None
    device: str = "auto"
    memory_cap_gib: float | None = None
    timeout_s: float = 1800.0
    profile: Path | None = None
    parity: tuple[Mode, Mode] | None = None  # --parity A,B: train both on the learnable task, compare the loss curves
    parity_seeds: int = 1  # --parity-seeds: each mode once per seed, the mean curves compared
    health: dict | None = None  # --health: the GPU's measured ceilings (bench.ceilings.read_health)
    accum: int = 1  # --accum: micro-batches per optimizer step


def resolve_config(opts: BenchOptions) -> tuple[str, ModelConfig | HfShape]:
    if opts.hf_config is not None:
        path = opts.hf_config
        label = path.parent.name if path.is_file() and path.name == "config.json" else (path.stem if path.is_file() else path.name)
        return label or "hf", resolve(path)
    return opts.model, preset(opts.model)


def make_spec(opts: BenchOptions) -> RunSpec:
    label, cfg = resolve_config(opts)
    seq = defaults.seq(opts.seq, preset=None if opts.hf_config is not None else opts.model, max_seq=cfg.max_seq)
    checks = (
        (opts.batch >= 1, f"--batch {opts.batch}: accepted: 1 or more"),
        (opts.accum >= 1, f"--accum {opts.accum}: accepted: 1 or more micro-batches per optimizer step"),
        (2 <= seq <= cfg.max_seq, f"--seq {seq}: accepted: 2 to {cfg.max_seq} (the model's max_seq)"),
        (opts.steps >= 2, f"--steps {opts.steps}: accepted: 2 or more timed steps"),
        (opts.warmup >= 1, f"--warmup {opts.warmup}: accepted: 1 or more (the first step compiles)"),
        (opts.device in ("auto", "cuda", "cpu"), f"--device {opts.device}: accepted: auto, cuda, cpu"),
        (opts.memory_cap_gib is None or opts.memory_cap_gib > 0, f"--memory-cap-gib {opts.memory_cap_gib}: accepted: a positive number"),
        (1 <= opts.parity_seeds <= MAX_SEEDS, f"--parity-seeds {opts.parity_seeds}: accepted: 1 to {MAX_SEEDS}"),
        (opts.parity_seeds == 1 or opts.parity is not None, f"--parity-seeds {opts.parity_seeds}: accepted only with --parity A,B"),
    )
    for ok, message in checks:
        if not ok:
            raise UsageError(message)
    cap = int(opts.memory_cap_gib * 2**30) if opts.memory_cap_gib else None
    profile = str(opts.profile.resolve()) if opts.profile is not None else None
    return RunSpec(
        label,
        cfg,
        batch=opts.batch,
        seq=seq,
        steps=opts.steps,
        warmup=opts.warmup,
        device=opts.device,
        memory_cap_bytes=cap,
        profile_dir=profile,
        health=opts.health,
        accum=opts.accum,
    )


def parse_parity(text: str) -> tuple[Mode, Mode]:
    modes = [parse_mode(part) for part in text.split(",") if part.strip()]
    if len(modes) != 2:
        raise UsageError(f"--parity '{text}': {len(modes)} modes; accepted: two modes A,B (e.g. compile+bf16,compile+bf16+fp8)")
    return modes[0], modes[1]


def check_fp8(modes: list[Mode], device: str) -> None:
    """One line before anything runs when a float8 mode cannot run here (the GPU's compute
    capability is checked where the mode runs)."""
    fp8 = next((m.name for m in modes if m.fp8), None)
    if fp8 is None:
        return

    if torchao_missing():
        raise ToolMissingError(f"--modes {fp8}: float8 training needs the 'torchao' package", hint=EXTRA)
    import torch

    if device == "cpu" or not torch.cuda.is_available():
        raise UsageError(
            f"--modes {fp8}: float8 training needs an NVIDIA GPU of compute capability sm{''.join(map(str, MIN_CAPABILITY))} or newer; accepted here: modes without fp8"
        )


def check_flash(modes: list[Mode], device: str) -> None:
    """One line before anything runs when a flash mode cannot run here."""
    named = next((m.name for m in modes if m.flash), None)
    if named is None:
        return
    import importlib.util

    if importlib.util.find_spec("flash_attn") is None:
        raise ToolMissingError(f"--modes {named}: flash attention needs the flash-attn package, which this environment lacks", hint=INSTALL)
    import torch

    if device == "cpu" or not torch.cuda.is_available():
        raise UsageError(f"--modes {named}: flash-attn's kernels need a CUDA GPU; accepted here: modes without flash")


def benchmark(opts: BenchOptions) -> list[dict]:
    """Run, print the table, write ``<out>/<label>.jsonl`` and ``.png``; returns the rows
    (with ``--parity`` and no ablation: the two parity rows)."""
    spec = make_spec(opts)
    modes = list(opts.modes)
    if not opts.ablation and len(modes) > 1:
        named = ",".join(m.name for m in modes)
        raise UsageError(f"--modes '{named}' lists {len(modes)} modes; accepted: one mode, or several with --ablation")
    parity_modes = opts.parity or ()
    check_fp8(modes + list(parity_modes), opts.device)
    check_flash(modes + list(parity_modes), opts.device)
    lead = dist_from_env().rank == 0
    if parity_modes:
        return _with_parity(opts, spec, parity_modes, lead)
    if lead:
        _starting(spec, [m.name for m in modes])
    if opts.ablation:
        specs = [replace(spec, mode=mode) for mode in modes]
        rows = run_ablation(specs, timeout_s=opts.timeout_s, on_row=_progress if lead else None)
    else:
        rows = [run(replace(spec, mode=modes[0]))]
    if lead:
        _publish(rows, spec, opts.out)
    if not opts.ablation:
        close_process_group()
    return rows


def _starting(spec: RunSpec, modes: list[str]) -> None:
    """One line before the first step: the warm-up (compilation included) can take minutes."""
    what = f"{spec.model}, batch {spec.batch} x seq {spec.seq}, device {spec.device}"
    err.print(
        Text(
            f"bench {what}: {', '.join(modes)}; {spec.warmup} warm-up step(s) first (compilation happens there), then {spec.steps} timed",
            style="dim",
        ),
        highlight=False,
    )


def _progress(row: dict) -> None:
    speed = f"{row['tokens_per_s_per_gpu']:,.0f} tok/s/GPU" if row.get("status") == "ok" else row.get("error", "")
    err.print(Text(f"{row['mode']}: {row['status']} {speed}", style="dim"), highlight=False)


def _with_parity(opts: BenchOptions, spec: RunSpec, parity_modes: tuple[Mode, Mode], lead: bool) -> list[dict]:
    """``--parity A,B``, after the ablation's modes when ``--ablation`` is given too: one chart."""
    rows = []
    if opts.ablation:
        rows = run_ablation([replace(spec, mode=m) for m in opts.modes], timeout_s=opts.timeout_s, on_row=_progress if lead else None)

    specs = [
        replace(spec, mode=m, task="markov", lr=LR, lr_schedule=True, seed=seed) for seed in range(opts.parity_seeds) for m in parity_modes
    ]
    result = parity_result(run_ablation(specs, timeout_s=opts.timeout_s, on_row=_progress if lead else None))
    if lead:
        _publish(rows or result["rows"], spec, opts.out, result, stem_prefix="bench" if rows else "parity")
    return rows + result["rows"]


def _publish(rows: list[dict], spec: RunSpec, out_dir: Path | None, parity: dict | None = None, stem_prefix: str = "bench") -> None:
    title = f"trainstack bench: {spec.model}, batch {spec.batch} x seq {spec.seq}"
    out.print(results_table(rows, title))
    split = breakdown_table(rows)
    if split is not None:
        out.print(split)
    for line in explain(rows):  # plain text: a '[' in a path or a health result's GPU name is no markup
        out.print(Text(line), highlight=False, soft_wrap=True)
    if parity is not None:
        for line in describe(parity):
            out.print(line, highlight=False, soft_wrap=True)
    if out_dir is None:
        return
    name, kept = free_name(out_dir, f"{stem_prefix}-{spec.model}-b{spec.batch}-s{spec.seq}")
    jsonl = out_dir / f"{name}.jsonl"  # the whole name: 'llama3.2-1b' is no suffix to replace
    try:
        write_jsonl(jsonl, rows)
    except OSError as exc:  # a finished benchmark is never lost: its rows go elsewhere, and that is said
        import json

        text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)
        raise OutputError(f"{jsonl}: cannot write ({exc.strerror or exc}); the results are in {rescue(text, name + '.jsonl')}") from None
    if kept is not None:
        out.print(Text(f"{kept} holds an earlier run's results: kept; this run's are in {jsonl.name}"), highlight=False, soft_wrap=True)
    out.print(f"wrote {jsonl}", highlight=False)
    if parity is not None:
        path = out_dir / f"{name.replace(stem_prefix, 'parity', 1)}.json"
        atomic_write_json(path, parity)
        out.print(f"wrote {path}", highlight=False)
    if len(rows) > 1 or parity is not None:
        chart = out_dir / f"{name}.png"
        write_chart(chart, rows, title, parity=parity)
        out.print(f"wrote {chart}", highlight=False)


def free_name(out_dir: Path, name: str) -> tuple[str, Path | None]:
    """``name`` when no ``<name>.jsonl`` is in ``out_dir``, else the first free ``<name>-2``,
    ``<name>-3``, ...: a finished run's results are never replaced. (name, the file kept or None)"""
    first = out_dir / f"{name}.jsonl"
    if not (first.exists() or first.is_symlink()):
        return name, None
    number = 2
    while (out_dir / f"{name}-{number}.jsonl").exists() or (out_dir / f"{name}-{number}.jsonl").is_symlink():
        number += 1
    return f"{name}-{number}", first


def exit_code(rows: list[dict], ablation: bool, parity_rows: int = 0) -> int:
    """0 when the run measured what it could; 1 when a mode failed or nothing was measured,
    or when a parity run (the last ``parity_rows`` rows) has no loss curve."""
    if parity_rows and any(r.get("status") != "ok" for r in rows[-parity_rows:]):
        return 1
    if any(r.get("status") not in EXPECTED for r in rows):
        return 1
    if not any(r.get("status") == "ok" for r in rows):
        return 1
    return 0 if ablation or rows[0]["status"] == "ok" else 1
