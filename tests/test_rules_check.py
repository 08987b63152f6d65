"""The rules data and the checker on known good and bad combinations."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import pytest

from trainstack import rules
from trainstack.cli import main
from trainstack.errors import RuleViolation, SpecError
from trainstack.stackfile.compat import check_flavour, check_stack, errors, parse_archs, torch_version
from trainstack.stackfile import Flavour, load_stack
from trainstack.stackfile.load import parse_stack

from .conftest import EXAMPLES

STACK = """\
[stack]
name = "t"
release = "1"
image = "trainstack/t"

[components]
torch = {{ version = "{torch}", group = "torch" }}
{extra}

[matrix]
cuda = ["{cuda}"]
os = ["{os}"]
python = ["{python}"]

[build]
system_packages = {system}
"""


def stack(torch="==2.11.0", cuda="13.0", os="ubuntu24.04", python="3.12", extra="", system="[]"):
    text = STACK.format(torch=torch, cuda=cuda, os=os, python=python, extra=extra, system=system)
    return parse_stack(text, Path("stack.toml"))


SHIPPED = rules.shipped_rules()


def rule_errors(spec) -> list[str]:
    return [f"{f.rule}: {f.message}" for f in errors(check_stack(spec))]


def test_data_answers() -> None:
    assert rules.cuda_variants(SHIPPED, "2.11.0") == ["cpu", "cu126", "cu128", "cu130"]
    assert rules.pypi_default_variant(SHIPPED, "2.10.0") == "cu128"
    assert rules.pypi_default_variant(SHIPPED, "2.11.0") == "cu130"
    assert rules.min_driver(SHIPPED, "13.0") == "580.65.06"
    assert rules.min_driver(SHIPPED, "12.8") == "570.26"
    assert "120" in rules.cuda_archs(SHIPPED, "12.8") and "70" not in rules.cuda_archs(SHIPPED, "13.0")
    assert rules.torch_pythons(SHIPPED, "2.11.0")[0] == "3.10"
    assert rules.python_platform(SHIPPED, "ubuntu22.04") == "x86_64-manylinux_2_35"
    assert rules.nvcc_package(SHIPPED, "12.8") == "nvidia-cuda-nvcc-cu12==12.8.*"
    assert rules.nvcc_package(SHIPPED, "13.0") == "nvidia-cuda-nvcc==13.0.*"


def test_index_choice_pypi_default_versus_pytorch_index() -> None:
    assert rules.index_for(SHIPPED, "2.11.0", "cu130", "release") is None
    assert rules.index_for(SHIPPED, "2.11.0", "cu128", "release") == "https://download.pytorch.org/whl/cu128"
    assert rules.index_for(SHIPPED, "2.10.0", "cu128", "release") is None
    assert rules.index_for(SHIPPED, "2.11.0", "cpu", "release") == "https://download.pytorch.org/whl/cpu"
    assert rules.index_for(SHIPPED, "2.11.0", "cu130", "nightly") == "https://download.pytorch.org/whl/nightly/cu130"
    with pytest.raises(RuleViolation, match="no 'cu132' wheels"):
        rules.index_for(SHIPPED, "2.11.0", "cu132", "release")


def test_every_rule_has_a_message_and_a_public_source() -> None:
    data = SHIPPED
    cited = [data.torch.index, data.torch.variants, data.torch.pythons, data.torch.nightly, data.cuda.driver, data.cuda.archs, data.cuda.nvcc,
             data.platforms.glibc, data.extensions.flash_attn, *data.extensions.deepspeed.ops.values()]
    cited_sources = [c.source for c in cited] + [r.source for r in data.torch.releases.values()]
    cited_sources += [o.source for o in data.platforms.os.values()]
    for source in cited_sources:
        assert urlparse(source).scheme == "https" and urlparse(source).netloc
    assert all(c.message for c in cited)
    ops = data.extensions.deepspeed.ops
    assert "libaio-dev" in ops["async_io"].system_packages
    assert ops["sparse_attn"].torch == ">=1.5,<2.0"
    assert "oneCCL" in ops["ccl_comm"].message
    assert data.extensions.flash_attn.min_arch == "80"


def test_examples_hold() -> None:
    for name in ("torch-cuda", "cpu-minimal"):
        assert errors(check_stack(load_stack(EXAMPLES / f"{name}.toml"))) == []


def test_good_combination_reports_driver_and_index() -> None:
    findings = check_stack(stack(cuda="12.8"))
    messages = [f.message for f in findings]
    assert "CUDA 12.8 needs NVIDIA driver >= 570.26 on Linux x86_64" in messages
    assert any("https://download.pytorch.org/whl/cu128" in m for m in messages)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"cuda": "13.2"}, "cuda.driver: CUDA 13.2 is not known"),
        ({"cuda": "12.9"}, "torch.variant: torch 2.11 publishes no cu129 wheels"),
        ({"python": "3.10", "torch": "==2.15.0"}, "torch.python: torch 2.15 has no wheels for Python 3.10"),
        ({"torch": ">=3"}, "torch.release: torch '>=3' admits no torch release"),
    ],
)
def test_bad_torch_combinations(kwargs, expected) -> None:
    assert any(e.startswith(expected) for e in rule_errors(stack(**kwargs))), rule_errors(stack(**kwargs))


def test_torch_range_takes_newest_known_minor() -> None:
    spec = stack(torch=">=2.9,<2.12")
    assert torch_version(spec, Flavour("13.0", "ubuntu24.04", "3.12", "release")) == "2.11"


def test_flash_attn_needs_sm80() -> None:
    extra = 'flash-attn = { version = "==2.8.3", source = "sdist", build_env = { FLASH_ATTN_CUDA_ARCHS = "75;90" } }'
    assert any("flash_attn.arch" in e and "sm_75" in e for e in rule_errors(stack(extra=extra)))
    good = extra.replace("75;90", "80;90")
    assert rule_errors(stack(extra=good)) == []


def test_flash_attn_needs_cuda() -> None:
    extra = 'flash-attn = "==2.8.3"'
    assert any("flash_attn.arch" in e for e in rule_errors(stack(cuda="cpu", extra=extra)))


def test_arch_list_must_be_targetable_by_the_flavours_cuda() -> None:
    extra = (
        'apex = { git = "https://example.org/apex", commit = "abcdef1", '
        'build_env = { TORCH_CUDA_ARCH_LIST = "7.0;9.0" } }'
    )
    assert any("cannot target sm_70" in e for e in rule_errors(stack(cuda="13.0", extra=extra)))
    assert rule_errors(stack(cuda="12.8", extra=extra)) == []


DEEPSPEED = 'deepspeed = {{ version = "==0.18.9", build_env = {{ {env} }} }}'


@pytest.mark.parametrize(
    ("env", "system", "expected"),
    [
        ('DS_BUILD_AIO = "1"', "[]", "deepspeed.async_io"),
        ('DS_BUILD_OPS = "1", DS_BUILD_SPARSE_ATTN = "0", DS_BUILD_CCL_COMM = "0"', "[]", "deepspeed.async_io"),
        ('DS_BUILD_CCL_COMM = "1"', '["libaio-dev"]', "deepspeed.ccl_comm"),
        ('DS_BUILD_SPARSE_ATTN = "1"', "[]", "deepspeed.sparse_attn"),
        ('DS_BUILD_OPS = "1", DS_BUILD_AIO = "0", DS_BUILD_CCL_COMM = "0"', "[]", "deepspeed.sparse_attn"),
    ],
)
def test_deepspeed_ops_and_their_needs(env, system, expected) -> None:
    found = rule_errors(stack(extra=DEEPSPEED.format(env=env), system=system))
    assert any(e.startswith(expected) for e in found), found


@pytest.mark.parametrize(
    ("env", "system"),
    [
        ('DS_BUILD_AIO = "1"', '["libaio-dev"]'),
        ('DS_BUILD_OPS = "1", DS_BUILD_SPARSE_ATTN = "0", DS_BUILD_CCL_COMM = "0"', '["libaio1t64"]'),
        ('DS_BUILD_CCL_COMM = "1"', '["intel-oneapi-ccl-devel"]'),
        ('DS_BUILD_OPS = "0"', "[]"),
    ],
)
def test_deepspeed_ops_satisfied(env, system) -> None:
    assert rule_errors(stack(extra=DEEPSPEED.format(env=env), system=system)) == []


def test_sparse_attn_fine_on_old_torch() -> None:
    spec = stack(torch="==1.13.1", extra=DEEPSPEED.format(env='DS_BUILD_SPARSE_ATTN = "1"'))
    flavour = Flavour("13.0", "ubuntu24.04", "3.12", "release")
    assert not [f for f in check_flavour(spec, flavour) if f.rule == "deepspeed.sparse_attn"]


def test_parse_archs() -> None:
    assert parse_archs("8.0;9.0+PTX") == ["80", "90"]
    assert parse_archs("80, 90a sm_100") == ["80", "90a", "100"]


def test_check_verb_exit_codes(write_stack, capsys) -> None:
    good = write_stack((EXAMPLES / "torch-cuda.toml").read_text(), "good")
    assert main(["check", str(good)]) == 0
    assert "all rules hold for 12 flavour(s)" in capsys.readouterr().out
    text = (EXAMPLES / "torch-cuda.toml").read_text()
    bad_text = text.replace('FLASH_ATTN_CUDA_ARCHS = "90"', 'FLASH_ATTN_CUDA_ARCHS = "75"')
    bad = write_stack(bad_text, "bad")
    assert main(["check", str(bad)]) == RuleViolation.exit_code
    assert "sm80" in capsys.readouterr().out


PY315_RULES = """
[rules.platforms.os."ubuntu26.04"]
glibc = "2.42"
platform = "x86_64-manylinux_2_42"
source = "https://packages.ubuntu.com/resolute/libc6"
pythons = ["3.15"]
"""


def test_a_stack_is_validated_against_its_own_rules_whatever_was_loaded_before(tmp_path: Path) -> None:
    """The rules in effect are built before validation and handed to it; no stack loaded earlier in
    the process changes what the next one may say. Python 3.15 is known only through a stack's own
    [rules] (an OS archive packaging it)."""
    plain = STACK.format(torch="==2.11.0", cuda="13.0", os="ubuntu24.04", python="3.15", extra="", system="[]")
    with_rules = STACK.format(torch="==2.11.0", cuda="13.0", os="ubuntu26.04", python="3.15", extra="", system="[]")
    with_rules += PY315_RULES

    def accepted(text: str) -> bool:
        path = tmp_path / "stack.toml"
        path.write_text(text)
        try:
            load_stack(path)
        except SpecError as exc:
            assert "matrix.python: Python 3.15 is not in the rules data" in str(exc)
            return False
        return True

    assert accepted(with_rules)  # its own rules know 3.15, in a process that loaded nothing before it
    assert not accepted(plain)  # alone: refused
    assert accepted(with_rules)
    assert not accepted(plain)  # right after a stack whose rules add 3.15: still refused
    assert accepted(with_rules)
    loaded = tmp_path / "stack.toml"
    loaded.write_text(with_rules)
    assert "ubuntu26.04" in load_stack(loaded).rules_in_effect.platforms.os
    assert "ubuntu26.04" not in rules.shipped_rules().platforms.os  # the shipped rules are untouched


def test_flash_attn_archs_are_one_rule_wherever_they_are_written() -> None:
    """[toolchain] archs reach flash-attn's build as FLASH_ATTN_CUDA_ARCHS: sm_70 and sm_75 there
    are refused as they are in flash-attn's own build_env."""
    extra = 'flash-attn = { version = "==2.8.3", source = "sdist" }\n\n[toolchain]\narchs = ["70", "75", "90"]'
    found = rule_errors(stack(cuda="12.8", extra=extra))
    assert any(e.startswith("flash_attn.arch:") and "[toolchain] archs" in e and "sm_70, sm_75" in e for e in found), found
    assert not any("flash_attn" in e for e in rule_errors(stack(cuda="12.8", extra=extra.replace('"70", "75", ', ""))))
    # flash-attn's own list wins where it sets every variable: the toolchain's is not passed to it
    own = extra.replace('source = "sdist"', 'source = "sdist", build_env = { FLASH_ATTN_CUDA_ARCHS = "90", TORCH_CUDA_ARCH_LIST = "9.0" }')
    assert not any("flash_attn" in e for e in rule_errors(stack(cuda="12.8", extra=own)))
