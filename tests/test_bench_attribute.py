"""bench --in and bench --attribute with real uv venvs on the CPU.

Two releases of a stack differ in three components, built here as wheels: tinykernels 2.0 is a
planted slowdown (a torch plugin, loaded by torch's backend autoload, whose newer version audits
every linear product at several float64 perturbations: real work inside the training step),
tinyutil and tinyextra change version and nothing else. The attribution must name tinykernels
with its share and call the other two within noise. One set of venvs per module (hardlinked from
uv's cache), each over this interpreter (--over: the stacks leave torch to it, as an image that
ships torch does), the tiny preset, few steps.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from trainstack.bench.attribute import Group, changes_between  # noqa: E402
from trainstack.bench.between import build_steps, releases  # noqa: E402
from trainstack.cli import main  # noqa: E402
from trainstack.lock import lock_stack  # noqa: E402

TORCH_DIST = importlib.metadata.version("torch")
PY = f"{sys.version_info.major}.{sys.version_info.minor}"
SLUG = f"cpu-debian12-py{sys.version_info.major}{sys.version_info.minor}-release"
TINY = ["--preset", "tiny", "--seq", "64", "--steps", "32", "--warmup", "2", "--modes", "eager", "--device", "cpu"]

PLAIN = "def autoload():\n    pass\n"
# the newer tinykernels: every linear product checked against float64 products at AUDITS perturbations
AUDITED = '''import torch
import torch.nn.functional as F

_linear = F.linear
AUDITS = 48


def audited_linear(input, weight, bias=None):
    out = _linear(input, weight, bias)
    x, w = input.detach().double(), weight.detach().double()
    for k in range(AUDITS):
        reference = _linear(x * (1 + 10.0 ** -(k % 6 + 3)), w)
        if bias is None:
            torch.testing.assert_close(out.detach().double(), reference, rtol=1e-2, atol=1e-2)
    return out


def autoload():
    F.linear = audited_linear
'''


def wheel(folder: Path, name: str, version: str, code: str, requires: tuple[str, ...] = ()) -> Path:
    """A pure-Python wheel whose module torch loads at import (its 'torch.backends' entry point)."""
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {f"{name}/__init__.py": code, f"{info}/METADATA": metadata,
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
             f"{info}/entry_points.txt": f"[torch.backends]\n{name} = {name}:autoload\n"}

    def digest(text: str) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()

    record = "".join(f"{path},sha256={digest(text)},{len(text.encode())}\n" for path, text in files.items()) + f"{info}/RECORD,,\n"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in {**files, f"{info}/RECORD": record}.items():
            archive.writestr(member, text)
    return path


def stack(folder: Path, release: str, components: dict[str, str], links: list[str]) -> Path:
    """A CPU stack of ``components``, torch left out: the image (here, this interpreter: --over)
    ships it."""
    folder.mkdir(parents=True)
    lines = [f'{name} = "=={version}"' for name, version in components.items()]
    path = folder / "stack.toml"
    path.write_text(f'[stack]\nname = "planted"\nrelease = "{release}"\nimage = "trainstack/planted"\n\n'
                    f'[index]\nfind_links = [' + ", ".join(f'"{u}"' for u in links) + ']\npytorch = false\n\n[components]\n'
                    + "\n".join(lines) + f'\n\n[matrix]\ncuda = ["cpu"]\nos = ["debian12"]\npython = ["{PY}"]\n', encoding="utf-8")
    lock_stack(path)
    return path


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("wheels")
    for name, version, code, requires in (
        ("tinykernels", "1.0", PLAIN, ()), ("tinykernels", "2.0", AUDITED, ()), ("tinyutil", "1.0", PLAIN, ()),
        ("tinyutil", "1.1", PLAIN, ()), ("tinyextra", "1.0", PLAIN, ()), ("tinyextra", "1.1", PLAIN, ()),
        ("tinyutil", "1.2", PLAIN, ("tinyextra>=1.1",)),  # needs the newer tinyextra: no step of its own
    ):
        wheel(folder, name, version, code, requires)
    return folder.as_uri()


@pytest.fixture(scope="module")
def attributed(wheels: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict, Path]:
    """The attribution run once: its exit code, its JSON document and its --out folder."""
    root = tmp_path_factory.mktemp("planted")
    previous = stack(root / "previous", "2026.1.0", {"tinykernels": "1.0", "tinyutil": "1.0", "tinyextra": "1.0"}, [wheels])
    current = stack(root / "current", "2026.2.0", {"tinykernels": "2.0", "tinyutil": "1.1", "tinyextra": "1.1"}, [wheels])
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "1")  # a 2-core machine shared with other work: no spinning threads
        patch.chdir(root)  # the steps' venvs go under build/bench-environments/
        code = main(["bench", *TINY, "--attribute", str(previous), str(current), "--over", sys.executable, "--repeats", "3",
                     "--out", str(root / "out"), "-o", str(root / "attribution.json")])
    document = json.loads((root / "attribution.json").read_text()) if (root / "attribution.json").is_file() else {}
    return code, document, root / "out"


def test_the_planted_component_is_named_with_its_share_and_the_others_are_within_noise(attributed) -> None:
    code, document, _ = attributed
    assert code == 0, document
    steps = {s["step"]: s for s in document["steps"]}
    assert list(steps) == ["base", "+tinykernels", "+tinyutil", "+tinyextra"]
    planted = steps["+tinykernels"]
    assert planted["changes"] == [{"name": "tinykernels", "before": "1.0", "after": "2.0"}]
    assert planted["confidence"] in ("clear", "above noise") and planted["change"] < 0
    assert document["total_confidence"] != "within noise" and document["total_change"] < 0
    assert planted["share"] > 0.5 and planted["share"] == max(s["share"] for s in document["steps"][1:])
    for name in ("+tinyutil", "+tinyextra"):
        assert steps[name]["confidence"] == "within noise", steps[name]
    assert sum(s["contribution"] for s in document["steps"][1:]) == pytest.approx(document["total_change"])
    assert document["headline"].startswith("training throughput -")
    assert "tinykernels 1.0 → 2.0: -" in document["headline"]
    assert "tinyutil 1.0 → 1.1: " in document["headline"] and document["headline"].count("within noise") >= 2
    assert all(len(s["repeats"]) == 3 for s in document["steps"]) and document["noise_floor"] > 0
    assert document["over"] == str(Path(sys.executable).absolute())


def test_every_row_carries_the_versions_of_its_environment(attributed) -> None:
    _, document, out = attributed
    rows = document["rows"]
    assert len(rows) == 12 and [r["environment"]["label"] for r in rows[:4]] == ["base", "+tinykernels", "+tinyutil", "+tinyextra"]
    expected = {"base": ("1.0", "1.0", "1.0"), "+tinykernels": ("2.0", "1.0", "1.0"), "+tinyutil": ("2.0", "1.1", "1.0"),
                "+tinyextra": ("2.0", "1.1", "1.1")}
    for row in rows:
        env = row["environment"]
        packages = env["packages"]
        assert (packages["tinykernels"], packages["tinyutil"], packages["tinyextra"]) == expected[env["label"]]
        # torch.__version__ against the distribution's own version: PyPI's CUDA build says 2.13.0+cu130 and 2.13.0
        assert env["torch"] == torch.__version__ and packages["torch"] == TORCH_DIST and env["python"].startswith(PY)
        assert Path(env["executable"]).parent.parent.parent.name == SLUG  # each step in its own venv
        assert not list(Path(env["executable"]).parent.parent.glob("lib/python*/site-packages/torch"))  # torch is --over's
    for step in document["steps"]:
        assert step["environment"]["packages"]["torch"] == TORCH_DIST
    written = {p.name for p in out.iterdir()}
    assert "bench-tiny-b1-s64-2026.1.0-2026.2.0.jsonl" in written and "bench-tiny-b1-s64-2026.1.0-2026.2.0.attribution.json" in written


def test_bench_in_two_environments_with_the_noise_floor(attributed, capsys: pytest.CaptureFixture[str]) -> None:
    _, document, _ = attributed
    base, release = (Path(r["environment"]["executable"]).parent.parent for r in document["rows"][:4:3])
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "1")
        code = main(["bench", *TINY, "--in", str(base), "--in", str(release / "bin" / "python"), "--repeats", "2", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0
    first, second = result["environments"]
    assert (first["environment"], first["confidence"]) == (str(base), "baseline")
    assert second["confidence"] != "within noise" and second["change"] < 0, second  # tinykernels 2.0 runs there
    assert result["noise_floor"] > 0 and len(result["rows"]) == 4
    assert {r["environment"]["packages"]["tinykernels"] for r in result["rows"]} == {"1.0", "2.0"}


def test_a_missing_or_torchless_environment_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", *TINY, "--over", sys.executable]) == 2
    assert "--over: only with --attribute" in capsys.readouterr().err
    assert main(["bench", *TINY, "--in", str(tmp_path / "nowhere")]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: --in {tmp_path / 'nowhere'}: no such venv or Python interpreter")
    subprocess.run(["uv", "venv", "-q", str(tmp_path / "bare"), "--python", sys.executable], check=True)
    assert main(["bench", *TINY, "--in", str(tmp_path / "bare")]) == 6
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "has no torch" in lines[0] and lines[0].startswith("error: --in ")


def test_a_step_uv_cannot_resolve_is_named_and_joined_to_the_next(wheels: str, tmp_path: Path) -> None:
    """tinyutil 1.2 needs tinyextra 1.1: '+tinyutil' alone does not resolve; uv's reason is kept and
    the step becomes '+tinyutil+tinyextra', which is the new release itself."""
    previous = stack(tmp_path / "a", "2026.1.0", {"tinyutil": "1.0", "tinyextra": "1.0"}, [wheels])
    current = stack(tmp_path / "b", "2026.2.0", {"tinyutil": "1.2", "tinyextra": "1.1"}, [wheels])
    before, after = releases(previous, current, None)
    groups = [Group("tinyutil", tuple(changes_between({"tinyutil": "1.0"}, {"tinyutil": "1.2"}))),
              Group("tinyextra", tuple(changes_between({"tinyextra": "1.0"}, {"tinyextra": "1.1"})))]
    built = build_steps(before, after, groups, tmp_path / "environments")
    assert [g.name for g in built.groups] == ["tinyutil+tinyextra"] and len(built.pythons) == 2
    assert len(built.unresolved) == 1 and built.unresolved[0].startswith("+tinyutil alone does not resolve: ")
    assert "tinyextra" in built.unresolved[0] and built.groups[0].note == built.unresolved[0]


def test_release_notes_compare_and_page_show_the_attribution(attributed, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, document, out = attributed
    root = out.parent
    notes = tmp_path / "notes"
    assert main(["release", str(root / "current" / "stack.toml"), "--previous", str(root / "previous" / "stack.lock" / "stack.lock.json"),
                 "--results", str(out), "--out", str(notes)]) == 0
    markdown = (notes / "RELEASE.md").read_text()
    assert "### What changed the speed: 2026.1.0 → 2026.2.0, tiny eager b1 s64" in markdown
    headline = next(line for line in markdown.splitlines() if line.startswith("training throughput"))
    assert headline.replace("\\", "") == document["headline"]  # Markdown's escapes aside, bench's own words
    assert "| +tinykernels | tinykernels 1.0 → 2.0 |" in markdown and "| +tinyextra | tinyextra 1.0 → 1.1 |" in markdown
    published = json.loads((notes / "release.json").read_text())["attribution"][0]
    assert [s["step"] for s in published["steps"]] == ["base", "+tinykernels", "+tinyutil", "+tinyextra"]
    assert published["headline"] == document["headline"]
    assert not any(r["model"] == "tiny" for r in json.loads((notes / "release.json").read_text())["performance"])  # the steps are no flavour's figures
    page = (notes / "release.html").read_text()
    assert '<table class="attribution">' in page and "tinykernels 1.0 → 2.0" in page
    assert 'alt="contribution of each step to the change of tiny eager b1 s64 · 2026.1.0 → 2026.2.0: +tinykernels -' in page
    capsys.readouterr()
    jsonl = out / "bench-tiny-b1-s64-2026.1.0-2026.2.0.jsonl"
    assert main(["bench", "--compare", str(jsonl), str(jsonl), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["attributions"][0]["headline"] == document["headline"]
    assert "What changed the speed: 2026.1.0 → 2026.2.0" in captured.err and document["headline"] in captured.err


def test_groups_put_torch_with_its_cuda_libraries_first_then_each_component_in_the_order_asked() -> None:
    from trainstack.bench.attribute import plan_groups

    before = {"torch": "2.5.1", "nvidia-cublas-cu12": "12.4.5.8", "triton": "3.1.0", "transformers": "4.46.2",
              "accelerate": "1.0.0", "deepspeed": "0.15.0", "numpy": "2.1.0", "tokenizers": "0.20.3"}
    after = {**before, "torch": "2.7.0", "nvidia-cublas-cu12": "12.6.4.1", "triton": "3.3.0", "transformers": "5.0.0",
             "accelerate": "1.2.0", "deepspeed": "0.16.0", "tokenizers": "0.22.0"}
    components = ["torch", "transformers", "accelerate", "deepspeed", "numpy"]
    groups = plan_groups(before, after, components)
    assert [g.name for g in groups] == ["torch", "transformers", "accelerate", "deepspeed"]  # tokenizers moves where needed
    assert [c.name for c in groups[0].changes] == ["nvidia-cublas-cu12", "torch", "triton"]
    assert groups[0].text() == "torch 2.5.1 → 2.7.0 (+2 more)"
    ordered = plan_groups(before, after, components, ["deepspeed", "transformers+accelerate"])
    assert [g.name for g in ordered] == ["torch", "deepspeed", "transformers+accelerate"]
    with pytest.raises(ValueError, match="'numpy' is no changed component; accepted: torch, transformers, accelerate, deepspeed"):
        plan_groups(before, after, components, ["numpy"])


def test_contributions_add_up_and_noise_is_judged_on_a_log_scale() -> None:
    from trainstack.bench.attribute import Delta, Figures, attribute, headline, plan_groups

    groups = plan_groups({"a": "1", "b": "1"}, {"a": "2", "b": "2"}, ["a", "b"])
    figures = [Figures("base", (100.0, 102.0, 98.0)), Figures("+a", (50.0, 51.0, 49.5)), Figures("+b", (50.5, 49.0, 50.0))]
    result = attribute(groups, figures)
    assert result.noise == pytest.approx(102 / 98 - 1)
    assert [s.delta.confidence for s in result.steps[1:]] == ["clear", "within noise"]
    assert sum(s.contribution for s in result.steps[1:]) == pytest.approx(result.total.change) == pytest.approx(-0.5)
    assert result.steps[1].share == pytest.approx(1.0) and result.steps[2].share == pytest.approx(0.0)
    assert headline(result) == "training throughput -50.0% (a 1 → 2: -50.0%; b 1 → 2: +0.0%, within noise)"
    assert Delta(1.0, 0.5).noise_multiple == pytest.approx(Delta(-0.5, 0.5).noise_multiple)  # a doubling, a halving

