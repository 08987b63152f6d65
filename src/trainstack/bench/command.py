"""The bench verb: end-to-end training throughput, ablations, A/B comparison."""

from __future__ import annotations

from pathlib import Path

import typer


def command(
    model: str = typer.Option("125m", "--preset", "--model", "-m", help="Preset: tiny, 125m, 1b, 3b, 8b."),
    hf_config: Path | None = typer.Option(None, "--hf-config", help="A Hugging Face config.json (or its folder) instead of a preset; no download."),
    batch: int = typer.Option(1, "--batch", "-b", help="Sequences per GPU per step."),
    seq: int | None = typer.Option(None, "--seq", "-s", help="Sequence length [default: 2048, or the model's max_seq if smaller]."),
    steps: int | None = typer.Option(None, "--steps", help="Timed steps [default: 20; 300 with --parity]."),
    warmup: int = typer.Option(3, "--warmup", help="Untimed steps first (compilation happens here)."),
    modes: str | None = typer.Option(None, "--modes", help="Mode, or comma-separated modes with --ablation: eager, compile, bf16, fp8, fp8-rowwise, ac-none, ac-full, ac-every-N, ac-selective, planned, joined by '+' (compile+bf16+fp8)."),
    ablation: bool = typer.Option(False, "--ablation", help="Run each mode in a fresh process; one table, JSON lines and a PNG chart."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Folder for bench-<model>-b<batch>-s<seq>.jsonl (and .png for several modes)."),
    device: str = typer.Option("auto", "--device", help="auto, cuda or cpu."),
    memory_cap_gib: float | None = typer.Option(None, "--memory-cap-gib", help="Fail allocations beyond this many GiB per process, as on a smaller GPU."),
    timeout_s: float = typer.Option(1800.0, "--timeout", help="Seconds one ablation mode may take."),
    profile: Path | None = typer.Option(None, "--profile", help="Folder: profile 2 more steps per mode after the timed ones; a Chrome trace and a table of the kernels by time."),
    compare: tuple[Path, Path] | None = typer.Option(None, "--compare", help="Two result files A and B: print an A/B table with ratios, run nothing."),
    parity: str | None = typer.Option(None, "--parity", help="Two modes A,B: train both from the same seed on a learnable synthetic task and report the loss curves' largest relative gap (after the ablation, with --ablation)."),
) -> None:
    """Measure training throughput (tokens/s, MFU, memory, step-time spread) of a Llama-family decoder.

    Under torchrun the model is sharded with FSDP2 and figures are per GPU and in total.

    Example: trainstack bench --preset 1b --batch 4 --seq 4096 --ablation --out results
    """
    if compare is not None:
        from trainstack.bench.compare import print_compare

        print_compare(*compare)
        return
    from trainstack.bench.presets import shape
    from trainstack.extras import require, require_cuda

    if hf_config is None:
        shape(model)  # an unknown preset is rejected before torch is imported
    require("torch", "trainstack bench")
    if device == "cuda":
        require_cuda("trainstack bench --device cuda")
    from trainstack.bench import api
    from trainstack.bench.modes import DEFAULT_ABLATION

    chosen = modes or (",".join(DEFAULT_ABLATION) if ablation else "compile")
    steps = steps if steps is not None else (300 if parity else 20)
    opts = api.BenchOptions(model, hf_config, batch, seq, steps, warmup, chosen, ablation, out, device, memory_cap_gib, timeout_s, profile, parity)
    code = api.exit_code(api.benchmark(opts), ablation, parity=parity is not None)
    if code:
        raise typer.Exit(code)
