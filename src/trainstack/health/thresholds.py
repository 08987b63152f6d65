"""Thresholds per GPU model: the data file in this package, overlays, and the verdict of one limit."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any

import tomllib
from pydantic import BaseModel, ConfigDict, ValidationError

from trainstack.errors import SpecError
from trainstack.health.schema import Status

DATA_FILE = "thresholds.toml"


class Limit(BaseModel):
    model_config = ConfigDict(extra="forbid")

    warn_below: float | None = None
    critical_below: float | None = None
    warn_above: float | None = None
    critical_above: float | None = None

    def evaluate(self, value: float) -> Status:
        if _past(value, self.critical_below, self.critical_above):
            return Status.critical
        if _past(value, self.warn_below, self.warn_above):
            return Status.warn
        return Status.ok

    def describe(self) -> str:
        parts = [
            f"{op} {_fmt(bound)} {level}"
            for op, bound, level in (
                ("<", self.warn_below, "warn"),
                ("<", self.critical_below, "critical"),
                (">", self.warn_above, "warn"),
                (">", self.critical_above, "critical"),
            )
            if bound is not None
        ]
        return ", ".join(parts)


def _past(value: float, below: float | None, above: float | None) -> bool:
    return (below is not None and value < below) or (above is not None and value > above)


def _fmt(x: float) -> str:
    return f"{x:g}"


class Thresholds(BaseModel):
    """The limits in force for one node, after the model section and overrides are laid over."""

    model_config = ConfigDict(extra="forbid")

    profile: str = "default"
    min_driver: str | None = None
    nvlink_links: int | None = None
    shm_gib: Limit = Limit()
    disk_free_gib: Limit = Limit()
    temperature_c: Limit = Limit()
    ecc_volatile_uncorrected: Limit = Limit()
    ecc_aggregate_uncorrected: Limit = Limit()
    ecc_volatile_corrected: Limit = Limit()
    remapped_rows_uncorrectable: Limit = Limit()
    retired_pages: Limit = Limit()
    sm_clock_max_mhz: Limit = Limit()
    gemm_bf16_tflops: Limit = Limit()
    gemm_relative_error: Limit = Limit()
    copy_gbps: Limit = Limit()
    h2d_gbps: Limit = Limit()
    d2h_gbps: Limit = Limit()
    allreduce_busbw_gbps: Limit = Limit()
    sustained_gemm_tflops: Limit = Limit()
    sustained_gemm_ratio: Limit = Limit()


def load_thresholds(gpu_name: str | None, override: Path | None = None) -> Thresholds:
    """Limits for a GPU named ``gpu_name`` (NVML name), with ``override`` laid over them."""
    data = _parse(resources.files(__package__).joinpath(DATA_FILE).read_text("utf-8"), DATA_FILE)
    sources = [(DATA_FILE, data)]
    if override is not None:
        sources.append((str(override), _read(override)))
    merged: dict[str, Any] = {}
    profile = "default"
    for origin, doc in sources:
        _check_layout(doc, origin)
        merged = _overlay(merged, doc.get("default", {}))
        for name, section in doc.get("models", {}).items():
            if gpu_name is not None and re.search(section.get("match", "(?!)"), gpu_name):
                profile = name
                merged = _overlay(merged, {k: v for k, v in section.items() if k != "match"})
                break
    return _validate({**merged, "profile": profile}, override or Path(DATA_FILE))


def _read(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"{path}: cannot read thresholds file: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 text (byte {exc.start}); a thresholds file is TOML") from None
    return _parse(text, str(path))


def _parse(text: str, origin: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{origin}: not valid TOML: {exc}") from None


def _check_layout(doc: dict[str, Any], origin: str) -> None:
    unknown = sorted(set(doc) - {"default", "models"})
    if unknown:
        raise SpecError(f"{origin}: unknown top-level table '{unknown[0]}' (accepted: [default], [models.<name>])")
    for name, section in doc.get("models", {}).items():
        pattern = section.get("match")
        if not isinstance(pattern, str):
            raise SpecError(f'{origin}: [models.{name}] needs match = "<regular expression on the NVML name>"')
        try:
            re.compile(pattern)
        except re.error as exc:
            raise SpecError(f"{origin}: [models.{name}] match is not a regular expression: {exc}") from None


def _overlay(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def _validate(merged: dict[str, Any], origin: Path) -> Thresholds:
    try:
        return Thresholds.model_validate(merged)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise SpecError(
            f"{origin}: field '{field}': {first['msg']} "
            "(accepted: a table of warn_below, critical_below, warn_above, critical_above numbers)"
        ) from None
