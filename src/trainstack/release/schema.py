"""The release notes as data: what release.json holds and both writers render. Pure data."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, computed_field

SCHEMA_VERSION = 1
FIGURE_MAX = 1e15  # no measured figure (tokens/s, GiB, MFU) comes near it; beyond it a figure is not one

ChangeKind = Literal["changed", "upgraded", "downgraded", "added", "removed"]


class Frozen(BaseModel):
    # extra="ignore": release.json also carries the computed fields (kind, delta_percent)
    model_config = ConfigDict(extra="ignore", frozen=True)


class Change(Frozen):
    """One package between two releases; versions of git sources are 7-hex commits."""

    name: str
    old: str | None = None  # None: added
    new: str | None = None  # None: removed
    component: bool = False  # declared in the stack (not only a dependency of one)
    # between two versions: upgraded or downgraded; changed when they don't compare (commits)
    direction: Literal["changed", "upgraded", "downgraded"] = "changed"

    @computed_field  # type: ignore[prop-decorator]  # pydantic's computed_field over a property, as pydantic documents it
    @property
    def kind(self) -> ChangeKind:
        if self.old is None:
            return "added"
        if self.new is None:
            return "removed"
        return self.direction

    def text(self) -> str:
        """'torch: 2.2.2 → 2.3.0', 'torch: 2.3.0 → 2.2.2 (downgraded)', 'apex: 2386a91 → a7de60e',
        'einops: added 0.8.1', 'apex: removed (was a7de60e)'."""
        if self.old is None:
            return f"{self.name}: added {self.new}"
        if self.new is None:
            return f"{self.name}: removed (was {self.old})"
        mark = " (downgraded)" if self.direction == "downgraded" else ""
        return f"{self.name}: {self.old} → {self.new}{mark}"


class Updates(Frozen):
    """Changes shared by every flavour once, then what only some flavours changed."""

    common: list[Change] = []
    per_flavour: dict[str, list[Change]] = {}  # slug -> changes not in ``common``
    added_flavours: list[str] = []
    removed_flavours: list[str] = []
    # a flavour that carries on under another slug (a CUDA, OS or Python move): new slug -> old slug
    followed: dict[str, str] = {}
    moves: dict[str, list[str]] = {}  # new slug -> 'CUDA 12.4 → 12.6', one line per axis that moved
    # new slug -> base image and build settings that changed ("base image", "deepspeed.DS_BUILD_OPS")
    settings: dict[str, list[Change]] = {}
    image: Change | None = None  # the image renamed (registry/name), old -> new; None: the same

    @property
    def empty(self) -> bool:
        return not (
            self.common
            or any(self.per_flavour.values())
            or self.added_flavours
            or self.removed_flavours
            or self.followed
            or self.settings
            or self.image
        )

    def groups(self) -> list[tuple[list[str], list[Change]]]:
        """Flavours with the same non-empty changes together: (slugs, changes), in slug order."""
        found: dict[tuple[Change, ...], list[str]] = {}
        for slug, changes in self.per_flavour.items():
            if changes:
                found.setdefault(tuple(changes), []).append(slug)
        return [(slugs, list(changes)) for changes, slugs in found.items()]


class FlavourImage(Frozen):
    slug: str
    cuda: str
    os: str
    python: str
    channel: str
    image: str  # registry/image:tag
    cache_key: str


class ComponentVersions(Frozen):
    """The version table: each declared component's version ('' when absent) per column, where a
    column is a group of flavours whose versions are all the same."""

    columns: list[list[str]]  # flavour slugs of each column
    rows: dict[str, list[str]]  # component -> one version per column


class DriverRequirement(Frozen):
    slug: str
    cuda: str
    min_driver: str | None  # None: no GPU driver needed (cpu) or not in the rules
    note: str  # "CPU only", "CUDA 12.8", or why it is unknown
    source: str | None = None  # where the rule comes from


class KnownIssue(Frozen):
    title: str
    link: str | None = None


class ExcludedTest(Frozen):
    test: str  # a test the suite's exclude list kept from running
    reason: str


class FailedTest(Frozen):
    suite: str
    test: str  # a test still failing after its rerun, not accepted by the known-issues file
    reason: str  # why it failed, one line as pytest's short summary gives it ('' where none was recorded)


class Verification(Frozen):
    slug: str
    measured: bool  # False: no verify result was found for this flavour
    verdict: str | None = None
    reasons: list[str] = []  # why the verdict is "fail", one line each
    not_built: list[str] = []  # components the build left out (build --skip-sources): verdict "not built"
    tests_run: int | None = None
    tests_failed: int | None = None
    tests_allowed: int | None = None  # failures the known-issues file accepts
    known_issues: list[KnownIssue] = []
    excluded: list[ExcludedTest] = []  # tests not run: the stack's suites exclude them, each for its reason
    failures: list[FailedTest] = []  # tests that failed the gate, each with why
    source: str | None = None  # the file it was read from, relative to the results directory


class BenchRow(Frozen):
    slug: str
    model: str
    setup: str = ""  # "b4 s4096", "b4 s4096 x8 GPUs": results compare only within one setup
    mode: str
    status: str = "ok"  # the bench's own status: "ok", "oom", "unavailable", ...
    tokens_per_s: float | None = None  # per GPU; None unless status is ok
    previous_tokens_per_s: float | None = None  # None: not measured in the previous release
    mfu: float | None = None  # a fraction of the GPU's peak
    peak_memory_gib: float | None = None

    @computed_field  # type: ignore[prop-decorator]  # pydantic's computed_field over a property, as pydantic documents it
    @property
    def delta_percent(self) -> float | None:
        if not self.previous_tokens_per_s or self.tokens_per_s is None:
            return None
        delta = (self.tokens_per_s / self.previous_tokens_per_s - 1.0) * 100.0
        return delta if math.isfinite(delta) else None  # against a figure as small as 5e-324: no change to show


class AttributionStep(Frozen):
    """One step of a speed change's attribution (bench --attribute): base, +torch, +transformers, ..."""

    step: str
    changed: str = ""  # "torch 2.5.1 → 2.7.0; nvidia-cublas-cu12 ..." (empty for the base)
    headline: str = ""  # what the step is called in the headline: "torch 2.5.1 → 2.7.0 (+12 more)"
    note: str = ""  # why the step is coarser than asked (uv's reason for the finer one)
    median: float | None = None  # tokens/s per GPU, median of the repeats
    repeats: int = 0
    spread: float = 0.0  # max / min - 1 of the repeats
    change: float | None = None  # against the step before (0.05: +5%)
    contribution: float | None = None  # points of the base's figure; the steps' add up to the total
    share: float | None = None  # of the end-to-end change; None where that is within noise
    confidence: str = ""  # "clear", "above noise", "within noise", ...


class Attribution(Frozen):
    """A release's speed change attributed to its components, as bench --attribute measured it."""

    slug: str
    model: str
    setup: str
    mode: str
    previous_release: str
    release: str
    noise_floor: float
    total_change: float | None = None
    total_confidence: str = ""
    steps: list[AttributionStep]
    unresolved: list[str] = []  # finer steps uv could not resolve, with its reason

    @computed_field  # type: ignore[prop-decorator]  # pydantic's computed_field over a property, as pydantic documents it
    @property
    def headline(self) -> str:
        """'training throughput +6.1% (torch 2.5.1 → 2.7.0: +5.2%; transformers ...: +0.9%, within noise)'."""
        if self.total_change is None:
            return "training throughput: not measured"
        parts = [
            f"{s.headline or s.step}: "
            + (
                f"{s.contribution * 100:+.1f}%" + (", within noise" if s.confidence == "within noise" else "")
                if s.contribution is not None
                else "not measured"
            )
            for s in self.steps[1:]
        ]
        noise = ", within noise" if self.total_confidence == "within noise" else ""
        return f"training throughput {self.total_change * 100:+.1f}%{noise}" + (f" ({'; '.join(parts)})" if parts else "")


FragmentType = Literal["highlight", "stability", "fix", "perf", "known-issue"]

# file-name suffix -> section title, in the order the sections appear
SECTIONS: dict[str, str] = {
    "highlight": "Highlights",
    "stability": "Stability",
    "fix": "Fixes",
    "perf": "Performance notes",
    "known-issue": "Known issues",
}


class Fragment(Frozen):
    name: str  # file name, e.g. "123.fix.md"
    type: FragmentType
    text: str  # Markdown, stripped
    none: bool = False  # the fragment said 'none': its section has nothing this release (text "None.")


class Advisory(Frozen):
    """An OSV advisory that affects a locked package of a flavour."""

    id: str
    aliases: list[str] = []
    package: str
    version: str
    severity: str
    summary: str = ""
    fixed: list[str] = []


class FlavourAdvisories(Frozen):
    """Per flavour: the advisories this release fixed, added and still has, against the previous one."""

    slug: str
    fixed: list[Advisory]  # affected the previous release's lock, not this one's
    added: list[Advisory]  # affect this release's lock, not the previous one's
    remaining: list[Advisory]  # affect both


class QuickStart(Frozen):
    slug: str
    commands: list[str]


class ReleaseNotes(Frozen):
    schema_version: int = SCHEMA_VERSION
    stack: str
    release: str
    previous_release: str | None = None  # None: the stack's first release
    description: str = ""
    image: str
    updates: Updates
    versions: ComponentVersions
    flavours: list[FlavourImage]
    drivers: list[DriverRequirement]
    verification: list[Verification]
    performance: list[BenchRow]  # empty: not measured
    attribution: list[Attribution] = []  # the speed change between the releases, per component (bench --attribute)
    fragments: list[Fragment]
    quick_start: list[QuickStart]
    advisories: list[FlavourAdvisories] = []  # with an OSV folder: the security advisories per flavour
    advisories_read: int | None = None  # how many advisories the folder held (None: none given)

    @property
    def title(self) -> str:
        return f"{self.stack} {self.release}"

    def sections(self) -> dict[str, list[Fragment]]:
        """Section title -> its fragments, only the sections that have some, in SECTIONS order."""
        found: dict[str, list[Fragment]] = {}
        for kind, title in SECTIONS.items():
            items = [f for f in self.fragments if f.type == kind]
            if items:
                found[title] = items
        return found
