"""The pure core of release notes: manifest diff, fragments, result readers, Markdown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.release_manifests import COMPONENTS, N128, R128, flavour, two_releases
from trainstack.errors import SpecError, UsageError
from trainstack.release.diff import component_versions, diff_manifests
from trainstack.release.fragments import parse_fragment
from trainstack.release.markdown import render_markdown
from trainstack.release.notes import Inputs, MinDriver, check_same_stack, make_notes, performance
from trainstack.release.results import BenchResult, parse_bench_lines, parse_verify, read_verification


def test_common_changes_once_then_per_flavour_with_short_commits():
    old, new = two_releases()
    updates = diff_manifests(old, new, COMPONENTS)
    assert [c.text() for c in updates.common] == ["apex: 2386a91 → a7de60e", "numpy: 2.2.6 → 2.3.5"]
    assert [c.text() for c in updates.per_flavour[R128]] == [
        "torch: 2.10.0 → 2.11.0", "einops: added 0.8.1", "filelock: removed (was 3.18.0)",
    ]
    assert [c.text() for c in updates.per_flavour[N128]] == [
        "torch: 2.11.0.dev20261101 → 2.12.0.dev20261201", "triton: removed (was 3.5.0)",
    ]
    assert updates.added_flavours == updates.removed_flavours == []


def test_added_and_removed_flavours_are_listed_not_diffed():
    old, new = two_releases()
    cu130 = "cu130-ubuntu2404-py312-release"
    new = new.model_copy(update={"flavours": {R128: new.flavours[R128], cu130: flavour({"torch": "2.11.0"}, cuda="13.0", slug=cu130)}})
    updates = diff_manifests(old, new, COMPONENTS)
    assert updates.added_flavours == [cu130]
    assert updates.removed_flavours == [N128]
    assert list(updates.per_flavour) == [R128]


def test_identical_manifests_have_no_updates():
    old, _ = two_releases()
    updates = diff_manifests(old, old, COMPONENTS)
    assert updates.empty
    assert "No version changes since 2026.11.0." in render_markdown(_notes(old, old))


def test_version_table_groups_flavours_with_identical_versions():
    _, new = two_releases()
    table = component_versions(new, COMPONENTS)
    assert table.columns == [[N128], [R128]]
    assert table.rows["apex"] == ["a7de60e", "a7de60e"]
    assert table.rows["torch"] == ["2.12.0.dev20261201", "2.11.0"]
    assert "triton" not in table.rows  # in no flavour of this manifest


def test_previous_manifest_of_another_stack_is_refused_with_the_reason():
    old, new = two_releases()
    other = old.model_copy(update={"stack": "cpu-minimal"})
    with pytest.raises(UsageError, match="previous manifest is of stack 'cpu-minimal', not 'torch-cuda'"):
        check_same_stack(other, new, "old/stack.lock.json")
    with pytest.raises(UsageError, match="previous manifest is of release 2026.12.0, the release being described"):
        check_same_stack(new, new, "cpu-minimal.lock/stack.lock.json")


@pytest.mark.parametrize(("name", "text", "message"), [
    ("12.feature.md", "x", "unknown fragment type 'feature'"),
    ("fix.md", "x", "needs an id and a type"),
    ("12.fix.md", " \n\n", "empty fragment"),
])
def test_malformed_fragment_names_the_file(name, text, message):
    with pytest.raises(SpecError, match=message) as info:
        parse_fragment(name, text, Path("changes") / name)
    assert f"changes/{name}" in str(info.value)


def test_fragment_type_comes_from_the_suffix():
    fragment = parse_fragment("123.known-issue.md", "  flash-attn needs sm80\n", Path("changes/123.known-issue.md"))
    assert (fragment.type, fragment.text) == ("known-issue", "flash-attn needs sm80")


# verify.json as `trainstack verify` writes it (the parts release reads, plus some it ignores)
VERIFY = {
    "schema_version": 1, "flavour": R128, "verdict": "fail", "reasons": ["suite torch-distributed: 2 failed"],
    "smoke": [{"name": "matmul", "status": "pass"}],
    "gate": {"max_failed_tests": 0, "total_failed": 2, "passed": False, "reasons": [], "suites": [
        {"name": "torch-nn", "command": "pytest", "status": "passed", "tests": 120, "failed": [], "flaky": ["t::a"],
         "known": [{"test": "t::b", "reason": "cuDNN bug", "link": "https://github.com/pytorch/pytorch/issues/1"}]},
        {"name": "torch-distributed", "command": "pytest", "status": "failed", "tests": 30, "failed": ["d::x", "d::y"],
         "known": []},
    ]},
}


def test_verify_json_is_read_as_verify_writes_it():
    found = parse_verify(json.dumps(VERIFY), R128, Path("build/x/verify.json"), "x")
    assert (found.verdict, found.tests_run, found.tests_failed, found.tests_allowed) == ("fail", 150, 2, 1)
    assert [(i.title, i.link) for i in found.known_issues] == [
        ("t::b: cuDNN bug", "https://github.com/pytorch/pytorch/issues/1")]
    assert found.reasons == ["suite torch-distributed: 2 failed"]
    no_suites = parse_verify(json.dumps({"verdict": "pass", "gate": None}), R128, Path("v.json"), "x")
    assert (no_suites.verdict, no_suites.tests_run, no_suites.tests_failed) == ("pass", None, None)
    old, new = two_releases()
    inputs = Inputs(current=new, previous=old, components=COMPONENTS, description="", fragments=[],
                    verification=[found, *read_verification(None, [N128])], bench={}, previous_bench={})
    text = render_markdown(make_notes(inputs, {}.get))
    assert f"| {R128} | fail | 150 | 2 | 1 |" in text
    assert f"| {N128} | not measured | — | — | — |" in text
    assert f"Why {R128} failed:\n\n- suite torch-distributed: 2 failed\n" in text
    assert f"- [t::b: cuDNN bug](https://github.com/pytorch/pytorch/issues/1) ({R128})" in text


def test_bad_verify_json_names_the_file_and_line():
    with pytest.raises(SpecError, match=r"build/x/verify.json:2: not valid JSON"):
        parse_verify('{"verdict":\n', "x", Path("build/x/verify.json"), "x")


def test_missing_results_are_not_measured(tmp_path):
    found = read_verification(tmp_path, [R128])
    assert [(v.slug, v.measured, v.verdict) for v in found] == [(R128, False, None)]
    old, new = two_releases()
    text = render_markdown(_notes(old, new))
    assert "| cu128-ubuntu2404-py312-release | not measured |" in text
    assert "Not measured: no bench results were given for this release." in text


def test_bench_lines_are_read_as_bench_writes_them():
    setup = {"model": "1b", "batch": 4, "seq": 4096, "world_size": 8}
    text = "\n".join([
        json.dumps({"kind": "config", "model": "1b"}),  # no mode: not a result
        json.dumps({**setup, "mode": "ac-full", "status": "ok", "tokens_per_s_per_gpu": 9000.0,
                    "tokens_per_s_total": 72000.0, "mfu": 0.41, "mem_allocated_gib": 40.5}),
        "",
        json.dumps({**setup, "world_size": 1, "mode": "eager", "status": "oom", "tokens_per_s_per_gpu": None,
                    "error": "CUDA out of memory"}),
    ])
    rows = parse_bench_lines(text, Path("b.jsonl"), "cu128")
    assert [(r.slug, r.model, r.setup, r.mode, r.status, r.tokens_per_s, r.mfu, r.peak_memory_gib) for r in rows] == [
        ("cu128", "1b", "b4 s4096 x8 GPUs", "ac-full", "ok", 9000.0, 0.41, 40.5),
        ("cu128", "1b", "b4 s4096", "eager", "oom", None, None, None)]
    with pytest.raises(SpecError, match=r"b.jsonl:2: not valid JSON"):
        parse_bench_lines('{"mode": "x"}\n{oops', Path("b.jsonl"), "")
    with pytest.raises(SpecError, match=r"b.jsonl:1: tokens_per_s_per_gpu: Input should be a valid number"):
        parse_bench_lines('{"model": "1b", "mode": "eager", "tokens_per_s_per_gpu": "fast"}', Path("b.jsonl"), "")


def test_performance_deltas_only_against_measured_previous_results():
    current = {(R128, "1b", "b4", m): BenchResult(slug=R128, model="1b", setup="b4", mode=m, tokens_per_s=v)
               for m, v in (("eager", 1100.0), ("compile", 1500.0))}
    current[(R128, "1b", "b4", "ac-none")] = BenchResult(slug=R128, model="1b", setup="b4", mode="ac-none", status="oom")
    previous = {(R128, "1b", "b4", "eager"): BenchResult(slug=R128, model="1b", setup="b4", mode="eager", tokens_per_s=1000.0)}
    rows = {r.mode: r for r in performance(current, previous)}
    assert rows["eager"].delta_percent == pytest.approx(10.0)
    assert rows["compile"].previous_tokens_per_s is None and rows["compile"].delta_percent is None
    old, new = two_releases()
    text = render_markdown(_notes(old, new, bench=current, previous_bench=previous))
    assert "| cu128-ubuntu2404-py312-release | 1b | b4 | eager | 1,100 | 1,000 | +10.0 % |" in text
    assert "| cu128-ubuntu2404-py312-release | 1b | b4 | compile | 1,500 | — | — | — | — |" in text
    assert "| cu128-ubuntu2404-py312-release | 1b | b4 | ac-none | oom | — | — | — | — |" in text
    assert "\n\n— : not measured.\n" in text


def test_driver_requirements_come_from_the_lookup_and_cpu_needs_none():
    old, new = two_releases()
    cpu = "cpu-ubuntu2404-py312-release"
    new = new.model_copy(update={"flavours": {**new.flavours, cpu: flavour({"torch": "2.11.0"}, cuda="cpu", slug=cpu)}})
    notes = _notes(old, new, drivers={"12.8": MinDriver("570.26", "https://docs.nvidia.com/x")})
    found = {d.slug: (d.min_driver, d.source) for d in notes.drivers}
    assert found[R128] == ("570.26", "https://docs.nvidia.com/x")
    assert found[cpu] == (None, None)
    unknown = _notes(old, new, drivers={})
    assert {d.slug: d.note for d in unknown.drivers}[R128] == "CUDA 12.8 is not in the rules: not known"


def _notes(old, new, *, bench=None, previous_bench=None, drivers=None):
    table = drivers or {}
    inputs = Inputs(current=new, previous=old, components=COMPONENTS, description="", fragments=[],
                    verification=read_verification(None, new.flavours), bench=bench or {},
                    previous_bench=previous_bench or {})
    return make_notes(inputs, table.get)


def test_driver_requirements_from_the_shipped_rules():
    from functools import partial

    from trainstack.release.drivers import rules_lookup
    from trainstack.rules import min_driver, shipped_rules

    rules = shipped_rules()
    lookup = partial(rules_lookup, rules)

    old, new = two_releases()
    odd = "cu999-ubuntu2404-py312-release"
    new = new.model_copy(update={"flavours": {**new.flavours, odd: flavour({"torch": "2.11.0"}, cuda="99.9", slug=odd)}})
    inputs = Inputs(current=new, previous=old, components=COMPONENTS, description="", fragments=[],
                    verification=[], bench={}, previous_bench={})
    found = {d.slug: d for d in make_notes(inputs, lookup).drivers}
    assert found[R128].min_driver == min_driver(rules, "12.8")
    assert found[R128].source == rules.cuda.driver.source
    assert (found[odd].min_driver, found[odd].note) == (None, "CUDA 99.9 is not in the rules: not known")
    assert f"| {R128} | 12.8 | {min_driver(rules, '12.8')} |" in render_markdown(make_notes(inputs, lookup))


def test_flavours_with_the_same_changes_share_one_heading():
    old, new = two_releases()
    r311, n311 = "cu128-ubuntu2404-py311-release", "cu128-ubuntu2404-py311-nightly"
    old = old.model_copy(update={"flavours": {**old.flavours, r311: old.flavours[R128], n311: old.flavours[N128]}})
    new = new.model_copy(update={"flavours": {**new.flavours, r311: new.flavours[R128], n311: new.flavours[N128]}})
    text = render_markdown(_notes(old, new))
    assert f"### Only in {n311}, {N128}\n\n- torch: 2.11.0.dev20261101 → 2.12.0.dev20261201\n" in text
    assert f"### Only in {r311}, {R128}\n\n- torch: 2.10.0 → 2.11.0\n" in text
    assert text.count("### Only in") == 2
