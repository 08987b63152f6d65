"""The op table: for DeepSpeed ops, apex, flash-attn, Transformer Engine, xformers and
triton: installed (built ahead of time, and its shared object loads), compatible (could be
JIT-built or run here; not judged, and said so, for a GPU op on a machine without a GPU), and
why not. Facts come from the target (ops_probe.py); reasons from the rules data."""

from __future__ import annotations

import json
import re
import sys
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel

from trainstack.lock.layers import needs_build
from trainstack.rules import Rules, shipped_rules
from trainstack.stackfile.schema import Stack
from trainstack.verify.fatbin import fatbin_archs
from trainstack.verify.report_schema import NOT_FOUND
from trainstack.verify.target import Target, run_probe

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only: tomllib is in the standard library from 3.11
    import tomli as tomllib

# terminal colour and cursor codes some tools print (DeepSpeed's [WARNING] and [OKAY] lines)
ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
MISSING_LIB_RE = re.compile(r"(lib[\w.+-]+\.so[\w.]*): cannot open shared object file")


class OpRow(BaseModel):
    package: str
    name: str
    installed: bool
    compatible: bool | None  # None: could not be judged
    why_not: str  # "" when installed and compatible
    archs: list[str] = []  # GPU code compiled in: sm_90, compute_90 (read from the ELF's .nv_fatbin)
    # recorded as built ahead of time, yet its shared object does not load: why (installed is then False)
    load_error: str = ""


class OpTable(BaseModel):
    rows: list[OpRow]
    absent: list[str]  # known extension packages that are not installed
    error: str = ""  # why the probe gave nothing
    unbuilt: list[str] = []  # ops the stack builds ahead of time that are not there, with the reason

    @property
    def broken(self) -> list[OpRow]:
        """Built ahead of time yet unusable here (or recorded as built and not loading): these fail the gate."""
        return [r for r in self.rows if (r.installed and r.compatible is False) or r.load_error]


@lru_cache(maxsize=1)
def ops_data() -> dict[str, Any]:
    text = resources.files("trainstack.verify").joinpath("data/ops.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def op_table(
    target: Target,
    wanted: dict[str, dict[str, str]] | None = None,
    rules: Rules | None = None,
    accelerator: str | None = None,
) -> OpTable:
    """``wanted``: the source-built extensions of the stack and their build_env (prebuilt_wanted);
    ``rules``: the stack's rules in effect (the shipped ones without a stack); ``accelerator``:
    the one the flavour targets ('cuda' for a CUDA flavour), so that DeepSpeed judges its ops for
    that accelerator and not for the host's (a CUDA image verified on a machine without a GPU
    would otherwise be judged under DeepSpeed's CPU accelerator)."""
    env = {"DS_ACCELERATOR": accelerator} if accelerator else None
    raw, reason = run_probe(target, "ops_probe.py", [json.dumps(ops_data())], timeout=600, env=env)
    if not isinstance(raw, dict):
        return OpTable(rows=[], absent=[], error=reason)
    return build_table(raw, rules).model_copy(update={"unbuilt": unbuilt(raw, wanted or {})})


def prebuilt_wanted(stack: Stack | None, component_keys: list[str]) -> dict[str, dict[str, str]]:
    """The extensions the stack builds from source, with their build_env: what must be prebuilt."""
    if stack is None:
        return {}
    keys = set(component_keys) or set(stack.components)
    return {c.name: dict(c.build_env) for key, c in stack.components.items() if key in keys and needs_build(c)}


def unbuilt(raw: dict[str, Any], wanted: dict[str, dict[str, str]]) -> list[str]:
    """One line per op the stack asked to build ahead of time that the target does not have."""
    reasons = []
    if "deepspeed" in wanted:
        reasons += _deepspeed_unbuilt(raw.get("deepspeed"), wanted["deepspeed"])
    for ext in raw.get("extensions", []):
        env = wanted.get(ext["name"])
        if env is None or (ext["name"] == "apex" and "1" not in (env.get("APEX_CPP_EXT"), env.get("APEX_CUDA_EXT"))):
            continue
        if ext.get("version") is None:
            reasons.append(f"{ext['name']}: the stack builds it from source but it is not installed")
        elif not any(m["present"] for m in ext["modules"]):
            reasons.append(
                f"{ext['name']} {ext['version']}: installed without its compiled modules ({', '.join(m['module'] for m in ext['modules'])})"
            )
    return reasons


def _deepspeed_unbuilt(ds: dict[str, Any] | None, env: dict[str, str]) -> list[str]:
    if ds is None:
        return ["deepspeed: the stack builds it from source but it is not installed"]
    everything = env.get("DS_BUILD_OPS") == "1"
    reasons = []
    for op in ds.get("ops", []):
        var = op.get("build_var", "")
        asked = env.get(var) == "1" or (everything and env.get(var) != "0" and op.get("compatible_at_build", True))
        if asked and not op["installed"]:
            how = f"{var}=1" if env.get(var) == "1" else "DS_BUILD_OPS=1"
            reasons.append(f"deepspeed op {op['name']}: the stack builds it ahead of time ({how}) but it is not installed")
    return reasons


def build_table(raw: dict[str, Any], rules: Rules | None = None) -> OpTable:
    rules = rules or shipped_rules()
    """Pure: the probe's facts plus the rules -> rows."""
    torch = raw.get("torch") or {}
    rows: list[OpRow] = []
    absent: list[str] = []
    deepspeed = raw.get("deepspeed")
    if deepspeed is None:
        absent.append("deepspeed")
    else:
        rows += deepspeed_rows(deepspeed, torch, rules)
    specs = {ext["name"]: ext for ext in ops_data()["extension"]}
    for ext in raw.get("extensions", []):
        if ext.get("version") is None:
            absent.append(ext["name"])
            continue
        rows += extension_rows(ext, specs[ext["name"]], torch, rules)
    return OpTable(rows=rows, absent=absent)


def deepspeed_rows(ds: dict[str, Any], torch: dict[str, Any], rules: Rules | None = None) -> list[OpRow]:
    rules = rules or shipped_rules()
    if ds.get("error"):
        return [OpRow(package="deepspeed", name="(op builders)", installed=False, compatible=False, why_not=ds["error"])]
    mismatch = _cuda_mismatch(ds.get("torch_info") or {}, torch)
    given = ds.get("report")
    report: dict = given if isinstance(given, dict) and "error" not in given else {}
    rows = []
    for op in ds.get("ops", []):
        why = _ds_rule_reason(rules, op["name"], torch.get("version")) or op["why"]
        installed, compatible = op["installed"], op["compatible"]
        if op["name"] in report:  # ds_report's own [YES]/[NO] and [OKAY]/[NO]
            installed, compatible = report[op["name"]][0] == "YES", report[op["name"]][1] == "OKAY"
        load_error = " ".join(ANSI_RE.sub("", op.get("load_error") or "").split()) if installed else ""
        if load_error:  # DeepSpeed's record (and ds_report) say built; installed means it loads
            installed, compatible = False, False
            why = f"recorded as built ahead of time, but it does not load ({load_error})"
        elif installed and mismatch:
            why, compatible = mismatch, False
        why = " ".join(ANSI_RE.sub("", why).split())
        if compatible and _not_run_here(ds, torch):
            compatible = None
            why = "built ahead of time and loads; not run: no GPU" if installed else "JIT dependencies present; not run: no GPU"
        rows.append(
            OpRow(
                package="deepspeed",
                name=op["name"],
                installed=installed,
                compatible=compatible,
                why_not="" if compatible else why or "the op builder says it cannot build here",
                archs=_archs(op.get("files") or []),
                load_error=load_error,
            )
        )
    return rows


def _not_run_here(ds: dict[str, Any], torch: dict[str, Any]) -> bool:
    """DeepSpeed's 'compatible' of a GPU accelerator's op means its JIT build's dependencies are
    there (DeepSpeed's own meaning), not that it runs: on a machine whose torch sees no GPU it is
    not judged."""
    accelerator = ds.get("accelerator")
    return bool(accelerator) and accelerator != "cpu" and bool(torch) and not torch.get("error") and not torch.get("capabilities")


def _archs(files: list[str]) -> list[str]:
    """GPU architectures compiled into the objects (on this machine's file system; [] elsewhere)."""
    found: list[str] = []
    for name in files:
        archs = fatbin_archs(Path(name)) if name else None
        found += [a for a in (archs.labels if archs else []) if a not in found]
    return found


def _cuda_mismatch(built: dict[str, Any], torch: dict[str, Any]) -> str:
    """DeepSpeed's ahead-of-time ops carry the torch and CUDA they were compiled with."""
    cuda_built, cuda_now = str(built.get("cuda") or ""), str(torch.get("cuda") or "")
    if cuda_built and cuda_now and cuda_built not in ("0.0", "None") and _major_minor(cuda_built) != _major_minor(cuda_now):
        return f"CUDA mismatch: ops built with CUDA {cuda_built}, torch runs CUDA {cuda_now}"
    torch_built, torch_now = str(built.get("version") or ""), str(torch.get("version") or "")
    if torch_built and torch_now and _major_minor(torch_built) != _major_minor(torch_now):
        return f"torch mismatch: ops built with torch {torch_built}, torch is {torch_now}"
    return ""


def _major_minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def _ds_rule_reason(rules: Rules, op: str, torch_version: str | None) -> str:
    """The rules' torch range for a DeepSpeed op (trainstack.rules, extensions.toml)."""
    rule = rules.extensions.deepspeed.ops.get(op)
    if rule is None or rule.torch is None or not torch_version:
        return ""
    try:
        inside = Version(torch_version.split("+")[0]) in SpecifierSet(rule.torch)
    except InvalidVersion:
        return ""
    return "" if inside else f"torch range: needs torch {rule.torch}, found {torch_version} ({rule.source})"


def extension_rows(ext: dict[str, Any], spec: dict[str, Any], torch: dict[str, Any], rules: Rules | None = None) -> list[OpRow]:
    rules = rules or shipped_rules()
    rows = []
    present = [m for m in ext["modules"] if m["present"]]
    if not present:
        return [
            OpRow(
                package=ext["name"],
                name=ext["name"],
                installed=False,
                compatible=None,
                why_not=f"{ext['name']} {ext['version']} has none of its compiled modules",
            )
        ]
    for module in present:
        why = _import_reason(ANSI_RE.sub("", module["error"])) if module["error"] else ""
        why = why or _hardware_reason(rules, spec, torch)
        compatible: bool | None = not why
        if why.startswith(("no GPU", "torch not")) and not module["error"]:
            compatible = None  # nothing wrong with the build; it just cannot run on this machine
        rows.append(
            OpRow(
                package=ext["name"],
                name=module["module"],
                installed=True,
                compatible=compatible,
                why_not=why,
                archs=_archs([module.get("file") or ""]),
            )
        )
    return rows


def _import_reason(error: str) -> str:
    missing = MISSING_LIB_RE.search(error)
    if missing:
        return f"missing library: {missing.group(1)}"
    if "undefined symbol" in error:
        return f"built against another torch (undefined symbol): {error}"
    return error


def _hardware_reason(rules: Rules, spec: dict[str, Any], torch: dict[str, Any]) -> str:
    if not spec.get("gpu"):
        return ""
    if not torch or torch.get("error"):
        return "torch not importable"
    if not torch.get("capabilities"):
        return "no GPU"
    rule = spec.get("min_arch_rule")
    if rule == "flash_attn":
        flash = rules.extensions.flash_attn
        old = [c for c in torch["capabilities"] if int(c) < int(flash.min_arch)]
        if old:
            return f"GPU arch too old: sm{old[0]} < sm{flash.min_arch} ({flash.message})"
    return ""


def render_value(value: bool | None, unknown: str = NOT_FOUND) -> str:
    return {True: "yes", False: "NO", None: unknown}[value]
