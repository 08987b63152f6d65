"""Confirm the static pass's unresolved and dlopen-missing findings inside the target
interpreter (probes/link_probe.py), and classify each: broken, optional or resolved at run
time; blocked when the package does not import because of another, broken library while
this one is installed (a warning: the broken one fails the check). Without an interpreter the
findings stay as they are, marked unconfirmed."""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from trainstack.verify.linkcheck.check import LinkIssue, LinkReport
from trainstack.verify.linkcheck.data import DlopenData, load_data
from trainstack.verify.target import run_probe

CONFIRMED_KINDS = ("unresolved", "dlopen-missing")
Runner = Callable[[str], tuple[object, str]]  # items file -> (probe JSON or None, why not)


def needs_confirmation(issue: LinkIssue) -> bool:
    return issue.kind in CONFIRMED_KINDS and issue.severity != "note"


def confirm(report: LinkReport, python: str, site_dirs: list[Path], run: Runner) -> LinkReport:
    """The report with every finding that needs it confirmed by ``run`` (the probe in the
    target); findings the probe could not answer stay unconfirmed with the probe's reason."""
    start = time.perf_counter()
    todo = [i for i, issue in enumerate(report.issues) if needs_confirmation(issue)]
    data = load_data()
    providers = record_index(site_dirs)
    issues = [issue.model_copy(update={"provider": provider_for(issue.library, providers, data)}) for issue in report.issues]
    answers: dict[int, dict] = {}
    why_not = ""
    if todo:
        items = [probe_item(n, issues[n], site_dirs) for n in todo]
        with tempfile.TemporaryDirectory(prefix="trainstack-links-") as tmp:
            path = os.path.join(tmp, "items.json")
            Path(path).write_text(json.dumps(items), encoding="utf-8")
            result, why_not = run(path)
        if isinstance(result, list):
            by_id = {item["id"]: item for item in items}
            answers = {
                a["id"]: dict(
                    a, package=by_id[a["id"]]["package"], module=by_id[a["id"]]["module"], executable=by_id[a["id"]]["executable"]
                )
                for a in result
                if isinstance(a, dict) and a.get("id") in by_id
            }
    present = installed_libraries(providers, site_dirs)
    for n in todo:
        answer = answers.get(n)
        if answer is not None:
            answer["library_present"] = issues[n].library in present
        if answer is None:
            issues[n] = issues[n].model_copy(update={"status": "unconfirmed", "reason": f"the probe gave no answer: {why_not}"})
        else:
            issues[n] = classify(issues[n], answer, site_dirs, data)
    line = f"{len(todo)} finding(s) confirmed in {python}" if not why_not else f"the probe in {python} failed: {why_not}"
    return report.model_copy(
        update={
            "issues": issues + _not_linked(missing_installed(site_dirs), issues),
            "confirmed_in": python,
            "confirmation": line,
            "confirm_seconds": round(time.perf_counter() - start, 3),
        }
    )


def unconfirmed(report: LinkReport, why: str = "no interpreter to load them in (a bare directory)") -> LinkReport:
    """The report as the static pass left it, each finding marked unconfirmed."""
    providers = record_index(site_dirs_under([Path(p) for p in report.paths]))
    data = load_data()
    issues = [
        issue.model_copy(update={"status": "unconfirmed", "reason": why, "provider": provider_for(issue.library, providers, data)})
        if needs_confirmation(issue)
        else issue
        for issue in report.issues
    ]
    issues += _not_linked(missing_installed(site_dirs_under([Path(p) for p in report.paths])), issues)
    return report.model_copy(update={"issues": issues, "confirmation": f"findings unconfirmed: {why}"})


def site_dirs_under(roots: list[Path]) -> list[Path]:
    """site-packages directories inside ``roots`` (or a root that holds distributions itself)."""
    found: list[Path] = []
    for root in roots:
        if root.is_dir() and any(root.glob("*.dist-info")):
            found.append(root)
        found += [p for p in root.glob("lib*/python3*/site-packages") if p.is_dir()] if root.is_dir() else []
    return found


def owner_of(path: str, site_dirs: list[Path]) -> tuple[str | None, str | None]:
    """(top-level package to import, extension module name or None) for an object's path."""
    for site in site_dirs:
        prefix = str(site).rstrip(os.sep) + os.sep
        if not path.startswith(prefix):
            continue
        parts = path[len(prefix) :].split(os.sep)
        top = parts[0][: -len(".libs")] if parts[0].endswith(".libs") else parts[0]
        stem = parts[-1].split(".cpython-")[0].removesuffix(".so").removesuffix(".abi3")
        module = ".".join([*parts[:-1], stem]) if _is_extension(parts[-1]) and stem.isidentifier() else None
        if len(parts) == 1:
            return (stem if module else None), module
        return (top if top.isidentifier() else None), module
    return None, None


def _is_extension(name: str) -> bool:
    return ".cpython-" in name or name.endswith(".abi3.so") or (name.endswith(".so") and not name.startswith("lib"))


def probe_item(n: int, issue: LinkIssue, site_dirs: list[Path]) -> dict:
    outermost = issue.chain[0] if issue.chain else issue.file
    package = owner_of(outermost, site_dirs)[0] or owner_of(issue.file, site_dirs)[0]
    module = owner_of(issue.file, site_dirs)[1]
    base = os.path.basename(issue.file)
    executable = ".so" not in base and os.access(issue.file, os.X_OK)
    return {
        "id": n,
        "package": package,
        "object": issue.file,
        "library": issue.library,
        "kind": issue.kind,
        "module": module,
        "executable": executable,
    }


def classify(issue: LinkIssue, answer: dict, site_dirs: list[Path], data: DlopenData) -> LinkIssue:
    status, reason = _judge(issue, answer, site_dirs, data)
    severity = {"broken": "error", "blocked": "warning", "optional": "note", "resolved-at-run-time": "note"}.get(status, issue.severity)
    return issue.model_copy(update={"status": status, "reason": reason, "severity": severity})


def _judge(issue: LinkIssue, answer: dict, site_dirs: list[Path], data: DlopenData) -> tuple[str, str]:
    package = answer.get("package")
    imported = f"`import {package}`" if package else "no package import"
    obj = short_path(issue.file, site_dirs)
    import_error = answer.get("import_error")
    if import_error and _names_any(import_error, [issue.library, *issue.chain]):
        return "broken", f"import {package} fails: {import_error}"
    what = data.optional_part(issue.file)
    if answer.get("executable") and what:
        return "optional", f"only {what} needs it"
    if import_error and answer.get("library_present"):
        return "blocked", f"import {package} fails for another reason ({import_error}); {issue.library} itself is installed"
    if answer.get("probe_error"):
        return "unconfirmed", f"loading {obj} in the target failed: {answer['probe_error']}"
    found_at = answer.get("library_path")
    came_from = f"{issue.library} is mapped from {short_path(found_at, site_dirs)}" if found_at else f"{issue.library} is found"
    load_error = answer.get("load_error")
    if issue.kind == "dlopen-missing":
        if load_error is None:
            return "resolved-at-run-time", f"after {imported}, dlopen finds it: {came_from}"
        if answer.get("reached") or (not package and not what):
            return "broken", f"{imported} loads {obj}, which dlopens {issue.library} on first use: {load_error}"
        return "optional", f"only {what or obj} needs it; {imported} does not load {obj}"
    if answer.get("reached"):
        return "resolved-at-run-time", f"{imported} loads {obj}; {came_from} (loaded first)"
    if load_error is None:
        return "resolved-at-run-time", f"{obj} loads after {imported}; {came_from} (loaded first)"
    if answer.get("executable") and package:
        return "optional", f"only {obj} needs it, an executable that {imported} never runs"
    if import_error and not what:
        return "broken", f"import {package} fails ({import_error}) and {obj} does not load: {load_error}"
    if what or (package and (answer.get("module") or ".so" in os.path.basename(issue.file))):
        part = what or f"{answer.get('module') or obj} (an optional part {imported} does not load)"
        return "optional", f"only {part} needs it: {load_error}"
    if package:
        return "optional", f"only {obj} needs it, an executable that {imported} never runs"
    return "broken", f"{obj} does not load: {load_error}"


def _names_any(message: str, names: list[str]) -> bool:
    return any(os.path.basename(name) in message for name in names if name)


def short_path(path: str, site_dirs: list[Path]) -> str:
    for site in site_dirs:
        prefix = str(site).rstrip(os.sep) + os.sep
        if path.startswith(prefix):
            return path[len(prefix) :]
    return path


def record_index(site_dirs: list[Path]) -> dict[str, tuple[str, str, str]]:
    """{library file name: (distribution, version, path in RECORD)} from every installed
    distribution's RECORD, so a deleted file still names what installed it."""
    index: dict[str, tuple[str, str, str]] = {}
    for site in site_dirs:
        for record in sorted(site.glob("*.dist-info/RECORD")):
            name, _, version = record.parent.name[: -len(".dist-info")].partition("-")
            try:
                lines = record.read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:
                continue
            for line in lines:
                path = line.split(",", 1)[0]
                base = path.rsplit("/", 1)[-1]
                if ".so" in base:
                    index.setdefault(base, (name.replace("_", "-").lower(), version, path))
    return index


def missing_installed(site_dirs: list[Path]) -> list[LinkIssue]:
    """Shared objects an installed distribution's RECORD lists that are not on disk (a deleted
    extension module: nothing links it, so no NEEDED entry misses it): broken."""
    found: list[LinkIssue] = []
    seen: set[str] = set()
    for site in site_dirs:
        if os.path.realpath(site) in seen:  # lib64 -> lib: one site, two names
            continue
        seen.add(os.path.realpath(site))
        for record in sorted(site.glob("*.dist-info/RECORD")):
            name, _, version = record.parent.name[: -len(".dist-info")].partition("-")
            dist = name.replace("_", "-").lower()
            try:
                lines = record.read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:
                continue
            for line in lines:
                path = line.split(",", 1)[0]
                if ".so" not in path.rsplit("/", 1)[-1] or (site / path).exists() or os.path.islink(site / path):
                    continue
                full = os.path.normpath(site / path)
                found.append(
                    LinkIssue(
                        kind="missing-file",
                        severity="error",
                        status="broken",
                        file=full,
                        library=os.path.basename(full),
                        detail=f"listed in {dist} {version}'s RECORD, not on disk",
                        reason=f"{dist} {version} installed {path} and it is gone",
                        provider=f"{dist}=={version} ({path})",
                    )
                )
    return found


def _not_linked(missing: list[LinkIssue], issues: list[LinkIssue]) -> list[LinkIssue]:
    """Missing files that no other finding names already (a deleted library that something
    links is reported once, as that link)."""
    named = {i.library for i in issues if i.kind in CONFIRMED_KINDS}
    return [m for m in missing if m.library not in named]


def installed_libraries(records: dict[str, tuple[str, str, str]], site_dirs: list[Path]) -> set[str]:
    """Library names whose file (as RECORD lists it) is on disk."""
    return {name for name, (_d, _v, path) in records.items() if any((site / path).exists() for site in site_dirs)}


def provider_for(library: str, records: dict[str, tuple[str, str, str]], data: DlopenData) -> str:
    hit = records.get(library)
    if hit is None:
        hit = next((v for k, v in records.items() if k.startswith(library + ".")), None)
    if hit is not None:
        name, version, path = hit
        return f"{name}=={version} ({path})"
    return data.provider_of(library)


def venv_python(paths: list[Path]) -> Path | None:
    """The interpreter of the one venv given, so its findings can be confirmed."""
    if len(paths) != 1 or not (paths[0] / "pyvenv.cfg").is_file():
        return None
    python = paths[0] / "bin" / "python"
    return python if python.exists() else None


def confirm_in_target(report: LinkReport, target: object) -> LinkReport:
    """Run the confirmation probe with the target's interpreter (a verify.target.Target)."""

    def run(items: str) -> tuple[object, str]:
        return run_probe(target, "link_probe.py", [items], timeout=900)  # type: ignore[arg-type]  # target is a verify.target.Target, typed object to keep linkcheck free of verify's imports

    sites = list(getattr(target, "site", ())) + site_dirs_under([Path(p) for p in report.paths])
    return confirm(report, str(target.python), list(dict.fromkeys(sites)), run)  # type: ignore[attr-defined]  # target is a verify.target.Target, typed object to keep linkcheck free of verify's imports
