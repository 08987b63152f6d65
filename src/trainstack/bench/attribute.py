"""The same bench across environments, and a release's speed change attributed to its components.

Pure: rows in, figures, steps and text out. An environment's figure is the median tokens/s of its
repeats (each a fresh process); the noise floor of a run is the largest spread of one
environment's repeats (max / min - 1), measured in that run. A change of a median is "within
noise" when its ratio is no further from 1 than that spread, both on a log scale (a halving and a
doubling are as far from 1).

Attribution, as the seeds' "E2E performance contribution analysis" tables do it: the environments
between two releases change one component group at a time (base, +A, +B, ...; the last is the new
release); each step's contribution is its change of the median in points of the base's, so the
contributions add up to the end-to-end change, and its share is its part of that change.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

# torch and what ships with it as one group: its CUDA libraries, triton, its domain libraries
TORCH_GROUP = re.compile(
    r"^(torch|torchvision|torchaudio|triton|pytorch-triton(-[a-z]+)?|nvidia-.+|cuda-(bindings|pathfinder|python|toolkit))\Z"
)
CLEAR = 2.0  # a change at least this many times the noise floor is "clear"
METRIC = "tokens_per_s_per_gpu"


@dataclass(frozen=True)
class Figures:
    """One environment's repeats: tokens/s of each repeat that measured."""

    label: str
    samples: tuple[float, ...]

    @property
    def median(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None

    @property
    def spread(self) -> float:
        """max / min - 1 of the repeats; 0 with fewer than two."""
        if len(self.samples) < 2:
            return 0.0
        return max(self.samples) / min(self.samples) - 1


def figures_of(rows: Iterable[dict], label_of) -> list[Figures]:
    """Each environment's figures, in the order the environments first appear in ``rows``."""
    samples: dict[str, list[float]] = {}
    for row in rows:
        values = samples.setdefault(label_of(row), [])
        value = row.get(METRIC)
        if row.get("status") == "ok" and isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
            values.append(float(value))
    return [Figures(label, tuple(values)) for label, values in samples.items()]


def noise_floor(figures: Sequence[Figures]) -> float:
    """The largest relative spread of one environment's repeats in this run."""
    return max((f.spread for f in figures), default=0.0)


@dataclass(frozen=True)
class Delta:
    """A relative change of a median (``change``: 0.05 is +5%) against the run's noise floor."""

    change: float
    noise: float

    @property
    def noise_multiple(self) -> float | None:
        """How many noise floors the change is, on a log scale; None when the floor is 0 (a
        single repeat measures no noise)."""
        if self.noise <= 0:
            return None
        return abs(math.log1p(self.change)) / math.log1p(self.noise) if self.change > -1 else math.inf

    @property
    def within_noise(self) -> bool:
        multiple = self.noise_multiple
        return multiple is not None and multiple <= 1

    @property
    def confidence(self) -> str:
        multiple = self.noise_multiple
        if multiple is None:
            return "no repeats"
        if multiple <= 1:
            return "within noise"
        return "clear" if multiple >= CLEAR else "above noise"


def against_first(figures: Sequence[Figures]) -> list[dict]:
    """Each environment's median against the first's, with the run's noise floor."""
    floor = noise_floor(figures)
    base = figures[0].median if figures else None
    table = []
    for index, f in enumerate(figures):
        delta = Delta(f.median / base - 1, floor) if base and f.median and index else None
        verdict = "baseline" if index == 0 else (delta.confidence if delta else "not measured")
        table.append(
            {
                "environment": f.label,
                "repeats": len(f.samples),
                "median": f.median,
                "spread": f.spread,
                "change": delta.change if delta else None,
                "confidence": verdict,
            }
        )
    return table


@dataclass(frozen=True)
class Change:
    """One package between two locks: None where it is absent from one."""

    name: str
    before: str | None
    after: str | None

    def text(self) -> str:
        if self.before is None:
            return f"{self.name} {self.after} (added)"
        if self.after is None:
            return f"{self.name} {self.before} (removed)"
        return f"{self.name} {self.before} → {self.after}"


@dataclass(frozen=True)
class Group:
    """Components that change in one step; ``note`` says why it is coarser than asked."""

    name: str
    changes: tuple[Change, ...]
    note: str | None = None

    def text(self) -> str:
        """'torch 2.5.1 → 2.7.0' (with '+N more' for what moves with it), for the headline."""
        if not self.changes:
            return self.name
        lead = next((c for c in self.changes if c.name in self.name.split("+")), self.changes[0])
        more = len(self.changes) - 1
        return lead.text() + (f" (+{more} more)" if more else "")


def changes_between(before: dict[str, str], after: dict[str, str]) -> list[Change]:
    """Every package whose version differs between two locks, by name."""
    return [
        Change(name, before.get(name), after.get(name)) for name in sorted(set(before) | set(after)) if before.get(name) != after.get(name)
    ]


def plan_groups(before: dict[str, str], after: dict[str, str], components: Iterable[str], order: Sequence[str] = ()) -> list[Group]:
    """The steps from ``before`` to ``after``: torch with its CUDA libraries first, then each changed
    component (``order``: names, '+' joining several into one group, in the order they are given;
    those it leaves out follow by name). A changed package that is neither moves in whichever step
    needs it (the last step, the new release itself, takes the rest). ValueError for a name of
    ``order`` that is no changed component."""
    changes = {c.name: c for c in changes_between(before, after)}
    torch = tuple(c for name, c in changes.items() if TORCH_GROUP.match(name))
    changed_components = [name for name in dict.fromkeys(components) if name in changes and not TORCH_GROUP.match(name)]
    groups: list[tuple[str, ...]] = []
    seen: set[str] = set()
    for entry in order:
        names = tuple(n.strip() for n in entry.split("+") if n.strip())
        for name in names:
            if name == "torch" and torch:
                continue
            if name not in changed_components or name in seen:
                accepted = ", ".join(["torch"] * bool(torch) + changed_components) or "none (nothing changed)"
                raise ValueError(f"'{name}' is no changed component{' (given twice)' if name in seen else ''}; accepted: {accepted}")
        seen.update(names)
        groups.append(names)
    groups += [(name,) for name in changed_components if name not in seen]
    torch_first = [] if not torch or any("torch" in g for g in groups) else [("torch",)]
    result = []
    for names in torch_first + groups:
        members = tuple(c for n in names for c in ((changes[n],) if n != "torch" else torch))
        result.append(Group("+".join(names), members))
    return result


def merged(first: Group, second: Group, note: str) -> Group:
    """Two adjacent groups as one step, with the reason the finer step could not be built."""
    return Group(f"{first.name}+{second.name}", first.changes + second.changes, note)


@dataclass(frozen=True)
class StepResult:
    group: Group | None  # None: the base
    figures: Figures
    delta: Delta | None = None  # against the previous measured step
    contribution: float | None = None  # points of the base's median
    share: float | None = None  # of the end-to-end change; None where that is within noise


@dataclass(frozen=True)
class Attribution:
    steps: tuple[StepResult, ...]
    noise: float
    total: Delta | None
    unresolved: tuple[str, ...] = field(default=())  # the finer steps that could not be built, with uv's reason

    def to_json(self) -> dict:
        return {
            "noise_floor": self.noise,
            "total_change": self.total.change if self.total else None,
            "total_confidence": self.total.confidence if self.total else "not measured",
            "unresolved": list(self.unresolved),
            "steps": [
                {
                    "step": "base" if s.group is None else f"+{s.group.name}",
                    "changes": [] if s.group is None else [{"name": c.name, "before": c.before, "after": c.after} for c in s.group.changes],
                    "note": None if s.group is None else s.group.note,
                    "repeats": list(s.figures.samples),
                    "median": s.figures.median,
                    "spread": s.figures.spread,
                    "change": s.delta.change if s.delta else None,
                    "contribution": s.contribution,
                    "share": s.share,
                    "confidence": s.delta.confidence if s.delta else ("base" if s.group is None else "not measured"),
                    "headline": None if s.group is None else s.group.text(),
                }
                for s in self.steps
            ],
        }


def attribute(groups: Sequence[Group], figures: Sequence[Figures], unresolved: Sequence[str] = ()) -> Attribution:
    """``figures``: the base's, then one per group in order. Each step is compared with the last
    step before it that measured; a step that measured nothing has no delta."""
    if len(figures) != len(groups) + 1:
        raise ValueError(f"{len(figures)} environments measured for {len(groups)} steps and a base")
    floor = noise_floor(figures)
    base = figures[0].median
    last = next((f.median for f in reversed(figures) if f.median), None)
    total = Delta(last / base - 1, floor) if base and last and len(figures) > 1 else None
    steps = [StepResult(None, figures[0])]
    previous = base
    for group, fig in zip(groups, figures[1:]):
        if not (previous and fig.median and base):
            steps.append(StepResult(group, fig))
            previous = fig.median or previous
            continue
        contribution = (fig.median - previous) / base
        share = contribution / total.change if total and not total.within_noise and total.change else None
        steps.append(StepResult(group, fig, Delta(fig.median / previous - 1, floor), contribution, share))
        previous = fig.median
    return Attribution(tuple(steps), floor, total, tuple(unresolved))


def percent(value: float) -> str:
    return f"{value * 100:+.1f}%"


def _group_text(step) -> str:
    """A step's component group as the notes name it (the base, which changes none: 'base')."""
    return step.group.text() if step.group is not None else "base"


def headline(attribution: Attribution, what: str = "training throughput") -> str:
    """'training throughput +6.1% (torch 2.5.1 → 2.7.0: +5.2%; transformers 4.46.2 → 5.0.0: +0.9%, within noise)'."""
    total = attribution.total
    if total is None:
        return f"{what}: not measured"
    parts = []
    for step in attribution.steps[1:]:
        if step.contribution is None or step.delta is None:
            parts.append(f"{_group_text(step)}: not measured")
            continue
        verdict = ", within noise" if step.delta.within_noise else ""
        parts.append(f"{_group_text(step)}: {percent(step.contribution)}{verdict}")
    noise = ", within noise" if total.within_noise else ""
    return f"{what} {percent(total.change)}{noise} ({'; '.join(parts)})" if parts else f"{what} {percent(total.change)}{noise}"


def table_rows(attribution: Attribution) -> list[list[str]]:
    """step, what changed, tokens/s (median of n), spread, change, contribution, share, confidence."""
    rows = []
    for step in attribution.steps:
        f = step.figures
        what = "base" if step.group is None else "; ".join(c.text() for c in step.group.changes) or step.group.name
        if step.group is not None and step.group.note:
            what += f" ({step.group.note})"
        rows.append(
            [
                "base" if step.group is None else f"+{step.group.name}",
                what,
                f"{f.median:,.1f} (n={len(f.samples)})" if f.median else "not measured",
                f"{f.spread * 100:.1f}%",
                percent(step.delta.change) if step.delta else "",
                percent(step.contribution) if step.contribution is not None else "",
                f"{step.share * 100:.0f}%" if step.share is not None else "",
                "base" if step.group is None else (step.delta.confidence if step.delta else "not measured"),
            ]
        )
    return rows


TABLE_HEADER = ["step", "what changed", "tokens/s", "spread", "change", "contribution", "share", "confidence"]


def markdown_table(attribution: Attribution) -> str:
    """The attribution as a Markdown table (each cell escaped by the caller's renderer where needed)."""

    def cell(text: str) -> str:
        return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(TABLE_HEADER) + " |", "|" + "---|" * len(TABLE_HEADER)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in table_rows(attribution)]
    return "\n".join(lines)
