"""Mode strings, and activation checkpointing that changes memory but not the maths."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tests.clirun import assert_no_traceback
from trainstack.nn.decoder import Transformer  # noqa: E402
from trainstack.bench.modes import apply_checkpointing, apply_compile  # noqa: E402
from trainstack.nn.modes import Mode, parse_mode, parse_modes  # noqa: E402
from trainstack.nn.presets import PRESETS  # noqa: E402
from trainstack.errors import UsageError  # noqa: E402
from trainstack.memplan.costs import Choice  # noqa: E402
from trainstack.memplan.wrappers import choice_of  # noqa: E402


@pytest.mark.parametrize(
    ("text", "mode", "name"),
    [
        ("eager", Mode(), "eager"),
        ("compile", Mode(compile=True), "compile"),
        ("ac-none", Mode(), "eager"),
        ("ac-full", Mode(ac="full"), "ac-full"),
        ("ac-every-3", Mode(ac="every", every=3), "ac-every-3"),
        ("COMPILE+ac-selective", Mode(compile=True, ac="selective"), "compile+ac-selective"),
        ("ac-selective+compile", Mode(compile=True, ac="selective"), "compile+ac-selective"),
        ("planned", Mode(ac="planned"), "planned"),
        ("compile+planned", Mode(compile=True, ac="planned"), "compile+planned"),
        ("bf16", Mode(bf16=True), "eager+bf16"),
        ("bf16+compile", Mode(compile=True, bf16=True), "compile+bf16"),
        ("ac-full+bf16", Mode(ac="full", bf16=True), "ac-full+bf16"),
    ],
)
def test_parse_mode(text, mode, name):
    assert parse_mode(text) == mode
    assert parse_mode(text).name == name


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("fast", "unknown mode part 'fast'"),
        ("ac-every-0", "unknown mode part 'ac-every-0'"),
        ("ac-full+ac-selective", "more than one checkpointing choice"),
        ("eager+compile", "both eager and compile"),
    ],
)
def test_bad_modes_name_what_is_accepted(text, message):
    with pytest.raises(UsageError, match=message) as info:
        parse_mode(text)
    assert "accepted" in str(info.value)


def test_parse_modes_list():
    assert [m.name for m in parse_modes("eager, compile,ac-every-2")] == ["eager", "compile", "ac-every-2"]
    with pytest.raises(UsageError):
        parse_modes(" , ")


def test_every_n_wraps_every_nth_block():
    cfg = PRESETS["tiny"].__class__(**{**PRESETS["tiny"].to_dict(), "n_layers": 5})
    model = Transformer(cfg)
    apply_checkpointing(model, parse_mode("ac-every-2"))
    assert [choice_of(b) for b in model.layers] == [Choice.FULL, Choice.KEEP, Choice.FULL, Choice.KEEP, Choice.FULL]
    apply_checkpointing(model, parse_mode("ac-selective"))
    assert {choice_of(b) for b in model.layers} == {Choice.SELECTIVE}


def _loss_and_grads(mode: str, compiled: bool = False):
    torch.manual_seed(0)
    model = Transformer(PRESETS["tiny"])
    apply_checkpointing(model, parse_mode(mode))
    if compiled:
        apply_compile(model)
    tokens = torch.randint(0, 512, (2, 65), generator=torch.Generator().manual_seed(1))
    loss = model(tokens[:, :-1], tokens[:, 1:])
    loss.backward()
    # parameters in model order: wrappers change names, not the order
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("mode", ["ac-full", "ac-every-2", "ac-selective"])
def test_checkpointing_gives_the_same_loss_and_grads(mode):
    want_loss, want_grads = _loss_and_grads("ac-none")
    loss, grads = _loss_and_grads(mode)
    torch.testing.assert_close(loss, want_loss, rtol=1e-6, atol=1e-6)
    assert len(grads) == len(want_grads)
    for got, want in zip(grads, want_grads):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_compiled_selective_checkpointing_gives_the_same_loss_and_grads():
    want_loss, want_grads = _loss_and_grads("ac-none")
    loss, grads = _loss_and_grads("ac-selective", compiled=True)
    torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, want_grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_the_flash_part_parses_and_is_refused_with_planned():
    assert parse_mode("bf16+flash+compile") == Mode(compile=True, bf16=True, flash=True)
    assert parse_mode("compile+bf16+flash").name == "compile+bf16+flash"
    assert parse_mode("ac-full+flash").name == "ac-full+flash"
    with pytest.raises(UsageError, match=r"joins flash and planned, but memplan plans SDPA's attention only"):
        parse_mode("compile+planned+flash")


def _flash_attn_func_on_cpu(q, k, v, causal=False):
    """flash_attn_func's contract, (B, T, H, hd) in and out with fewer kv heads repeated, in
    torch's own attention: what the decoder's flash path must give the same result as SDPA with."""
    rep = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
    out = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
    return out.transpose(1, 2)


@pytest.mark.parametrize("kv_heads", [None, 4])  # the preset's grouped kv heads, and one kv head a head
def test_the_flash_layout_gives_the_sdpa_result(kv_heads):
    """The decoder's flash path (no transposes, rope on (B, T, H, hd), grouped kv heads passed as
    they are) computes what its SDPA path computes: loss and every gradient."""
    from trainstack.nn.decoder import Attention

    base = PRESETS["tiny"].to_dict()
    cfg = PRESETS["tiny"].__class__(**{**base, **({"n_kv_heads": kv_heads} if kv_heads else {})})
    results = []
    for flash in (False, True):
        torch.manual_seed(0)
        model = Transformer(cfg)
        for m in model.modules():
            if isinstance(m, Attention) and flash:
                m.flash_attn = _flash_attn_func_on_cpu
        tokens = torch.randint(0, 512, (2, 65), generator=torch.Generator().manual_seed(1))
        loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (want, want_grads), (got, grads) = results
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


def test_cli_refuses_flash_in_one_line_without_flash_attn(capsys):
    from trainstack.cli import main

    assert main(["bench", "--preset", "tiny", "--modes", "compile+flash", "--device", "cpu"]) == 6
    err = " ".join(capsys.readouterr().err.split())
    assert "--modes compile+flash: flash attention needs the flash-attn package, which this environment lacks" in err
    assert_no_traceback(err)


def test_flash_is_unavailable_on_a_cpu_and_for_a_hugging_face_model():
    from trainstack.bench import flash
    from trainstack.bench.modes import ModeUnavailable

    with pytest.raises(ModeUnavailable, match=r"^unavailable: flash needs the flash-attn package"):
        flash.require(torch.device("cpu"))
    with pytest.raises(ModeUnavailable, match=r"^unavailable: flash applies to the bench decoder's attention"):
        flash.use_flash_attn(torch.nn.Sequential(torch.nn.Linear(2, 2)))
