"""OSV advisories read offline (real GHSA records of torch and jinja2 in tests/data/osv) against the
committed lock of examples/stacks/deepspeed-cuda12-debian.toml (torch 2.5.1, jinja2 3.1.6): the
release notes' fixed and added advisories, verify's severity gate, and hostile advisory files."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.clirun import assert_no_traceback
from trainstack.attest.advisories import findings, load_advisories
from trainstack.cli import main

ROOT = Path(__file__).resolve().parents[1]
OSV = ROOT / "tests" / "data" / "osv"
NAME = "deepspeed-cuda12-debian"
SLUG = "cu124-debian13-py313-release"


@pytest.fixture()
def stack(tmp_path: Path) -> Path:
    """The example stack with its committed lock, and the OSV folder beside it."""
    shutil.copy(ROOT / "examples" / "stacks" / f"{NAME}.toml", tmp_path)
    shutil.copytree(ROOT / "examples" / "stacks" / f"{NAME}.lock", tmp_path / f"{NAME}.lock")
    shutil.copytree(OSV, tmp_path / "osv")
    (tmp_path / "results").mkdir()
    return tmp_path / f"{NAME}.toml"


def previous_manifest(stack: Path, pins: dict[str, str]) -> Path:
    """The previous release's manifest: the same lock, release 2026.06.0, with other pins."""
    data = json.loads((stack.parent / f"{NAME}.lock" / "stack.lock.json").read_text())
    data["release"] = "2026.06.0"
    data["flavours"][SLUG]["packages"].update(pins)
    path = stack.parent / "previous.json"
    path.write_text(json.dumps(data))
    return path


def errors(text: str) -> list[str]:
    assert_no_traceback(text)
    return [line for line in text.splitlines() if line.startswith("error:")]


def test_the_lock_pins_what_the_real_advisories_name() -> None:
    locked = json.loads((ROOT / "examples" / "stacks" / f"{NAME}.lock" / "stack.lock.json").read_text())
    packages = locked["flavours"][SLUG]["packages"]
    found = {(f.id, f.severity) for f in findings(load_advisories(OSV), packages)}
    assert packages["torch"] == "2.5.1" and packages["jinja2"] == "3.1.6"
    # torch 2.5.1 is before every torch fix; jinja2 3.1.6 is the fix of its advisory
    assert found == {("GHSA-53q9-r3pm-6pq6", "critical"), ("GHSA-3749-ghw9-m3mg", "low"), ("GHSA-887c-mr87-cxwp", "medium")}
    assert [f.id for f in findings(load_advisories(OSV), {"torch": "2.7.1"})] == ["GHSA-887c-mr87-cxwp"]


def test_release_notes_list_the_advisories_fixed_and_added_since_the_previous_release(stack: Path, capsys) -> None:
    previous = previous_manifest(stack, {"torch": "2.6.0", "jinja2": "3.1.4"})
    out = stack.parent / "notes"
    code = main(["release", str(stack), "--previous", str(previous), "--advisories", str(stack.parent / "osv"),
                 "--results", str(stack.parent / "results"), "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    notes = json.loads((out / "release.json").read_text())
    [flavour] = notes["advisories"]
    assert [a["id"] for a in flavour["fixed"]] == ["GHSA-cpwx-vrp4-4pq7"]  # jinja2 3.1.4 -> 3.1.6
    assert [a["id"] for a in flavour["added"]] == ["GHSA-53q9-r3pm-6pq6"]  # torch 2.6.0 -> 2.5.1
    assert [a["id"] for a in flavour["remaining"]] == ["GHSA-3749-ghw9-m3mg", "GHSA-887c-mr87-cxwp"]
    assert notes["advisories_read"] == 4
    markdown = (out / "RELEASE.md").read_text()
    section = markdown.split("## Security advisories", 1)[1].split("\n## ", 1)[0]
    assert f"| {SLUG} | fixed | GHSA-cpwx-vrp4-4pq7 | medium | jinja2 3.1.4 | 3.1.6 |" in section
    assert f"| {SLUG} | added | GHSA-53q9-r3pm-6pq6 | critical | torch 2.5.1 | 2.6.0 |" in section
    html = (out / "release.html").read_text()
    assert "<td>added</td><td>GHSA-53q9-r3pm-6pq6</td><td>critical</td>" in html
    assert "<code>torch.load</code>" not in html and "`torch.load` with `weights_only=True`" in html  # text, escaped


def test_the_stacks_folder_and_max_severity_gate_verify(stack: Path, capsys) -> None:
    text = stack.read_text().replace("[verify]\n", '[verify]\nadvisories = "osv"\nmax_severity = "high"\n', 1)
    stack.write_text(text)
    skip = "report,files,ops,linkcheck,smoke,suites"
    out = stack.parent / "verify.json"
    code = main(["verify", str(stack), "--python", os.sys.executable, "--skip", skip, "-o", str(out)])
    result = json.loads(out.read_text())
    assert code == 1
    assert [f["id"] for f in result["advisories"]["affecting"]] == ["GHSA-3749-ghw9-m3mg", "GHSA-53q9-r3pm-6pq6", "GHSA-887c-mr87-cxwp"]
    assert result["reasons"] == ["advisory GHSA-53q9-r3pm-6pq6 (critical) affects torch 2.5.1: above the stack's "
                                 "max_severity high; fixed in 2.6.0"]
    stack.write_text(text.replace('max_severity = "high"', 'max_severity = "critical"'))
    assert main(["verify", str(stack), "--python", os.sys.executable, "--skip", skip, "-o", str(out)]) == 0


HOSTILE = {
    "not-json.json": b"{\"id\": ",
    "deep.json": b"[" * 5000 + b"]" * 5000,
    "nested.json": json.dumps({"id": "X-1", "modified": "2025", "affected": [{"package": {"a": [[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]}}]}).encode(),
    "huge.json": b"{\"id\": \"X-1\", \"summary\": \"" + b"a" * (1024 * 1024 + 10) + b"\"}",
    "bad-id.json": json.dumps({"id": "../../etc/passwd", "modified": "2025-01-01T00:00:00Z"}).encode(),
    "bad-range.json": json.dumps({"id": "X-2", "modified": "2025-01-01T00:00:00Z", "affected": [
        {"package": {"ecosystem": "PyPI", "name": "torch"}, "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "not a version; rm -rf"}]}]}]}).encode(),
    "wrong-type.json": json.dumps({"id": "X-3", "modified": "2025-01-01T00:00:00Z", "affected": "torch"}).encode(),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_malformed_or_hostile_advisory_is_one_error_line_naming_the_file(stack: Path, name: str, capsys) -> None:
    folder = stack.parent / "osv"
    (folder / name).write_bytes(HOSTILE[name])
    code = main(["release", str(stack), "--advisories", str(folder), "--results", str(stack.parent / "results"),
                 "--out", str(stack.parent / "notes")])
    captured = capsys.readouterr()
    lines = errors(captured.err)
    assert code == 2 and len(lines) == 1, captured.err
    assert lines[0].startswith(f"error: {folder / name}: ")
    assert not (stack.parent / "notes").exists()


def test_a_link_in_the_advisory_folder_is_not_followed(stack: Path, capsys) -> None:
    folder = stack.parent / "osv"
    (folder / "passwd.json").symlink_to("/etc/passwd")
    code = main(["release", str(stack), "--advisories", str(folder), "--results", str(stack.parent / "results"),
                 "--out", str(stack.parent / "notes")])
    lines = errors(capsys.readouterr().err)
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {folder / 'passwd.json'}: ")


@pytest.mark.parametrize("value", ["/etc", "../", "osv/GHSA-53q9-r3pm-6pq6.json"])
def test_the_stacks_advisories_folder_is_a_folder_inside_its_folder(stack: Path, value: str, capsys) -> None:
    stack.write_text(stack.read_text().replace("[verify]\n", f'[verify]\nadvisories = "{value}"\n', 1))
    assert main(["check", str(stack)]) == 2
    [line] = errors(capsys.readouterr().err)
    assert line.startswith(f"error: {stack}:") and "verify.advisories" in line
