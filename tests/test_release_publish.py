"""The release verb end to end on files: outputs, fragments consumed exactly once, nothing on failure."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from trainstack.cli import main
from trainstack.errors import LockError, SpecError, UsageError
from trainstack.lock.manifest import LockedFlavour, Manifest, manifest_path
from trainstack.release.model import ReleaseNotes
from trainstack.release.publish import OUTPUTS, make_release

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "stacks" / "cpu-minimal.toml"
SLUG = "cpu-debian12-py311-release"


def _flavour(packages: dict[str, str]) -> LockedFlavour:
    return LockedFlavour(cuda="cpu", os="debian12", python="3.11", channel="release", lock_file=f"locks/{SLUG}.txt",
                         lock_sha256="0" * 64, index=None, cache_key=f"trainstack/cpu-minimal-{SLUG}-0123456789ab",
                         packages=packages)


def _manifest(release: str, packages: dict[str, str], stack: str = "cpu-minimal") -> Manifest:
    return Manifest(stack=stack, release=release, image="registry.example.com/ml/trainstack/cpu-minimal",
                    inputs_hash=release, uv_version="0.9.0", generated_at="2026-12-01T00:00:00Z",
                    flavours={SLUG: _flavour(packages)})


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A stack with its current lock manifest, a previous one, fragments and results."""
    stack = tmp_path / "cpu-minimal.toml"
    shutil.copy(EXAMPLE, stack)
    current = _manifest("2026.12.0", {"numpy": "2.3.5", "pytest": "8.4.2", "hypothesis": "6.140.0", "pygments": "2.19.2"})
    previous = _manifest("2026.11.0", {"numpy": "2.2.6", "pytest": "8.3.5", "hypothesis": "6.140.0"})
    manifest_path(stack).parent.mkdir()
    manifest_path(stack).write_text(current.model_dump_json(indent=2))
    (tmp_path / "previous.json").write_text(previous.model_dump_json(indent=2))
    changes = tmp_path / "changes"
    changes.mkdir()
    (changes / "10.highlight.md").write_text("NumPy 2.3.\n")
    (changes / "11.fix.md").write_text("Hashes are kept when a lock is refreshed.\n")
    shutil.copy(EXAMPLE.parent / "changes" / "README.md", changes / "README.md")  # not a fragment
    results = tmp_path / "results" / SLUG
    results.mkdir(parents=True)
    (results / "verify.json").write_text(json.dumps({"verdict": "pass", "tests": {"run": 12, "failed": 0, "allowed": 0}}))
    return tmp_path


def _release(project: Path, **kwargs):
    return make_release(project / "cpu-minimal.toml", project / "previous.json", results=project / "results",
                        out=project / "out", drivers=lambda cuda: None, **kwargs)


def _fragments(project: Path) -> list[str]:
    return sorted(p.name for p in (project / "changes").glob("*.md"))


def test_writes_the_three_outputs_and_consumes_fragments_once(project):
    outcome = _release(project)
    assert sorted(p.name for p in (project / "out").iterdir()) == sorted(OUTPUTS)
    notes = ReleaseNotes.model_validate_json((project / "out" / "release.json").read_text())
    assert notes.updates.common[0].kind == "changed" and notes.updates.common[2].kind == "added"
    assert [c.text() for c in notes.updates.common] == [
        "numpy: 2.2.6 → 2.3.5", "pytest: 8.3.5 → 8.4.2", "pygments: added 2.19.2"]
    assert [f.name for f in notes.fragments] == ["10.highlight.md", "11.fix.md"]
    markdown = (project / "out" / "RELEASE.md").read_text()
    assert "## Highlights\n\n- NumPy 2.3.\n" in markdown
    assert "| cpu-debian12-py311-release | pass | 12 | 0 | 0 |" in markdown
    assert _fragments(project) == ["README.md"]
    assert outcome.consumed_to == project / "changes" / "released" / "2026.12.0"
    assert sorted(p.name for p in outcome.consumed_to.iterdir()) == ["10.highlight.md", "11.fix.md"]

    again = _release(project)
    assert again.notes.fragments == [] and again.consumed_to is None
    assert "## Highlights" not in (project / "out" / "RELEASE.md").read_text()


@pytest.mark.parametrize("breakage", ["bad fragment", "bad verify", "other stack", "consumed before"])
def test_a_failed_release_writes_nothing_and_consumes_nothing(project, breakage):
    expected: type[Exception] = SpecError
    if breakage == "bad fragment":
        (project / "changes" / "12.feature.md").write_text("x\n")
    elif breakage == "bad verify":
        (project / "results" / SLUG / "verify.json").write_text("{not json")
    elif breakage == "other stack":
        other = _manifest("2026.11.0", {"numpy": "2.2.6"}, stack="torch-cuda")
        (project / "previous.json").write_text(other.model_dump_json())
        expected = UsageError
    else:
        done = project / "changes" / "released" / "2026.12.0"
        done.mkdir(parents=True)
        (done / "11.fix.md").write_text("an older fix\n")
    before = _fragments(project)
    with pytest.raises(expected):
        _release(project)
    assert not (project / "out").exists()
    assert _fragments(project) == before


def test_a_stale_lock_is_refused(project):
    stack = project / "cpu-minimal.toml"
    stack.write_text(stack.read_text().replace('release = "2026.12.0"', 'release = "2027.01.0"'))
    with pytest.raises(LockError, match="locked for cpu-minimal 2026.12.0"):
        _release(project)


def test_cli_writes_the_release_and_reports_errors_in_one_line(project, capsys, monkeypatch):
    monkeypatch.chdir(project)
    args = ["release", "cpu-minimal.toml", "--previous", "previous.json", "--results", "results", "--out", "out"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "wrote out/release.html" in printed and "consumed 2 fragment(s)" in printed

    (project / "previous.json").write_text(_manifest("1", {}, stack="torch-cuda").model_dump_json())
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "previous manifest is of stack 'torch-cuda', not 'cpu-minimal'" in err
    assert "Traceback" not in err

    assert main([*args[:4], "--results", "missing"]) == 2
    assert "--results missing: no such directory" in capsys.readouterr().err
