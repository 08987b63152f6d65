"""Releases across lineages: a flavour that moved to another CUDA (or OS, or Python) release is
diffed against the one it follows, with the move stated; base images and build settings recorded
by lock and diffed; components not built read "not built", never "pass"; a verify.json of
another stack or another lock refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.release_seed import seed  # noqa: F401  (the fixture: the CoreWeave pair with current hashes)
from trainstack.cli import main
from trainstack.lock.manifest import LockedFlavour, Manifest, load_manifest
from trainstack.release.diff import diff_manifests, match_flavours

SHA = "0" * 64


def flavour(cuda: str, packages: dict[str, str], *, python: str = "3.10", os: str = "ubuntu22.04",
            channel: str = "release", base: str = "", settings: dict[str, str] | None = None) -> LockedFlavour:
    slug = f"cu{cuda.replace('.', '')}-{os.replace('.', '')}-py{python.replace('.', '')}-{channel}"
    return LockedFlavour(cuda=cuda, os=os, python=python, channel=channel, lock_file=f"locks/{slug}.txt",
                         lock_sha256=SHA, index=None, cache_key=f"img-{slug}-{'0' * 12}", packages=packages,
                         base_image=base, build_settings=settings or {})


def manifest(release: str, *flavours: LockedFlavour) -> Manifest:
    return Manifest(stack="s", release=release, image="r/img", inputs_hash=SHA, uv_version="0.9", generated_at="t",
                    flavours={f.lock_file.removeprefix("locks/").removesuffix(".txt"): f for f in flavours})


def test_a_cuda_move_is_diffed_component_by_component_and_stated() -> None:
    old = manifest("24.11", flavour("12.4", {"torch": "2.5.1", "deepspeed": "0.15.4"},
                                    base="nvidia/cuda:12.4.1-devel", settings={"compiler_cache": "ccache 2G"}))
    new = manifest("25.07", flavour("12.6", {"torch": "2.7.0", "deepspeed": "0.17.2", "peft": "0.16.0"},
                                    base="nvidia/cuda:12.6.3-devel", settings={"compiler_cache": "ccache 5G"}))
    updates = diff_manifests(old, new, ["torch", "deepspeed", "peft"])
    assert [c.text() for c in updates.common] == ["deepspeed: 0.15.4 → 0.17.2", "peft: added 0.16.0",
                                                  "torch: 2.5.1 → 2.7.0"]
    assert updates.added_flavours == updates.removed_flavours == []
    assert updates.followed == {"cu126-ubuntu2204-py310-release": "cu124-ubuntu2204-py310-release"}
    assert updates.moves == {"cu126-ubuntu2204-py310-release": ["CUDA 12.4 → 12.6"]}
    assert [c.text() for c in updates.settings["cu126-ubuntu2204-py310-release"]] == [
        "base image: nvidia/cuda:12.4.1-devel → nvidia/cuda:12.6.3-devel", "compiler_cache: ccache 2G → ccache 5G"]


def test_matching_is_one_to_one_by_channel_and_nearest_axes() -> None:
    old = manifest("1", flavour("12.4", {}), flavour("12.4", {}, python="3.12"), flavour("12.4", {}, channel="nightly"))
    new = manifest("2", flavour("12.6", {}), flavour("12.8", {}, python="3.12"), flavour("13.0", {}, python="3.11"))
    matched = match_flavours(old, new)
    # py310 follows py310 and py312 follows py312 (one axis moved each); no third flavour of the
    # release channel is left to follow, and the nightly one is never taken for a release one
    assert matched == {"cu126-ubuntu2204-py310-release": "cu124-ubuntu2204-py310-release",
                       "cu128-ubuntu2204-py312-release": "cu124-ubuntu2204-py312-release"}
    updates = diff_manifests(old, new, [])
    assert updates.added_flavours == ["cu130-ubuntu2204-py311-release"]
    assert updates.removed_flavours == ["cu124-ubuntu2204-py310-nightly"]


def test_manifests_written_before_base_images_and_settings_were_recorded_still_load(seed: Path) -> None:  # noqa: F811
    loaded = load_manifest(seed / "before/torch-extras.lock/stack.lock.json")
    (entry,) = loaded.flavours.values()
    assert (entry.base_image, entry.build_settings) == ("", {})
    # and such a manifest shows no settings change rather than every setting as new
    assert diff_manifests(loaded, load_manifest(seed / "after/torch-extras.lock/stack.lock.json"), []).settings == {}


def _release(seed: Path, results: Path, out: Path) -> int:  # noqa: F811
    previous = seed / "before/torch-extras.lock/stack.lock.json"
    return main(["release", str(seed / "after/torch-extras.toml"), "--previous", str(previous),
                 "--results", str(results), "--out", str(out)])


def _verify_json(results: Path, **fields) -> None:
    folder = results / "cu121-ubuntu2204-py310-release"
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"schema_version": 1, "verdict": "pass", "reasons": [], "skipped": [], "gate": None, **fields}
    (folder / "verify.json").write_text(json.dumps(doc))


def test_components_not_built_read_not_built_never_pass(seed: Path, tmp_path: Path) -> None:  # noqa: F811
    _verify_json(tmp_path / "results", not_built=["deepspeed", "flash-attn", "apex"], stack_name="torch-extras")
    assert _release(seed, tmp_path / "results", tmp_path / "out") == 0
    markdown = (tmp_path / "out" / "RELEASE.md").read_text()
    assert "| cu121-ubuntu2204-py310-release | not built |" in markdown
    assert "| pass |" not in markdown
    assert "not built (build --skip-sources), so not checked: deepspeed, flash-attn, apex" in markdown
    (verification,) = json.loads((tmp_path / "out" / "release.json").read_text())["verification"]
    assert verification["verdict"] == "not built"
    assert verification["not_built"] == ["deepspeed", "flash-attn", "apex"]


@pytest.mark.parametrize(("field", "value", "said"), [
    ("stack_name", "acs-training", "verified stack 'acs-training', not 'torch-extras'"),
    ("lock_inputs_hash", "f" * 64, "verified lock ffffffffffff, not the current"),
])
def test_a_verify_result_of_another_stack_or_lock_is_refused(
    seed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: str, said: str,  # noqa: F811
) -> None:
    _verify_json(tmp_path / "results", **{field: value})
    assert _release(seed, tmp_path / "results", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "verify.json" in err and said in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_a_verify_result_of_this_stack_and_lock_is_taken(seed: Path, tmp_path: Path) -> None:  # noqa: F811
    current = load_manifest(seed / "after/torch-extras.lock/stack.lock.json")
    _verify_json(tmp_path / "results", stack_name="torch-extras", lock_inputs_hash=current.inputs_hash)
    assert _release(seed, tmp_path / "results", tmp_path / "out") == 0
    assert "| cu121-ubuntu2204-py310-release | pass |" in (tmp_path / "out" / "RELEASE.md").read_text()


@pytest.mark.python("3.11")  # builds a py311 flavour
def test_verify_records_what_it_verified_and_release_shows_not_built(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.build_fixtures import make_lock, source_stack
    from trainstack.lock.manifest import manifest_path
    from trainstack.stackfile import load_stack

    stack, _, _ = source_stack(tmp_path)
    make_lock(stack)
    build = tmp_path / "build"
    assert main(["build", str(stack), "--build-dir", str(build), "--skip-sources"]) == 0
    assert main(["verify", str(stack), "--build-dir", str(build), "--skip", "linkcheck"]) == 0
    (written,) = build.glob("*/verify.partial.json")
    result = json.loads(written.read_text())
    assert result["stack_name"] == load_stack(stack).stack.name
    assert result["lock_inputs_hash"] == load_manifest(manifest_path(stack)).inputs_hash
    capsys.readouterr()
    assert main(["release", str(stack), "--results", str(build), "--out", str(tmp_path / "notes")]) == 0
    (verification,) = json.loads((tmp_path / "notes" / "release.json").read_text())["verification"]
    assert (verification["verdict"], verification["not_built"]) == ("not built", ["tsdemo"])


def test_matching_is_bounded_by_a_hostile_manifests_size() -> None:
    import time

    from trainstack.release.diff import MAX_PAIRS

    many = int(MAX_PAIRS**0.5) + 1
    old = manifest("1", *(flavour("12.4", {}, python=f"3.{n}") for n in range(many)))
    new = manifest("2", *(flavour("12.6", {}, python=f"3.{n}") for n in range(many)))
    start = time.perf_counter()
    updates = diff_manifests(old, new, [])
    assert time.perf_counter() - start < 5
    assert (len(updates.added_flavours), len(updates.removed_flavours), updates.followed) == (many, many, {})
