"""examples/seeds: one stack per seed release, with its committed lock. Each checks and renders
(no build, no locking: CI stays cheap), and the ACS 25.07 notes against 24.11 list every version
change the seed's own notes list, the CUDA move, the base image and the build settings that moved;
CoreWeave's list its seven changes, apex's commit included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.release_seed import SEVEN
from trainstack.cli import main

SEEDS = Path(__file__).resolve().parent.parent / "examples" / "seeds"
STACKS = sorted(p.name for p in SEEDS.glob("*.toml") if not p.name.endswith("-known-issues.toml"))
ACS_CHANGES = [  # the seed's notes: torch, torchvision, deepspeed, transformers, vllm; added TE, peft, diffusers
    "deepspeed: 0.15.4 → 0.17.2",
    "diffusers: added 0.34.0",
    "megatron-core: 0.9.0 → 0.12.2",
    "peft: added 0.16.0",
    "torch: 2.5.1 → 2.7.0",
    "torchvision: 0.20.1 → 0.22.0",
    "transformer-engine: added 2.3.0",
    "transformers: 4.46.2 → 4.53.2",
    "vllm: 0.6.4.post1 → 0.9.2",
]


def test_there_is_a_stack_per_seed_release() -> None:
    assert STACKS == ["acs-training-24.11.toml", "acs-training-25.07.toml", "coreweave-torch-extras-2024.4.0.toml",
                      "coreweave-torch-extras-2024.5.0.toml", "deepspeed-prebuilt-ops.toml", "eessi-pytorch-2.1.2.toml"]


# The seeds' CUDA releases with extensions built from source, on Ubuntu: no nvcc wheel holds nvcc
# for CUDA 12 and Debian's archive is not an Ubuntu base's; their bases are NVIDIA's CUDA devel
# images of their release, whose nvcc their OCI builds take. A venv build needs a host nvcc of
# that release, which a host without nvcc lacks.
NEEDS_NVCC = {"acs-training-24.11.toml": "12.4", "acs-training-25.07.toml": "12.6",
              "coreweave-torch-extras-2024.4.0.toml": "12.1", "coreweave-torch-extras-2024.5.0.toml": "12.1",
              "deepspeed-prebuilt-ops.toml": "12.1"}


@pytest.mark.parametrize("name", STACKS)
def test_each_seed_stack_checks_and_renders_from_its_committed_lock(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))  # a host without nvcc, whatever this one has
    assert main(["check", str(SEEDS / name), "-v"]) == 0
    cuda = NEEDS_NVCC.get(name)
    routes = [line for line in capsys.readouterr().out.splitlines() if " toolchain.route: " in line]
    if cuda:
        (line,) = routes
        assert f"oci builds: the base image docker.io/nvidia/cuda:{cuda}." in line
        assert f"is NVIDIA's CUDA {cuda} devel image: nvcc {cuda} at /usr/local/cuda/bin/nvcc" in line
        assert f"venv builds: none (needs nvcc {cuda}; the host has no nvcc at CUDA_HOME/bin/nvcc" in line
    else:
        assert routes == []  # nothing built from source
    assert main(["render", str(SEEDS / name), "--out", str(tmp_path / "render")]) == 0
    capsys.readouterr()
    assert any((tmp_path / "render").rglob("Dockerfile*"))


def _release(tmp_path: Path, current: str, previous: str) -> tuple[dict, str]:
    out = tmp_path / "notes"
    assert main(["release", str(SEEDS / current), "--previous",
                 str(SEEDS / previous.replace(".toml", ".lock") / "stack.lock.json"), "--out", str(out)]) == 0
    return json.loads((out / "release.json").read_text()), (out / "RELEASE.md").read_text()


def test_acs_across_the_cuda_move_lists_every_change_and_the_move(tmp_path: Path) -> None:
    notes, markdown = _release(tmp_path, "acs-training-25.07.toml", "acs-training-24.11.toml")
    updates = notes["updates"]
    assert updates["added_flavours"] == updates["removed_flavours"] == []
    components = [c for c in updates["common"] if c["component"]]
    assert [f"{c['name']}: {c['old']} → {c['new']}" if c["old"] else f"{c['name']}: added {c['new']}"
            for c in components] == ACS_CHANGES
    for line in ACS_CHANGES:
        assert f"- {line}\n" in markdown
    slug = "cu126-ubuntu2204-py310-release"
    assert updates["moves"] == {slug: ["CUDA 12.4 → 12.6"]}
    assert f"{slug} follows cu124-ubuntu2204-py310-release: CUDA 12.4 → 12.6." in markdown
    html = (tmp_path / "notes" / "release.html").read_text()
    assert f"<p>{slug} follows cu124-ubuntu2204-py310-release: CUDA 12.4 → 12.6.</p>" in html
    assert "Base image and build settings of" in html and "ccache 5G" in html
    registry = "egslingjun-registry.cn-wulanchabu.cr.aliyuncs.com/egslingjun"
    assert [f["image"] for f in notes["flavours"]] == [f"{registry}/training-nv-pytorch:25.07-serverless"]  # the seed's tag
    settings = {c["name"]: (c["old"], c["new"]) for c in updates["settings"][slug]}
    assert settings == {
        "base image": ("docker.io/nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04",
                       "docker.io/nvidia/cuda:12.6.3-cudnn-devel-ubuntu22.04"),
        "compiler_cache": ("ccache 2G", "ccache 5G"),
        "deepspeed.jobs": ("CPUs / 1, at most 64 jobs", "CPUs / 3, at most 64 jobs"),  # divisor/cap, no fraction
    }
    # the seeds' own image names: ACS 24.11 was training-xpu-pytorch, 25.07 is training-nv-pytorch
    assert updates["image"] == {**updates["image"], "old": f"{registry}/training-xpu-pytorch",
                                "new": f"{registry}/training-nv-pytorch"}
    assert f"The image is renamed: `{registry}/training-xpu-pytorch` → `{registry}/training-nv-pytorch`." in markdown
    assert "The image is renamed: <code>" in html and "training-xpu-pytorch</code>" in html


def test_coreweave_lists_its_seven_changes_apex_commit_included(tmp_path: Path) -> None:
    notes, markdown = _release(tmp_path, "coreweave-torch-extras-2024.5.0.toml", "coreweave-torch-extras-2024.4.0.toml")
    components = [c for c in notes["updates"]["common"] if c["component"]]
    assert [f"{c['name']}: {c['old']} → {c['new']}" if c["old"] else f"{c['name']}: added {c['new']}"
            for c in components] == SEVEN
    assert "- apex: 2386a91 → a7de60e\n" in markdown


def test_the_eessi_known_issues_file_loads_with_a_reason_and_link_each() -> None:
    from trainstack.verify.suites.known_issues import load_known_issues

    known = load_known_issues(SEEDS / "eessi-known-issues.toml", SEEDS).known
    assert [k.test for k in known] == ["*test_cuda_expandable_segments*", "*distributed/test_c10d_nccl*"]
    assert all(k.reason and k.link.startswith("https://") for k in known)


def test_acs_attribution_across_the_cuda_move_is_planned_from_the_locks_and_carried_by_the_notes(tmp_path: Path) -> None:
    """bench --attribute pairs ACS 25.07's cu126 flavour with the cu124 one it follows (no shared
    slug); its plan from the committed locks puts torch with its CUDA libraries first, then each
    component; release --results carries the attribution into 25.07's notes. Measuring the steps
    needs CUDA 12.4 and 12.6 torch environments: the figures here are the renderer's input."""
    from trainstack.bench import attribute as attr
    from trainstack.bench.across import attribution_document
    from trainstack.bench.between import releases

    before, after = releases(SEEDS / "acs-training-24.11.lock" / "stack.lock.json", SEEDS / "acs-training-25.07.toml", None)
    assert (before.slug, after.slug) == ("cu124-ubuntu2204-py310-release", "cu126-ubuntu2204-py310-release")
    groups = attr.plan_groups(before.packages, after.packages, after.components, ["transformers", "deepspeed"])
    assert [g.name for g in groups] == ["torch", "transformers", "deepspeed", "megatron-core", "vllm", "transformer-engine",
                                        "peft", "diffusers"]
    assert groups[0].text().startswith("torch 2.5.1 → 2.7.0 (+") and any(c.name.startswith("nvidia-") for c in groups[0].changes)
    samples = [(100.0, 101.0, 99.0), (112.0, 113.0, 111.0), (112.5, 111.5, 113.0)] + [(112.0, 112.5, 111.5)] * 6
    result = attr.attribute(groups, [attr.Figures(n, s) for n, s in zip(["base", *(f"+{g.name}" for g in groups)], samples)])
    document = attribution_document(before, after, result, [], model="1b", mode="compile+bf16", batch=4, seq=4096, repeats=3)
    results = tmp_path / "results"
    results.mkdir()
    (results / "bench-1b-b4-s4096-24.11-25.07.attribution.json").write_text(json.dumps(document), encoding="utf-8")
    out = tmp_path / "notes"
    assert main(["release", str(SEEDS / "acs-training-25.07.toml"), "--previous",
                 str(SEEDS / "acs-training-24.11.lock" / "stack.lock.json"), "--results", str(results), "--out", str(out)]) == 0
    markdown = (out / "RELEASE.md").read_text()
    assert "### What changed the speed: 24.11 → 25.07" in markdown
    assert next(line for line in markdown.splitlines() if line.startswith("training throughput")).replace("\\", "") == document["headline"]
    assert document["headline"].startswith("training throughput +12.0% (torch 2.5.1 → 2.7.0 (+")
    assert "| +transformers | transformers 4.46.2 → 4.53.2 |" in markdown and "| +peft | peft 0.16.0 (added) |" in markdown
    assert json.loads((out / "release.json").read_text())["attribution"][0]["slug"] == after.slug
    assert '<table class="attribution">' in (out / "release.html").read_text()
