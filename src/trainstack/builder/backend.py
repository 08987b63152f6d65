"""The one interface every build backend implements, and what a backend is given."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from trainstack.builder.record import ExtensionRecord
from trainstack.builder.steps import Steps
from trainstack.lock.inputs import Inputs
from trainstack.lock.layers import FlavourLayers


@dataclass(frozen=True)
class BuildJob:
    inputs: Inputs
    layers: FlavourLayers
    staging: Path  # the new build is assembled here ...
    final: Path  # ... and swapped in here when every step succeeded
    skip_sources: bool
    ca_bundle: str | None
    cpus: float
    max_jobs: dict[str, int] = field(default_factory=dict)


@dataclass
class BuildOutput:
    sizes: dict[str, int] = field(default_factory=dict)
    image: str | None = None
    image_id: str | None = None
    image_digest: str | None = None  # sha256:... of the image's manifest, what a cluster pins
    layers: list[str] = field(default_factory=list)
    extensions: dict[str, ExtensionRecord] = field(default_factory=dict)  # compiled source builds


class Backend(Protocol):
    name: str

    def tools(self) -> dict[str, str]:
        """Versions of the external programs this backend runs (checked present first)."""
        ...

    def build(self, job: BuildJob, steps: Steps) -> BuildOutput:
        """Build ``job`` into ``job.staging``; raise a TrainstackError on failure."""
        ...
