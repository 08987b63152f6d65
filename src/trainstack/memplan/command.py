"""The memplan verb: predict a training step's peak memory and choose what to recompute."""

from __future__ import annotations

from pathlib import Path

import typer

from trainstack.nn import defaults


def command(
    preset: str = typer.Option(defaults.PRESET, "--preset", "-m", help=defaults.PRESET_HELP),
    batch: int = typer.Option(1, "--batch", "-b", min=1, help="Sequences per GPU per step."),
    seq: int | None = typer.Option(None, "--seq", "-s", min=1, help=defaults.SEQ_HELP),
    budget: str = typer.Option(
        "0.9",
        "--budget",
        help="Memory per GPU: bytes with a unit ('60GiB', '80GB') or a fraction of the GPU's memory ('0.8'; of the host's where there is no GPU).",
    ),
    world_size: int = typer.Option(1, "--world-size", min=1, help="Ranks (GPUs) the model is sharded over; the prediction is per rank."),
    shard: str | None = typer.Option(
        None,
        "--shard",
        help="Sharding over --world-size ranks: fsdp2, zero1 (optimizer state, master weights), zero2 (+ gradients), zero3 (+ parameters), none [default: fsdp2 over several ranks].",
    ),
    offload: str = typer.Option(
        "none",
        "--offload",
        help="State in host memory: 'auto' (what the budget needs; recompute or offload, the faster), 'none', or kinds (commas): optimizer, master, params, grads.",
    ),
    accum: int = typer.Option(
        1, "--accum", min=1, help="Micro-batches (of --batch sequences) per optimizer step: the gradients stay between them."
    ),
    host_budget: str = typer.Option(
        "0.9", "--host-budget", help="Host memory for offloaded state on each host: bytes with a unit or a fraction of this host's memory."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the plan as JSON on stdout instead of the tables."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Also write the plan as JSON to this file."),
    compiled: bool = typer.Option(
        False,
        "--compiled",
        help="Plan for torch.compile'd blocks: on a GPU, kept blocks are also measured under the compiler's activation memory budgets, and the plan names one.",
    ),
    hf_config: Path | None = typer.Option(
        None,
        "--hf-config",
        help="Plan a Hugging Face causal LM from a local config.json (or its folder), built on the meta device; nothing is downloaded.",
    ),
    model_factory: str | None = typer.Option(
        None,
        "--factory",
        metavar="MODULE:FUNCTION",
        help="Plan your own model: module:function returning a model, (model, example_batch) or (model, example_batch, loss_fn).",
    ),
    old_model: str | None = typer.Option(None, "--model", hidden=True, help=defaults.MODEL_HELP),
    optimizer: str = typer.Option(
        "adamw", "--optimizer", help="adamw, adamw-foreach, adam, sgd, sgd-momentum, adafactor, adamw8bit (with --hf-config or --factory)."
    ),
    precision: str = typer.Option(
        "autocast-bf16",
        "--precision",
        help="autocast-bf16, bf16 (bf16 parameters, fp32 master weights and AdamW state, as bench's +bf16 modes) or fp32 (no autocast, as bench on a CPU).",
    ),
    blocks: str | None = typer.Option(None, "--blocks", help="Dotted name of the list of blocks to plan (default: found)."),
    stray: list[str] = typer.Argument(None, hidden=True),
) -> None:
    """Predict peak training memory (weights, gradients, AdamW state, activations, transients)
    and choose per block: keep, selective or full recompute, at the least recompute cost.

    The defaults run anywhere: without a GPU the budget's fraction is of the host's memory,
    and the sequence is at most the preset's max_seq.

    Example: trainstack memplan --preset 3b --batch 2 --seq 4096 --budget 60GiB

    Any model: --hf-config path/to/config.json, or --factory mymodels:build.
    """
    from trainstack.console import print_error
    from trainstack.errors import UsageError
    from trainstack.extras import require, require_importable
    from trainstack.memplan.budget import device_memory_bytes, gpu_memory_bytes, parse_budget
    from trainstack.nn.presets import preset as get_preset
    from trainstack.nn.presets import shape
    from trainstack.nn.versions import check_torch

    if stray:
        hint = f"; to write a file: --output {stray[0]}" if json_out else ""
        raise UsageError(f"unexpected argument '{stray[0]}'{hint} (--json prints the plan on stdout and takes no file name)")
    if old_model is not None:
        print_error(f"memplan {defaults.MODEL_WARNING}", prefix="warning:")
        kind, named = defaults.model(old_model, "memplan", factories=True)
        if model_factory is not None or hf_config is not None:
            raise UsageError("--model is the old spelling of --preset and --factory; give one model")
        if kind == "factory":
            model_factory = named
        else:
            preset = named
    if output is not None:
        from trainstack.fsutil import check_output

        check_output(output, "--output")
    if hf_config is not None and model_factory is not None:
        raise UsageError("--hf-config and --factory name two models; give one")
    any_model = hf_config is not None or model_factory is not None
    if any_model and compiled:
        raise UsageError("--compiled plans the presets' blocks only; leave it out with --hf-config or --factory")
    if not any_model:
        if precision not in ("autocast-bf16", "bf16", "fp32"):
            raise UsageError(f"--precision: '{precision}' is not a precision of the presets; accepted: autocast-bf16, bf16, fp32")
        max_seq = shape(preset)["max_seq"]
        seq = defaults.seq(seq, preset=preset)
        if seq > max_seq:
            raise UsageError(f"--seq: {seq} exceeds the {preset} preset's max_seq {max_seq}")
    budget_bytes = parse_budget(budget, device_memory_bytes)
    if _is_fraction(budget) and gpu_memory_bytes() is None:
        from trainstack.console import err

        err.print(
            f"note: no GPU here: --budget {budget} is of this host's memory ({budget_bytes / 2**30:.1f} GiB)",
            highlight=False,
            soft_wrap=True,
        )
    placement = _placement(shard, offload, accum, host_budget, world_size)
    require("torch", "trainstack memplan")
    check_torch("memplan")  # from its metadata: a torch outside the range is refused before it is imported
    require_importable("torch", "trainstack memplan")
    if any_model:
        _plan_any_model(
            hf_config,
            model_factory,
            batch=batch,
            seq=seq,
            budget_bytes=budget_bytes,
            world_size=world_size,
            optimizer=optimizer,
            precision=precision,
            blocks=blocks,
            json_out=json_out,
            output=output,
            placement=placement,
        )
        return

    from trainstack.memplan import plan_memory
    from trainstack.memplan.report import to_json

    assert seq is not None  # a preset's sequence is resolved above
    plan = plan_memory(
        get_preset(preset),
        batch=batch,
        seq=seq,
        budget_bytes=budget_bytes,
        world_size=world_size,
        compiled=compiled,
        precision=precision,
        placement=_with_rates(placement),
    )
    document = {"preset": preset, "batch": batch, "seq": seq, "compiled": compiled, "precision": precision, **to_json(plan)}
    _emit(plan, document, json_out=json_out, output=output)


def _placement(shard: str | None, offload: str, accum: int, host_budget: str, world_size: int):
    """The placement asked for (offload.Placement), or None where the flags ask for none of it."""
    if shard is None and offload.strip().lower() == "none" and accum == 1:
        return None
    from trainstack.memplan.budget import HOST_MEMORY, host_memory_bytes, parse_budget
    from trainstack.memplan.offload import Placement
    from trainstack.memplan.placement import Layout, parse_offload

    auto = offload.strip().lower() == "auto"
    kinds = None if auto else parse_offload(offload)
    Layout(shard or ("fsdp2" if world_size > 1 else "none"), world_size, kinds or frozenset())  # refuses a bad sharding or kind now
    host = parse_budget(host_budget, host_memory_bytes, flag="--host-budget", of=HOST_MEMORY) if (auto or kinds) else None
    return Placement(shard=shard, offload=kinds, accum=accum, host_budget_bytes=host)


def _with_rates(placement):
    """``placement`` with the copy and CPU-step rates measured here, where it may offload."""
    if placement is None or placement.offload == frozenset():
        return placement
    from dataclasses import replace

    from trainstack.memplan.rates import measure_rates

    return replace(placement, rates=measure_rates())


def _is_fraction(budget: str) -> bool:
    try:
        return float(budget) <= 1
    except ValueError:
        return False


def _plan_any_model(
    hf_config: Path | None,
    factory: str | None,
    *,
    batch: int,
    seq: int | None,
    budget_bytes: int,
    world_size: int,
    optimizer: str,
    precision: str,
    blocks: str | None,
    json_out: bool,
    output: Path | None,
    placement=None,
) -> None:
    from trainstack.memplan import plan as plan_model
    from trainstack.memplan.blocks import UnplannableModel
    from trainstack.memplan.report import to_json
    from trainstack.memplan.sources import from_factory, from_hf_config

    source = from_hf_config(hf_config, batch=batch, seq=seq) if hf_config is not None else from_factory(factory or "", batch=batch, seq=seq)
    try:
        plan = plan_model(
            source.model,
            source.example_batch,
            budget=budget_bytes,
            optimizer=optimizer,
            precision=precision,
            world_size=world_size,
            blocks=blocks,
            loss_fn=source.loss_fn,
            label=source.name,
            placement=_with_rates(placement),
        )
    except UnplannableModel as exc:
        if hf_config is None:
            raise
        # a model built from a config fails where the config is inconsistent: name the config
        raise UnplannableModel(f"{hf_config}: {exc}") from None
    document = {
        "model": source.name,
        "batch": batch,
        "seq": source.seq,
        "compiled": False,
        "blocks": plan.blocks,
        "first_block": plan.first_block,
        "optimizer": plan.profile.optimizer,
        "precision": plan.profile.precision,
        **to_json(plan),
    }
    _emit(plan, document, json_out=json_out, output=output)


def _emit(plan, document: dict, *, json_out: bool, output: Path | None) -> None:
    """The plan as JSON on stdout (--json), in a file (--output), or as the tables."""
    from trainstack.console import emit_json, out
    from trainstack.fsutil import dump_json
    from trainstack.memplan.report import blocks_table, breakdown_table, headline

    if output is not None:
        emit_json(dump_json(document), to_stdout=False, output=output)
    if json_out:
        print(dump_json(document), end="")
        return
    out.print(headline(plan), highlight=False, soft_wrap=True)
    out.print(blocks_table(plan))
    out.print(breakdown_table(plan))
    if output is not None:
        out.print(f"wrote {output}", highlight=False, soft_wrap=True)
