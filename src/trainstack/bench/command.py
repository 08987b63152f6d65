"""The bench verb: end-to-end training throughput, ablations, A/B comparison."""

from __future__ import annotations

import contextlib
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from trainstack.nn import defaults

if TYPE_CHECKING:
    from trainstack.bench.compare import Matched


def command(
    ctx: typer.Context,
    model: str = typer.Option(defaults.PRESET, "--preset", "-m", help=defaults.PRESET_HELP),
    old_model: str | None = typer.Option(None, "--model", hidden=True, help=defaults.MODEL_HELP),
    hf_config: Path | None = typer.Option(
        None, "--hf-config", help="A Hugging Face config.json (or its folder) instead of a preset; no download."
    ),
    batch: int = typer.Option(1, "--batch", "-b", help="Sequences per GPU per step."),
    seq: int | None = typer.Option(None, "--seq", "-s", help=defaults.SEQ_HELP),
    steps: int | None = typer.Option(None, "--steps", help="Timed steps [default: 20; 300 with --parity]."),
    warmup: int = typer.Option(3, "--warmup", help="Untimed steps first (compilation happens here)."),
    accum: int = typer.Option(
        1, "--accum", help="Micro-batches (of --batch sequences) per optimizer step; a step's figures are the optimizer step's."
    ),
    modes: str | None = typer.Option(None, "--modes", help=defaults.MODES_HELP),
    ablation: bool = typer.Option(False, "--ablation", help="Run each mode in a fresh process; one table, JSON lines and a PNG chart."),
    out: Path | None = typer.Option(
        None, "--out", metavar="DIR", help="Folder for bench-<model>-b<batch>-s<seq>.jsonl (and .png for several modes)."
    ),
    device: str = typer.Option("auto", "--device", help="auto, cuda or cpu."),
    memory_cap_gib: float | None = typer.Option(
        None, "--memory-cap-gib", help="Fail allocations beyond this many GiB per process, as on a smaller GPU."
    ),
    timeout_s: float = typer.Option(1800.0, "--timeout", help="Seconds one ablation mode may take."),
    profile: Path | None = typer.Option(
        None,
        "--profile",
        help="Folder: profile 2 more steps per mode after the timed ones; a Chrome trace and a table of the kernels by time.",
    ),
    compare: tuple[Path, Path] | None = typer.Option(
        None, "--compare", help="Two result files A and B: print an A/B table with ratios, run nothing."
    ),
    parity: str | None = typer.Option(
        None,
        "--parity",
        help="Modes A,B trained from one seed on a learnable task: the gap of their smoothed losses at the end and its largest over the last third (after any --ablation).",
    ),
    parity_seeds: int = typer.Option(
        1,
        "--parity-seeds",
        help="With --parity: run each mode once per seed (0 to N-1) and compare the mean curves; each seed's own gap is shown beside.",
    ),
    json_out: bool = typer.Option(
        False,
        "--json",
        help="Print the result (the rows, or the A/B pairs of --compare) as one JSON document on stdout; the tables go to stderr.",
    ),
    output: Path | None = typer.Option(None, "--output", "-o", help="Also write that JSON document to this file."),
    health: Path | None = typer.Option(
        None,
        "--health",
        help="A health result (trainstack health --level 2 --json): its measured GEMM and copy rates are the ceilings of each row's time breakdown [default: the datasheet's].",
    ),
    stack: Path | None = typer.Option(
        None,
        "--stack",
        help="A stack file whose [bench] table gives --preset, --batch, --seq, --steps, --warmup and --modes (several modes: an ablation); flags given here win.",
    ),
    in_envs: list[str] | None = typer.Option(
        None,
        "--in",
        metavar="ENV",
        help="Bench in this venv or Python (with torch), each repeat a fresh process; several: one table, with the noise floor.",
    ),
    repeats: int = typer.Option(
        3, "--repeats", help="With --in or --attribute: runs per environment, interleaved; their spread is the noise floor."
    ),
    attribute: tuple[Path, Path] | None = typer.Option(
        None,
        "--attribute",
        metavar="PREVIOUS STACK",
        help="Two releases (locked stack files or stack.lock.json): build the environments between them, one component group at a time, bench each, attribute the change.",
    ),
    order: str | None = typer.Option(
        None, "--order", help="With --attribute: the component groups' order after torch (commas; '+' joins components into one group)."
    ),
    flavour: str | None = typer.Option(
        None,
        "--flavour",
        "--flavor",
        help="With --attribute: the new release's flavour [default: the only one that follows one of the previous release].",
    ),
    over: Path | None = typer.Option(
        None,
        "--over",
        metavar="PYTHON",
        help="With --attribute: every step's venv sees this interpreter's packages after its own (torch from an image that ships it).",
    ),
) -> None:
    """Measure training throughput (tokens/s, MFU, memory, step-time spread) of a Llama-family decoder.

    Under torchrun the model is sharded with FSDP2 and figures are per GPU and in total.

    Every output path is checked before the first step; results that cannot be written where
    asked go to a new file, and the error names it.

    Example: trainstack bench --preset 1b --batch 4 --seq 4096 --ablation --out results
    """
    _check_outputs(out, output, profile)
    if old_model is not None:
        from trainstack.console import print_error

        print_error(f"bench {defaults.MODEL_WARNING}", prefix="warning:")
        model = defaults.model(old_model, "bench", factories=False)[1]
    if compare is not None:
        from trainstack.bench.compare import Matched, attributions_beside, print_attributions, print_compare

        matched = Matched.read(*compare)  # each file read once, for the tables and the document
        attributions = attributions_beside(compare)  # bench --attribute's, beside its rows
        with _tables_to_stderr(json_out):
            print_compare(*compare, matched=matched)
            print_attributions(attributions)
        if json_out or output is not None:
            _emit(_compare_document(matched) | {"attributions": [a.model_dump(mode="json") for a in attributions]}, json_out, output)
        return
    given_modes: str | list[str] | None = modes
    if stack is not None:
        table = _stack_table(ctx, stack)
        model, batch, seq = table.get("preset", model), table.get("batch", batch), table.get("seq", seq)
        steps, warmup = table.get("steps", steps), table.get("warmup", warmup)
        if "modes" in table:  # the table's list, each mode parsed once below
            given_modes, ablation = table["modes"], ablation or len(table["modes"]) > 1
    from trainstack.extras import require, require_cuda, require_importable
    from trainstack.nn.presets import shape
    from trainstack.nn.versions import check_torch

    if hf_config is None:
        shape(model)  # an unknown preset is rejected before torch is imported
    ceilings = None
    if health is not None:
        from trainstack.bench.ceilings import read_health

        ceilings = read_health(health)  # a bad health result is refused before torch is imported
    require("torch", "trainstack bench")
    if hf_config is not None:  # from its metadata: a torch outside the range is refused before it is imported
        check_torch("bench --hf-config")
    require_importable("torch", "trainstack bench")
    if device == "cuda":
        require_cuda("trainstack bench --device cuda")
    from trainstack.bench import api
    from trainstack.bench.device import dist_from_env

    chosen = defaults.modes(given_modes, ablation=ablation)
    opts = api.BenchOptions(
        model=model,
        hf_config=hf_config,
        batch=batch,
        seq=seq,
        steps=steps if steps is not None else (300 if parity else 20),
        warmup=warmup,
        modes=chosen,
        ablation=ablation,
        accum=accum,
        out=out,
        device=device,
        memory_cap_gib=memory_cap_gib,
        timeout_s=timeout_s,
        profile=profile,
        parity=api.parse_parity(parity) if parity else None,
        parity_seeds=parity_seeds,
        health=ceilings,
    )
    if over is not None and attribute is None:
        from trainstack.errors import UsageError

        raise UsageError("--over: only with --attribute (the environments it builds see its packages)")
    if in_envs or attribute is not None:  # the same bench in other environments: the modes named, or the default one
        across = replace(
            opts, steps=steps if steps is not None else 20, modes=defaults.modes(given_modes, ablation=False), parity_seeds=1, health=None
        )
        _across(json_out, output, in_envs, repeats, attribute, order, flavour, over, across)
        return

    with _tables_to_stderr(json_out):
        rows = api.benchmark(opts)
    code = api.exit_code(rows, ablation, parity_rows=2 * parity_seeds if parity is not None else 0)
    if (json_out or output is not None) and dist_from_env().rank == 0:
        document = {
            "model": model if hf_config is None else str(hf_config),
            "batch": batch,
            "device": device,
            "modes": ",".join(m.name for m in chosen),
            "ablation": ablation,
            "parity": parity,
            "exit_code": code,
            "rows": rows,
        }
        _emit(document, json_out, output)
    if code:
        raise typer.Exit(code)


def _across(
    json_out: bool,
    output: Path | None,
    in_envs: list[str] | None,
    repeats: int,
    attribute: tuple[Path, Path] | None,
    order: str | None,
    flavour: str | None,
    over: Path | None,
    opts,
) -> None:
    """--in and --attribute: bench.across does the work; the document and the exit code here."""
    from trainstack.bench import across
    from trainstack.errors import UsageError

    if in_envs and attribute is not None:
        raise UsageError("--in and --attribute: give one; --attribute builds its own environments")
    with _tables_to_stderr(json_out):
        if attribute is not None:
            document, code = across.attribute(opts, *attribute, [o for o in (order or "").split(",") if o.strip()], flavour, repeats, over)
        else:
            document, code = across.in_environments(opts, [e for entry in in_envs or [] for e in entry.split(",") if e], repeats)
    if json_out or output is not None:
        _emit(document, json_out, output)
    if code:
        raise typer.Exit(code)


def _stack_table(ctx: typer.Context, stack: Path) -> dict:
    """The stack's [bench] settings that no flag on the command line overrides."""
    from trainstack.stackfile import load_stack

    table = load_stack(stack).bench.model_dump()
    flags = {"preset": "model", "batch": "batch", "seq": "seq", "steps": "steps", "warmup": "warmup", "modes": "modes"}

    def unset(name: str) -> bool:
        source = ctx.get_parameter_source(name)
        return source is None or source.name == "DEFAULT"

    return {key: value for key, value in table.items() if unset(flags[key])}


def _check_outputs(out: Path | None, output: Path | None, profile: Path | None) -> None:
    """Before torch is imported and anything runs: each path bench will write can be written."""
    from trainstack.fsutil import check_output

    for path, option, folder in ((out, "--out", True), (output, "--output", False), (profile, "--profile", True)):
        if path is not None:
            check_output(path, option, folder=folder)


def _tables_to_stderr(json_out: bool) -> contextlib.AbstractContextManager:
    """With --json, stdout carries the JSON document alone: what bench prints for people goes to stderr."""
    return contextlib.redirect_stdout(sys.stderr) if json_out else contextlib.nullcontext()


def _emit(document: dict, json_out: bool, output: Path | None) -> None:
    """The document on stdout (--json) and in --output; where the file cannot be written, in a
    new file beside the work (bench.rescue), named in the error: measured results are never lost."""
    from trainstack.console import emit_json
    from trainstack.errors import OutputError
    from trainstack.fsutil import atomic_write_text, dump_json

    text = dump_json(_finite(document))
    emit_json(text, to_stdout=json_out, output=None)
    if output is None:
        return
    try:
        atomic_write_text(output, text)
    except OSError as exc:
        from trainstack.bench.report import rescue

        raise OutputError(
            f"--output {output}: cannot write ({exc.strerror or exc}); the results are in {rescue(text, output.name)}"
        ) from None


def _finite(value: object) -> object:
    """NaN and infinities (a diverged run's loss) as null: the document stays valid JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _compare_document(matched: Matched) -> dict:
    """The rows of A and B matched as the A/B table matches them, with B/A of tokens/s and memory."""
    from trainstack.bench.compare import breakdown_shares

    def ratio(ra: dict | None, rb: dict | None, field: str) -> float | None:
        a, b = ((r or {}).get(field) if (r or {}).get("status") == "ok" else None for r in (ra, rb))
        return round(b / a, 4) if a and b is not None else None

    a, b = matched.a, matched.b
    pairs = [
        {
            "model": k[0],
            "mode": k[1],
            "batch": k[2],
            "seq": k[3],
            "world_size": k[4],
            "a": a.get(k),
            "b": b.get(k),
            "tokens_per_s_b_over_a": ratio(a.get(k), b.get(k), "tokens_per_s_per_gpu"),
            "memory_b_over_a": ratio(a.get(k), b.get(k), "mem_allocated_gib"),
            "breakdown_shares": breakdown_shares(a.get(k), b.get(k)),
        }
        for k in matched.keys()
    ]
    return {"a": str(matched.path_a), "b": str(matched.path_b), "pairs": pairs}
