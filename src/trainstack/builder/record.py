"""build.json: what a build did, how long each step took, what it produced, with which tools;
and the key a compiled extension's wheel is cached and resumed under."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from pydantic import BaseModel, ConfigDict

SCHEMA_VERSION = 1


class StepRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    seconds: float
    status: str  # "ok" | "skipped"
    log: str | None = None  # relative to the flavour's build directory
    free_disk_gb: float | None = None  # measured right before a compile step
    detail: str = ""


class ExtensionRecord(BaseModel):
    """One compiled extension: its wheel cache key, hit or miss, how long it compiled."""

    model_config = ConfigDict(extra="forbid")

    key: str
    cache: str  # "hit" | "miss" | "off" (a local path source: never cached)
    compile_seconds: float  # 0.0 on a hit: nothing compiled
    ccache_hit_rate: float | None  # None: no compiler cache, or nothing went through it
    wheel: str
    wheel_bytes: int
    units: int | None = None  # ninja's compile units (None: not built through ninja, or a cache hit)
    units_resumed: int | None = None  # of them, compiled by an earlier, interrupted run
    unit_seconds: float | None = None  # the units' compile seconds in ninja's log, earlier runs' included


class BuildRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    stack: str
    release: str
    flavour: str
    backend: str
    cache_key: str
    lock_sha256: str
    started_at: str
    finished_at: str
    seconds: float
    cpus: float  # cgroup-aware effective CPU count
    max_jobs: dict[str, int]  # source component -> MAX_JOBS used
    skipped_sources: list[str]
    steps: list[StepRecord]
    sizes: dict[str, int]  # "venv" or "image" -> bytes
    tools: dict[str, str]  # program -> version
    image: str | None = None
    image_id: str | None = None
    image_digest: str | None = None  # the manifest's sha256 digest: `render --cluster` pins the image by it
    layers: list[str] = []  # diff ids, base first
    extensions: dict[str, ExtensionRecord] = {}  # source component -> its compiled wheel


@dataclass(frozen=True)
class ExtensionKey:
    package: str
    version: str  # the locked version, or the git commit
    torch: str
    cuda: str
    archs: str  # the arch variables the build saw
    toolchain: tuple[tuple[str, str], ...]  # the toolchain layer's pins
    build_env: tuple[tuple[str, str], ...]
    python: str

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:24]
