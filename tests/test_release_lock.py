"""Release notes between two real lock manifests of examples/stacks/cpu-minimal.toml (real uv).

``locked_pair`` (conftest.py) locks the example and a previous release of it once per test
session; each release test copies that pair into its own tmp_path.
"""

from __future__ import annotations


import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from tests.release_pair import EXAMPLE, PREVIOUS, STACK, copy_pair
from trainstack.lock.manifest import manifest_path
from trainstack.release.publish import make_release


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_notes_between_two_real_locks_list_exactly_the_changes(locked_pair, tmp_path):
    previous, current = copy_pair(locked_pair, tmp_path)
    assert (previous.release, current.release) == ("2026.11.0", "2026.12.0")
    (slug,) = current.flavours
    new = current.flavours[slug].packages
    for name, spec in (("numpy", ">=2.2,<2.5"), ("pytest", ">=8"), ("hypothesis", ">=6.100")):
        assert Version(new[name]) in SpecifierSet(spec)

    empty_results = tmp_path / "results"
    empty_results.mkdir()
    outcome = make_release(tmp_path / STACK, manifest_path(tmp_path / PREVIOUS), results=empty_results,
                           out=tmp_path / "out", drivers=lambda cuda: None)

    updates = outcome.notes.updates
    assert updates.per_flavour == {slug: []} and updates.added_flavours == updates.removed_flavours == []
    assert [(c.text(), c.component) for c in updates.common] == [
        (f"hypothesis: added {new['hypothesis']}", True),
        (f"numpy: 2.2.6 → {new['numpy']}", True),
        (f"pytest: 8.4.0 → {new['pytest']}", True),
        (f"sortedcontainers: added {new['sortedcontainers']}", False),
        ("tomli-w: removed (was 1.1.0)", False),
    ]
    markdown = (tmp_path / "out" / "RELEASE.md").read_text()
    assert f"- numpy: 2.2.6 → {new['numpy']}\n" in markdown
    assert f"`{current.image}:2026.12.0-{slug}`" in markdown
    assert f"`{current.flavours[slug].cache_key}`" in markdown
    # no results were given: every figure is "not measured", none is made up
    assert f"| {slug} | not measured |" in markdown
    assert "Not measured: no bench results were given for this release." in markdown


@pytest.mark.slow
def test_a_lock_that_no_longer_matches_its_stack_is_refused(locked_pair, tmp_path):
    from trainstack.errors import LockError

    copy_pair(locked_pair, tmp_path)
    stack = tmp_path / STACK
    stack.write_text(stack.read_text().replace('pytest = ">=8"', 'pytest = ">=8.1"'))
    with pytest.raises(LockError, match="no longer matches"):
        make_release(stack, manifest_path(tmp_path / PREVIOUS), results=tmp_path, out=tmp_path / "out",
                     drivers=lambda cuda: None)
    assert not (tmp_path / "out").exists()


TWO_PYTHONS_PREVIOUS = '''[components]
numpy = "==2.2.6"
pytest = "==8.4.0"
'''
TWO_PYTHONS_CURRENT = '''[components]
numpy = "==2.3.5"
pytest = "==8.4.0"
tomli-w = { version = "==1.2.0", when = { python = ">=3.12" } }
'''


def _two_pythons(components: str, release: str) -> str:
    text = EXAMPLE.read_text().replace('python = ["3.11"]', 'python = ["3.11", "3.12"]')
    head, rest = text.split("[components]\n", 1)
    _, tail = rest.split("\n[matrix]", 1)
    return head.replace('release = "2026.12.0"', f'release = "{release}"') + components + "\n[matrix]" + tail


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_changes_of_one_flavour_are_listed_under_it(tmp_path):
    from trainstack.lock import lock_stack

    stack, previous = tmp_path / STACK, tmp_path / PREVIOUS
    previous.parent.mkdir()
    previous.write_text(_two_pythons(TWO_PYTHONS_PREVIOUS, "2026.11.0"))
    stack.write_text(_two_pythons(TWO_PYTHONS_CURRENT, "2026.12.0"))
    lock_stack(previous)
    current = lock_stack(stack)
    py311, py312 = sorted(current.flavours)
    assert (py311, py312) == ("cpu-debian12-py311-release", "cpu-debian12-py312-release")

    outcome = make_release(stack, manifest_path(previous), results=tmp_path, out=tmp_path / "out",
                           drivers=lambda cuda: None)
    updates = outcome.notes.updates
    assert [c.text() for c in updates.common] == ["numpy: 2.2.6 → 2.3.5"]
    assert {slug: [c.text() for c in changes] for slug, changes in updates.per_flavour.items()} == {
        py311: [], py312: ["tomli-w: added 1.2.0"]}
    assert outcome.notes.versions.columns == [[py311], [py312]]
    assert outcome.notes.versions.rows["tomli-w"] == ["", "1.2.0"]
    assert f"### Only in {py312}\n\n- tomli-w: added 1.2.0\n" in (tmp_path / "out" / "RELEASE.md").read_text()
