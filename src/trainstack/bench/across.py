"""``bench --in ENV ...`` and ``bench --attribute PREVIOUS STACK``: the bench's run across
environments, from the checked options to the printed tables and the written results."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from trainstack.bench import attribute as attr
from trainstack.bench.api import BenchOptions, make_spec
from trainstack.bench.environments import (
    Environment,
    across_document,
    attribution_table,
    check_counts,
    environment,
    environments_table,
    label_of,
    probe,
    run_across,
    write_results,
)
from trainstack.console import out
from trainstack.errors import UsageError

ENVIRONMENTS = Path("build") / "bench-environments"  # the steps' venvs, reused while their pins are the same


def _spec(opts: BenchOptions):
    if opts.ablation or len(opts.modes) != 1:
        raise UsageError("--in and --attribute run one mode in every environment; accepted: one --modes, without --ablation")
    if opts.parity is not None or opts.profile is not None:
        raise UsageError("--in and --attribute measure throughput; accepted: without --parity and --profile")
    return replace(make_spec(opts), mode=opts.modes[0])


def _code(rows: list[dict]) -> int:
    """1 where a repeat failed or an environment measured nothing, else 0."""
    return 1 if not rows or any(r.get("status") != "ok" for r in rows) else 0


def in_environments(opts: BenchOptions, named: list[str], repeats: int) -> tuple[dict, int]:
    """Each ``--in`` environment, probed (refused in one line) before anything runs, then benched."""
    check_counts(len(named), repeats)
    twice = next((n for n in named if named.count(n) > 1), None)
    if twice is not None:
        raise UsageError(f"--in {twice}: named twice; accepted: each environment once (--repeats runs each again)")
    spec = _spec(opts)
    environments = [environment(text) for text in named]
    rows = run_across(spec, environments, repeats, opts.timeout_s)
    title = f"trainstack bench: {spec.model} {spec.mode.name}, batch {spec.batch} x seq {spec.seq}, {repeats} repeat(s) per environment"
    out.print(environments_table(rows, title))
    document = {**across_document(rows, repeats), "rows": rows}
    floor = document["noise_floor"]
    out.print(f"noise floor (largest spread of one environment's repeats): {floor * 100:.1f}%", highlight=False)
    write_results(opts.out, f"bench-{spec.model}-b{spec.batch}-s{spec.seq}-environments", rows)
    return document, _code(rows)


def attribute(
    opts: BenchOptions, previous: Path, current: Path, order: list[str], flavour: str | None, repeats: int, over: Path | None = None
) -> tuple[dict, int]:
    """The environments between two releases built (each over ``over``'s packages where given),
    each benched, the change attributed."""
    from trainstack.bench.between import build_steps, over_python, releases

    check_counts(0, repeats)
    spec = _spec(opts)
    before, after = releases(previous, current, flavour)
    components = tuple(dict.fromkeys(after.components + before.components))
    try:
        groups = attr.plan_groups(before.packages, after.packages, components, order)
    except ValueError as exc:
        raise UsageError(f"--order: {exc}") from None
    if not groups:
        raise UsageError(f"--attribute: {previous} and {current} lock the same versions for {before.slug}; nothing to attribute")
    seen = over_python(over, before.flavour.python) if over is not None else None
    work = ENVIRONMENTS / after.slug
    built = build_steps(before, after, groups, work, seen)
    names = ["base", *(f"+{g.name}" for g in built.groups)]
    environments = [Environment(name, python) for name, python in zip(names, built.pythons)]
    for env in environments:
        probe(env.label, env.python)
    rows = run_across(spec, environments, repeats, opts.timeout_s)
    figures = {f.label: f for f in attr.figures_of(rows, label_of)}
    result = attr.attribute(built.groups, [figures.get(n, attr.Figures(n, ())) for n in names], built.unresolved)
    flavours = after.slug if after.slug == before.slug else f"{before.slug} → {after.slug}"
    title = (
        f"{after.manifest.stack} {before.manifest.release} → {after.manifest.release} ({flavours}): {spec.model} {spec.mode.name}, "
        f"batch {spec.batch} x seq {spec.seq}, {repeats} repeat(s)"
    )
    out.print(attribution_table(result, title))
    document = attribution_document(
        before, after, result, rows, model=spec.model, mode=spec.mode.name, batch=spec.batch, seq=spec.seq, repeats=repeats
    )
    if seen is not None:
        document["over"] = str(seen.python)
    out.print(document["headline"], highlight=False, soft_wrap=True)
    write_results(
        opts.out, f"bench-{spec.model}-b{spec.batch}-s{spec.seq}-{before.manifest.release}-{after.manifest.release}", rows, document
    )
    return {**document, "rows": rows}, _code(rows)


def attribution_document(
    before, after, result: attr.Attribution, rows: list[dict], *, model: str, mode: str, batch: int, seq: int, repeats: int
) -> dict:
    """What --out's ``.attribution.json`` holds (release --results reads it): the two releases and
    their flavours, the setup, the headline, the steps each with its environment's versions."""
    steps = result.to_json()["steps"]
    for step in steps:  # what each step's environment held, so that a reader can rebuild it
        step["environment"] = next((r.get("environment") for r in rows if label_of(r) == step["step"]), None)
    return {
        "stack": after.manifest.stack,
        "previous_release": before.manifest.release,
        "release": after.manifest.release,
        "flavour": after.slug,
        "previous_flavour": before.slug,
        "model": model,
        "mode": mode,
        "batch": batch,
        "seq": seq,
        "repeats": repeats,
        "headline": attr.headline(result),
        **result.to_json(),
        "steps": steps,
    }
