"""The release verb end to end on real locks: outputs, fragments consumed exactly once, nothing on failure."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.clirun import assert_no_traceback
from tests.release_pair import PREVIOUS, STACK, release, slug_of
from trainstack.cli import main
from trainstack.errors import SpecError, UsageError
from trainstack.lock.manifest import manifest_path
from trainstack.release.schema import ReleaseNotes
from trainstack.release.publish import OUTPUTS

pytestmark = pytest.mark.slow


def _fragments(project: Path) -> list[str]:
    return sorted(p.name for p in (project / "changes").glob("*.md"))


def test_writes_the_three_outputs_and_consumes_fragments_once(project):
    outcome = release(project)
    assert sorted(p.name for p in (project / "out").iterdir()) == sorted([*OUTPUTS, "stack.lock.json"])
    notes = ReleaseNotes.model_validate_json((project / "out" / "release.json").read_text())
    assert notes == outcome.notes
    assert [c.kind for c in notes.updates.common] == ["added", "upgraded", "upgraded", "added", "removed"]
    assert [f.name for f in notes.fragments] == ["10.highlight.md", "11.fix.md"]
    markdown = (project / "out" / "RELEASE.md").read_text()
    assert "## Highlights\n\n- NumPy 2.4.\n" in markdown
    assert f"| {slug_of(project)} | pass | 12 | 0 | 0 |" in markdown
    assert _fragments(project) == ["README.md"]
    assert outcome.consumed_to == project / "changes" / "released" / "2026.12.0"
    assert sorted(p.name for p in outcome.consumed_to.iterdir()) == ["10.highlight.md", "11.fix.md"]

    # the same release made again keeps the fragments it consumed the first time
    again = release(project)
    assert again.notes.fragments == notes.fragments and again.consumed_to is None
    assert (project / "out" / "RELEASE.md").read_text() == markdown
    assert sorted(p.name for p in outcome.consumed_to.iterdir()) == ["10.highlight.md", "11.fix.md"]


@pytest.mark.parametrize("breakage", ["bad fragment", "empty fragment", "bad verify", "other stack", "consumed before"])
def test_a_failed_release_writes_nothing_and_consumes_nothing(project, breakage):
    expected: type[Exception] = SpecError
    if breakage == "bad fragment":
        (project / "changes" / "12.feature.md").write_text("x\n")
    elif breakage == "empty fragment":
        (project / "changes" / "12.fix.md").write_text("\n")
    elif breakage == "bad verify":
        (project / "results" / slug_of(project) / "verify.json").write_text("{not json")
    elif breakage == "other stack":
        path = manifest_path(project / PREVIOUS)
        path.write_text(path.read_text().replace('"stack": "cpu-minimal"', '"stack": "torch-cuda"'))
        expected = UsageError
    else:
        done = project / "changes" / "released" / "2026.12.0"
        done.mkdir(parents=True)
        (done / "11.fix.md").write_text("an older fix\n")
    before = _fragments(project)
    with pytest.raises(expected):
        release(project)
    assert not (project / "out").exists()
    assert _fragments(project) == before


def test_cli_writes_the_release_and_reports_errors_in_one_line(project, capsys, monkeypatch):
    monkeypatch.chdir(project)
    args = ["release", STACK, "--previous", str(manifest_path(PREVIOUS)), "--results", "results", "--out", "out"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "wrote out/release.html" in printed and "consumed 2 fragment(s)" in printed

    other = project / "other.json"
    other.write_text(manifest_path(project / PREVIOUS).read_text().replace('"stack": "cpu-minimal"', '"stack": "torch-cuda"'))
    assert main([*args[:2], "--previous", "other.json", *args[4:]]) == 2
    err = capsys.readouterr().err
    assert "other.json: the previous manifest is of stack 'torch-cuda', not 'cpu-minimal'" in err
    assert_no_traceback(err)
    assert len(err.strip().splitlines()) == 1

    assert main([*args[:4], "--results", "missing"]) == 2
    assert "--results missing: no such directory" in capsys.readouterr().err


def test_a_page_that_fails_to_render_writes_nothing_and_consumes_nothing(project, monkeypatch):
    import trainstack.release.publish as publish

    def broken(*args, **kwargs):
        raise RuntimeError("the template broke")

    monkeypatch.setattr(publish, "render_html", broken)  # fault injection: the last output fails to render
    before = _fragments(project)
    with pytest.raises(RuntimeError, match="the template broke"):
        release(project)
    assert not (project / "out").exists()
    assert _fragments(project) == before


def test_deltas_against_the_bench_figures_of_the_previous_release_json(project):
    slug = slug_of(project)
    row = {"model": "tiny", "batch": 2, "seq": 128, "mode": "eager", "status": "ok"}
    bench = project / "results" / slug / "bench-tiny-b2-s128.jsonl"
    bench.write_text(json.dumps({**row, "tokens_per_s_per_gpu": 1000.0}) + "\n")
    release(project)
    shutil.copy(project / "out" / "release.json", project / "previous-release.json")

    bench.write_text(json.dumps({**row, "tokens_per_s_per_gpu": 1250.0}) + "\n")
    (bench_row,) = release(project, previous_results=project / "previous-release.json").notes.performance
    assert (bench_row.tokens_per_s, bench_row.previous_tokens_per_s, bench_row.delta_percent) == (1250.0, 1000.0, 25.0)
    assert f"| {slug} | tiny | b2 s128 | eager | 1,250 | 1,000 | +25.0 % |" in (project / "out" / "RELEASE.md").read_text()
