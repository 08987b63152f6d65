"""Releases as a team makes them, on real locks: a stack's first release with no previous manifest,
a partial verify beside the full gate's result (and which one the notes used), a previous
manifest that is not there, and a section that says "none"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.clirun import assert_no_traceback
from tests.release_pair import STACK, slug_of
from trainstack.cli import main
from trainstack.errors import SpecError
from trainstack.lock.manifest import manifest_path
from trainstack.release.schema import ReleaseNotes
from trainstack.release.publish import make_release

pytestmark = pytest.mark.slow


def first_release(project: Path):
    return make_release(project / STACK, None, results=project / "results", out=project / "out",
                        drivers=lambda cuda: None)


def test_a_first_release_needs_no_previous_manifest_and_lists_every_package_added(project):
    outcome = first_release(project)
    notes = ReleaseNotes.model_validate_json((project / "out" / "release.json").read_text())
    assert notes.previous_release is None and outcome.notes == notes
    current = json.loads(manifest_path(project / STACK).read_text())
    (packages,) = [f["packages"] for f in current["flavours"].values()]
    assert {c.name for c in notes.updates.common} == set(packages)
    assert {c.kind for c in notes.updates.common} == {"added"}
    assert not notes.updates.added_flavours and not notes.updates.removed_flavours
    markdown = (project / "out" / "RELEASE.md").read_text()
    assert "Release 2026.12.0 of `registry.example.com/ml/trainstack/cpu-minimal`, its first release." in markdown
    assert f"The first release, in every flavour:\n\n- hypothesis: added {packages['hypothesis']}\n" in markdown
    assert "following" not in markdown and "None" not in markdown
    html = (project / "out" / "release.html").read_text()
    assert "its first release." in html and "The first release, in every flavour:" in html


def test_the_cli_makes_a_first_release_and_names_a_missing_previous_manifest(project, capsys, monkeypatch):
    monkeypatch.chdir(project)
    assert main(["release", STACK, "--results", "results", "--out", "out"]) == 0
    assert "wrote out/RELEASE.md" in capsys.readouterr().out
    assert "its first release" in (project / "out" / "RELEASE.md").read_text()

    code = main(["release", STACK, "--previous", "nonexist.json", "--results", "results", "--out", "out2"])
    err = capsys.readouterr().err
    assert_no_traceback(err)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("error: --previous nonexist.json: no such file")
    assert "leave --previous out for its first release" in err
    assert "trainstack lock" not in err  # locking this stack would not make the previous release's manifest
    assert not (project / "out2").exists()


def _verify(verdict: str, skipped: list[str], tests: int | None) -> str:
    gate = {"suites": [{"tests": tests, "failed": [], "known": []}], "total_failed": 0} if tests else None
    reasons = ["smoke matmul: wrong result"] if verdict == "fail" else []
    return json.dumps({"schema_version": 1, "verdict": verdict, "reasons": reasons, "skipped": skipped, "gate": gate})


def test_the_notes_use_the_full_gate_and_name_a_partial_result_they_fall_back_to(project):
    slug = slug_of(project)
    folder = project / "results" / slug
    (folder / "verify.json").write_text(_verify("pass", [], 12))
    (folder / "verify.partial.json").write_text(_verify("pass", ["suites"], None))

    (full,) = first_release(project).notes.verification
    assert (full.verdict, full.tests_run, full.source) == ("pass", 12, f"{slug}/verify.json")
    text = (project / "out" / "RELEASE.md").read_text()
    assert f"| {slug} | pass | 12 | 0 | 0 | verify.json |" in text

    (folder / "verify.json").unlink()  # only the partial run's result: used, and said so
    (partial,) = first_release(project).notes.verification
    assert (partial.verdict, partial.source) == ("not run", f"{slug}/verify.partial.json")
    text = (project / "out" / "RELEASE.md").read_text()
    assert f"| {slug} | not run | — | — | — | verify.partial.json (partial: parts skipped) |" in text
    assert f"Why the test gate of {slug} did not run:\n\n- the test suites were skipped" in text
    assert "failed:" not in text  # "not run" is never under a "Why ... failed:" heading
    html = (project / "out" / "release.html").read_text()
    assert f"<h3>Why the test gate of {slug} did not run</h3>" in html and "failed</h3>" not in html

    (folder / "verify.partial.json").write_text(_verify("fail", ["suites"], None))
    first_release(project)
    assert f"Why {slug} failed:\n\n- smoke matmul: wrong result" in (project / "out" / "RELEASE.md").read_text()


def test_a_section_can_say_none(project):
    changes = project / "changes"
    (changes / "11.fix.md").unlink()
    (changes / "12.fix.md").write_text("none\n")
    (changes / "13.known-issue.md").write_text("None.\n")
    outcome = first_release(project)
    text = (project / "out" / "RELEASE.md").read_text()
    assert "## Fixes\n\n- None.\n" in text and "## Known issues\n\n- None.\n" in text
    assert [f.none for f in outcome.notes.fragments] == [False, True, True]
    assert "<h2>Fixes</h2><ul><li><p>None.</p>" in (project / "out" / "release.html").read_text()


def test_none_beside_a_change_of_the_same_section_is_refused_before_anything_is_written(project):
    (project / "changes" / "12.fix.md").write_text("none\n")  # 11.fix.md is a fix of this release
    with pytest.raises(SpecError, match=r"12\.fix\.md: says 'none' for its section \(fix\), but 11\.fix\.md is a fix"):
        first_release(project)
    assert not (project / "out").exists()
    assert (project / "changes" / "11.fix.md").exists()
