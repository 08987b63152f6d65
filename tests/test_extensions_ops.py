"""The op table's judgement of prebuilt ops: what the stack asks to build ahead of time against
what the target has (DeepSpeed's own ds_report rows), and the GPU code read from the objects."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from trainstack.verify.fatbin import FATBIN_MAGIC, parse_fatbin
from trainstack.verify.ops import build_table, unbuilt

TORCH = {"version": "2.11.0+cu130", "cuda": "13.0", "capabilities": []}


def ds_op(name: str, var: str, installed: bool, compatible_at_build: bool = True) -> dict:
    return {"name": name, "installed": installed, "compatible_at_build": compatible_at_build, "compatible": True,
            "why": "", "build_var": var, "files": []}


def raw(ops: list[dict], report: dict | None = None, extensions: list[dict] | None = None) -> dict:
    return {"torch": TORCH, "extensions": extensions or [],
            "deepspeed": {"version": "0.18.9", "ops": ops, "torch_info": {"version": "2.11", "cuda": "13.0"},
                          "error": None, "report": report or {}}}


def test_an_op_the_stack_builds_ahead_of_time_must_be_installed() -> None:
    facts = raw([ds_op("fused_adam", "DS_BUILD_FUSED_ADAM", True), ds_op("fused_lamb", "DS_BUILD_FUSED_LAMB", False),
                 ds_op("cpu_adam", "DS_BUILD_CPU_ADAM", False)])
    env = {"DS_BUILD_OPS": "0", "DS_BUILD_FUSED_ADAM": "1", "DS_BUILD_FUSED_LAMB": "1"}
    assert unbuilt(facts, {"deepspeed": env}) == [
        "deepspeed op fused_lamb: the stack builds it ahead of time (DS_BUILD_FUSED_LAMB=1) but it is not installed"
    ]
    # DS_BUILD_OPS=1 asks for every op but those switched off or that could not build there
    facts = raw([ds_op("cpu_adam", "DS_BUILD_CPU_ADAM", False), ds_op("evoformer_attn", "DS_BUILD_EVOFORMER_ATTN", False, False),
                 ds_op("async_io", "DS_BUILD_AIO", False)])
    assert unbuilt(facts, {"deepspeed": {"DS_BUILD_OPS": "1", "DS_BUILD_AIO": "0"}}) == [
        "deepspeed op cpu_adam: the stack builds it ahead of time (DS_BUILD_OPS=1) but it is not installed"
    ]
    assert unbuilt(facts, {}) == []  # a stack without DeepSpeed asks for nothing


def test_source_built_extensions_without_their_compiled_modules() -> None:
    extensions = [
        {"name": "apex", "version": "0.1", "modules": [{"module": "amp_C", "present": False, "error": None}]},
        {"name": "flash-attn", "version": None, "modules": []},
    ]
    facts = {"torch": TORCH, "deepspeed": None, "extensions": extensions}
    reasons = unbuilt(facts, {"apex": {"APEX_CUDA_EXT": "1"}, "flash-attn": {}})
    assert reasons == ["apex 0.1: installed without its compiled modules (amp_C)",
                       "flash-attn: the stack builds it from source but it is not installed"]
    assert unbuilt(facts, {"apex": {}}) == []  # apex without its extensions is pure Python


def test_ds_report_rows_decide_installed_and_compatible() -> None:
    facts = raw([ds_op("fused_adam", "DS_BUILD_FUSED_ADAM", False)], report={"fused_adam": ["YES", "OKAY"]})
    [row] = build_table(facts).rows
    assert row.installed and row.compatible and row.why_not == ""


def test_fatbin_entries_name_their_architectures() -> None:
    def entry(kind: int, arch: int, payload: int) -> bytes:
        header = (kind.to_bytes(2, "little") + (1).to_bytes(2, "little") + (64).to_bytes(4, "little")
                  + payload.to_bytes(8, "little") + bytes(12) + arch.to_bytes(4, "little"))
        return header + bytes(64 - len(header)) + bytes(payload)

    body = entry(2, 80, 16) + entry(2, 90, 32) + entry(1, 90, 8)
    fat = FATBIN_MAGIC.to_bytes(4, "little") + (1).to_bytes(2, "little") + (16).to_bytes(2, "little") + len(body).to_bytes(8, "little")
    archs = parse_fatbin(fat + body + fat[:8])  # and a cut-off fat binary after it
    assert archs.sm == ("80", "90") and archs.ptx == ("90",) and archs.labels == ["sm_80", "sm_90", "compute_90"]
