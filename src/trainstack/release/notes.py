"""Assemble ReleaseNotes from manifests, results, rules and fragments. Pure: no files, no processes."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from trainstack.attest.advisories import Advisory as OsvAdvisory
from trainstack.attest.advisories import findings
from trainstack.errors import UsageError
from trainstack.lock.manifest import Manifest
from trainstack.release.diff import component_versions, diff_manifests, first_release
from trainstack.release.results import BenchKey, BenchResult
from trainstack.release.schema import (
    Advisory,
    Attribution,
    BenchRow,
    DriverRequirement,
    FlavourAdvisories,
    FlavourImage,
    Fragment,
    QuickStart,
    ReleaseNotes,
    Verification,
)
from trainstack.rules import Rules, shipped_rules


@dataclass(frozen=True)
class MinDriver:
    version: str  # "570.26"
    source: str | None = None  # the rule's source link


# CUDA version ("12.8") -> the rules' minimum driver, or None when the rules do not know it
DriverLookup = Callable[[str], MinDriver | None]


def check_same_stack(previous: Manifest, current: Manifest, previous_name: str) -> None:
    """Refuse a previous manifest of another stack, or of this very release, with the reason."""
    if previous.stack != current.stack:
        raise UsageError(
            f"{previous_name}: the previous manifest is of stack '{previous.stack}', not '{current.stack}'; "
            f"notes compare two releases of one stack",
            hint=f"pass the stack.lock.json of an earlier '{current.stack}' release",
        )
    if previous.release == current.release:
        raise UsageError(
            f"{previous_name}: the previous manifest is of release {previous.release}, the release being described",
            hint=f"pass the stack.lock.json of the '{current.stack}' release before {current.release}",
        )


def image_tag(manifest: Manifest, slug: str) -> str:
    """registry/image:<release>-<flavour slug>: the tag of a stack without [stack] tag."""
    return f"{manifest.image}:{manifest.release}-{slug}"


def flavour_images(manifest: Manifest, images: dict[str, str] | None = None) -> list[FlavourImage]:
    """``images``: slug -> the image its build is tagged with ([stack] tag); the default tag for others."""
    images = images or {}
    return [
        FlavourImage(
            slug=slug,
            cuda=f.cuda,
            os=f.os,
            python=f.python,
            channel=f.channel,
            image=images.get(slug) or image_tag(manifest, slug),
            cache_key=f.cache_key,
        )
        for slug, f in sorted(manifest.flavours.items())
    ]


def driver_requirements(manifest: Manifest, lookup: DriverLookup) -> list[DriverRequirement]:
    found = []
    for slug, flavour in sorted(manifest.flavours.items()):
        if flavour.cuda == "cpu":
            found.append(DriverRequirement(slug=slug, cuda="cpu", min_driver=None, note="CPU only: no GPU driver needed"))
            continue
        rule = lookup(flavour.cuda)
        if rule is None:
            found.append(
                DriverRequirement(slug=slug, cuda=flavour.cuda, min_driver=None, note=f"CUDA {flavour.cuda} is not in the rules: not known")
            )
        else:
            found.append(
                DriverRequirement(slug=slug, cuda=flavour.cuda, min_driver=rule.version, note=f"CUDA {flavour.cuda}", source=rule.source)
            )
    return found


def performance(current: Mapping[BenchKey, BenchResult], previous: Mapping[BenchKey, BenchResult]) -> list[BenchRow]:
    """Current bench results with the previous release's figure for the same flavour, model, setup and mode."""
    rows = []
    for key, result in current.items():  # in the order the bench recorded them
        before = previous.get(key)
        rows.append(
            BenchRow(
                slug=result.slug,
                model=result.model,
                setup=result.setup,
                mode=result.mode,
                status=result.status,
                tokens_per_s=result.tokens_per_s,
                previous_tokens_per_s=before.tokens_per_s if before else None,
                mfu=result.mfu,
                peak_memory_gib=result.peak_memory_gib,
            )
        )
    return rows


def quick_start(images: list[FlavourImage], components: Collection[str], built: Built | None = None) -> list[QuickStart]:
    """Per flavour, what was built: pull, then run a first command in the image (torch's view
    of the GPU where torch is shipped); or activate the venv and run it there. ``built``: None
    when not known (every flavour's image is shown); else a flavour with no build record shows
    its image only where the stack ships images ([build] backend = "oci"), and none otherwise."""
    check = (
        "python -c 'import torch; print(torch.__version__, torch.cuda.is_available())'"
        if "torch" in components
        else "python -c 'import sys; print(sys.version)'"
    )
    found = []
    for image in images:
        kinds = built.records.get(image.slug, frozenset()) if built is not None else frozenset({"oci"})
        if "oci" in kinds or (not kinds and built is not None and built.backend == "oci"):
            gpus = "" if image.cuda == "cpu" else " --gpus all"
            found.append(
                QuickStart(
                    slug=image.slug,
                    commands=[
                        f"docker pull {image.image}",
                        f"docker run --rm -it{gpus} --ipc=host {image.image} {check}",
                    ],
                )
            )
        elif "venv" in kinds and built is not None:
            found.append(QuickStart(slug=image.slug, commands=[f". {built.folder}/{image.slug}/venv/bin/activate", check]))
    return found


@dataclass(frozen=True)
class Built:
    """What the results folder's build records say was built: slug -> {"venv", "oci"}."""

    records: Mapping[str, frozenset[str]]
    backend: str = "venv"  # the stack's [build] backend: what a flavour with no record was meant to be
    folder: str = "build"  # the results folder as given, for the venv's activation line


@dataclass(frozen=True)
class Inputs:
    """Everything the notes are made of, already read and validated."""

    current: Manifest
    previous: Manifest | None  # None: the stack's first release
    components: Collection[str]  # canonical names declared in the stack
    description: str
    verification: list[Verification]
    bench: Mapping[BenchKey, BenchResult]
    previous_bench: Mapping[BenchKey, BenchResult]
    fragments: list[Fragment]
    rules: Rules = field(default_factory=shipped_rules)  # the stack's rules in effect
    images: dict[str, str] = field(default_factory=dict)  # slug -> image:tag from [stack] tag
    advisories: list[OsvAdvisory] | None = None  # an OSV folder's advisories (None: none given)
    built: Built | None = None  # the build records found beside the results; None: not looked for
    attribution: list[Attribution] = field(default_factory=list)  # bench --attribute's results into this release


def make_notes(inputs: Inputs, drivers: DriverLookup) -> ReleaseNotes:
    current = inputs.current
    images = flavour_images(current, inputs.images)
    return ReleaseNotes(
        stack=current.stack,
        release=current.release,
        previous_release=inputs.previous.release if inputs.previous else None,
        description=inputs.description,
        image=current.image,
        updates=(
            diff_manifests(inputs.previous, current, inputs.components) if inputs.previous else first_release(current, inputs.components)
        ),
        versions=component_versions(current, inputs.components),
        flavours=images,
        drivers=driver_requirements(current, drivers),
        verification=inputs.verification,
        performance=performance(inputs.bench, inputs.previous_bench),
        attribution=[a for a in inputs.attribution if not a.slug or a.slug in current.flavours],
        fragments=inputs.fragments,
        quick_start=quick_start(images, inputs.components, inputs.built),
        advisories=advisory_changes(inputs.current, inputs.previous, inputs.advisories or []) if inputs.advisories is not None else [],
        advisories_read=len(inputs.advisories) if inputs.advisories is not None else None,
    )


def advisory_changes(current: Manifest, previous: Manifest | None, advisories: list[OsvAdvisory]) -> list[FlavourAdvisories]:
    """Per flavour of this release: the advisories fixed since the previous release's lock of that
    flavour (or, for a flavour new in this release, none), added, and remaining."""
    found = []
    for slug, flavour in sorted(current.flavours.items()):
        now = {(f.package, f.id): Advisory(**f.model_dump()) for f in findings(advisories, flavour.packages)}
        before_flavour = previous.flavours.get(slug) if previous is not None else None
        before = (
            {(f.package, f.id): Advisory(**f.model_dump()) for f in findings(advisories, before_flavour.packages)}
            if before_flavour is not None
            else {}
        )
        found.append(
            FlavourAdvisories(
                slug=slug,
                fixed=[before[k] for k in sorted(set(before) - set(now))],
                added=[now[k] for k in sorted(set(now) - set(before))] if before_flavour is not None else [],
                remaining=[now[k] for k in sorted(set(now) & set(before))] if before_flavour is not None else [now[k] for k in sorted(now)],
            )
        )
    return found
