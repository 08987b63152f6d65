"""Op facts from inside the target: ``PYTHON -I ops_probe.py '<json of data/ops.toml>'``.

Standalone. DeepSpeed's ops come from its own builders (ALL_OPS, is_compatible) and its
build record (git_version_info.installed_ops / compatible_ops / torch_info); other
packages' compiled modules are imported. Prints one JSON line.
"""

import contextlib
import glob
import importlib
import io
import json
import os
import re
import sys
from importlib import metadata, util


def _error(exc):
    text = str(exc).strip().splitlines()
    return "%s: %s" % (type(exc).__name__, text[0][:300] if text else "")


def _version(dist):
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def deepspeed_ops():
    if _version("deepspeed") is None:
        return None
    out = {"version": _version("deepspeed"), "ops": [], "torch_info": None, "error": None}
    try:
        from deepspeed.git_version_info import compatible_ops, installed_ops, torch_info
        from deepspeed.ops.op_builder.all_ops import ALL_OPS
    except Exception as exc:  # noqa: BLE001 - an older or broken DeepSpeed: what it raises is the finding
        out["error"] = _error(exc)
        return out
    out["torch_info"] = dict(torch_info)
    out["accelerator"] = accelerator_name()
    for name, builder in sorted(ALL_OPS.items()):
        captured = io.StringIO()
        try:
            with contextlib.redirect_stdout(captured):
                compatible = bool(builder.is_compatible(verbose=True))
            why = ANSI.sub("", captured.getvalue()).replace("[WARNING]", "").strip() or getattr(builder, "error_log", None) or ""
        except Exception as exc:  # noqa: BLE001 - a builder's failed check is the op's reason, in its row
            compatible, why = False, _error(exc)
        why = ANSI.sub("", str(why))
        installed = bool(installed_ops.get(name, False))
        out["ops"].append(
            {
                "name": name,
                "installed": installed,
                "load_error": load_error(builder) if installed else None,
                "compatible_at_build": bool(compatible_ops.get(name, False)),
                "compatible": compatible,
                "why": " ".join(why.split())[:400],
                "build_var": getattr(builder, "BUILD_VAR", "") or "",
                "files": op_files(name),
            }
        )
    out["report"] = ds_report_rows()
    return out


def accelerator_name():
    """The accelerator DeepSpeed judges its ops for (DS_ACCELERATOR, else what it detected)."""
    try:
        from deepspeed.accelerator import get_accelerator

        return str(get_accelerator()._name)
    except Exception:  # noqa: BLE001 - an older or broken DeepSpeed: the variable it was given
        return os.environ.get("DS_ACCELERATOR") or None


def load_error(builder):
    """None when an op recorded as built ahead of time loads: its module imported, as DeepSpeed's
    op builder load() imports a prebuilt op (its shared object dlopen'ed), torch loaded first;
    else why not, one line."""
    try:
        module = builder.absolute_name()
    except Exception as exc:  # noqa: BLE001 - a builder that cannot name its module: the error is the reason
        return "its module is not named by the op builder (%s)" % _error(exc)
    try:
        importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - the error text is the finding
        return "%s: %s" % (module, _error(exc))
    return None


REPORT_ROW = re.compile(r"^(\S+) \.+ \[(\w+)\] \.+ \[(\w+)\]")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def ds_report_rows():
    """DeepSpeed's own op report (what `ds_report` prints): op -> [installed, compatible] as printed."""
    captured = io.StringIO()
    try:
        from deepspeed.env_report import op_report

        with contextlib.redirect_stdout(captured):
            op_report(verbose=False)
    except Exception as exc:  # noqa: BLE001 - DeepSpeed's own report failing is the finding
        return {"error": _error(exc)}
    rows = {}
    for line in ANSI.sub("", captured.getvalue()).splitlines():
        match = REPORT_ROW.match(line.strip())
        if match:
            rows[match.group(1)] = [match.group(2), match.group(3)]
    return rows


def op_files(name):
    """The compiled objects of an op built ahead of time (deepspeed/ops/**/<name>*.so)."""
    try:
        spec = util.find_spec("deepspeed")
        root = os.path.join(os.path.dirname(spec.origin), "ops")
    except (ImportError, ValueError, AttributeError, TypeError):
        return []
    return sorted(glob.glob(os.path.join(root, "**", name + "*.so"), recursive=True))[:4]


def module_probe(module, public=None):
    """Whether ``module`` (a compiled module) is there, and whether it loads: through ``public``,
    the package's public import, when the module is private (xformers._C loads via xformers.ops)."""
    try:
        found = util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return {"module": module, "present": False, "error": None}
    origin = util.find_spec(module).origin
    try:
        importlib.import_module(public or module)
        return {"module": module, "present": True, "error": None, "file": origin}
    except Exception as exc:  # noqa: BLE001 - the error text is the finding
        return {"module": module, "present": True, "error": _error(exc), "file": origin}


def torch_facts():
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - a torch that fails to import is the finding
        return {"error": _error(exc)}
    caps = []
    if torch.cuda.is_available():
        caps = ["%d%d" % torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())]
    return {"version": torch.__version__, "cuda": torch.version.cuda, "capabilities": caps}


def main():
    data = json.loads(sys.argv[1])
    # torch first, as every torch extension is used: its modules link torch's libraries (libc10.so)
    # without a search path of their own and load only once torch has loaded them
    torch = torch_facts() if _version("torch") else None
    extensions = []
    for ext in data.get("extension", []):
        version = _version(ext["package"])
        if version is None:
            extensions.append({"name": ext["name"], "version": None, "modules": []})
            continue
        extensions.append(
            {"name": ext["name"], "version": version, "modules": [module_probe(m, ext.get("public")) for m in ext["modules"]]}
        )
    print(json.dumps({"torch": torch, "deepspeed": deepspeed_ops(), "extensions": extensions}))


if __name__ == "__main__":
    main()
