"""memplan.plan on any model: Hugging Face architectures built from tiny configs (no download):
pre-norm and post-norm decoders, parallel blocks, fused projections, a mixture of experts.

Against real measurements on CPU: the saved bytes calibration predicts for a block against
the bytes autograd really saves (saved_tensors_hooks on the real block); the composed
peak against the live bytes of two whole training steps; apply() leaves loss and
gradients bit-identical; the optimizers' state bytes against torch's optimizers; models
memplan cannot plan get their one-line reason.
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from torch import nn  # noqa: E402

from trainstack import memplan  # noqa: E402
from trainstack.memplan import reference  # noqa: E402
from trainstack.memplan.blocks import UnplannableModel, find_blocks  # noqa: E402
from trainstack.memplan.costs import Choice, Overheads  # noqa: E402
from trainstack.memplan.memory import breakdown  # noqa: E402
from trainstack.memplan.model_step import no_kv_cache  # noqa: E402
from trainstack.memplan.optim import OPTIMIZERS, optimizer_spec  # noqa: E402

K, S, F = Choice.KEEP, Choice.SELECTIVE, Choice.FULL
VOCAB, BATCH, SEQ = 256, 2, 48
SMALL = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)


def _configs() -> dict:
    t = transformers
    return {
        "llama": lambda: t.LlamaConfig(**SMALL),
        "qwen2": lambda: t.Qwen2Config(**SMALL, tie_word_embeddings=True),  # QKV biases, tied head
        "mistral": lambda: t.MistralConfig(**SMALL, sliding_window=None),
        "gemma": lambda: t.GemmaConfig(**SMALL, head_dim=16),
        "gpt2": lambda: t.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=3, n_head=4, n_positions=128, bos_token_id=0, eos_token_id=0),
        "olmo2": lambda: t.Olmo2Config(**SMALL),  # norms after attention and MLP, not before
        "cohere": lambda: t.CohereConfig(**SMALL),  # attention and MLP side by side on one norm
        "phi3": lambda: t.Phi3Config(**SMALL, pad_token_id=0),  # fused QKV and gate-up projections
        "falcon": lambda: t.FalconConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, new_decoder_architecture=True, num_kv_heads=2),
        # mixture of experts: grouped matrix products of float32 weights under autocast
        "mixtral": lambda: t.MixtralConfig(**SMALL, num_local_experts=4, num_experts_per_tok=2),
    }


ARCHS = list(_configs())


def build(arch: str) -> nn.Module:
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(_configs()[arch](), attn_implementation="sdpa").train()


def example_batch() -> dict:
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    return {"input_ids": ids, "labels": ids}


@pytest.fixture(scope="module", params=ARCHS)
def arch_and_profile(request):
    model = build(request.param)
    profile = memplan.calibrate_any(model, example_batch(), device="cpu", measure=False)
    return request.param, model, profile


def autograd_saved_bytes(model: nn.Module, batch: dict | None = None) -> int:
    return reference.autograd_saved_bytes(model, example_batch() if batch is None else batch)


def test_predicted_saved_bytes_match_autograd(arch_and_profile) -> None:
    arch, model, profile = arch_and_profile
    predicted = profile.options[K].saved
    measured = autograd_saved_bytes(model)
    assert abs(predicted - measured) <= 0.02 * measured, (arch, predicted, measured)
    # full recompute keeps the block's input alone; selective keeps the products too
    x_bytes = BATCH * SEQ * 64 * 4
    assert profile.options[F].saved == x_bytes
    assert x_bytes < profile.options[S].saved < predicted


def live_step_peak(model: nn.Module, choices: tuple[Choice, ...]) -> int:
    return reference.fake_step_peak(model, example_batch(), choices)


@pytest.mark.parametrize("choices", [(K, K, K), (F, F, F), (F, S, K)])
def test_composed_peak_matches_a_whole_step(arch_and_profile, choices) -> None:
    arch, model, profile = arch_and_profile
    predicted = breakdown(profile, choices, overheads=Overheads()).allocated_peak
    measured = live_step_peak(model, choices)
    assert abs(predicted / measured - 1) <= 0.001, (arch, choices, predicted, measured)


def loss_and_grads(model: nn.Module) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    torch.manual_seed(3)  # the same dropout masks in both runs
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(**example_batch(), use_cache=False).loss
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return loss.detach(), grads


def test_apply_keeps_loss_and_gradients(arch_and_profile) -> None:
    arch, model, profile = arch_and_profile
    keep_peak = breakdown(profile, (K,) * 3, overheads=Overheads()).reserved_peak
    full_peak = breakdown(profile, (F,) * 3, overheads=Overheads()).reserved_peak
    reference_loss, reference = loss_and_grads(model)
    planned_model = copy.deepcopy(model)
    plan = memplan.plan(planned_model, example_batch(), budget=(keep_peak + full_peak) // 2, device="cpu", measure=False, overheads=Overheads())
    assert plan.counts[K] < 3 and plan.peak_bytes <= plan.budget_bytes, plan.summary()
    assert memplan.apply(planned_model, plan) is planned_model
    loss, grads = loss_and_grads(planned_model)
    assert torch.equal(loss, reference_loss), arch
    assert grads.keys() == reference.keys()
    for name, g in reference.items():
        assert torch.equal(grads[name], g), (arch, name)


def test_optimizer_state_bytes_match_torch() -> None:
    model = nn.Sequential(nn.Linear(96, 48), nn.LayerNorm(48), nn.Linear(48, 8))
    for name, opt in (
        ("adamw", torch.optim.AdamW(model.parameters(), foreach=False)),
        ("sgd-momentum", torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)),
        ("adafactor", torch.optim.Adafactor(model.parameters())),
    ):
        model(torch.randn(4, 96)).sum().backward()
        opt.step()
        measured = sum(v.nbytes for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor) and v.dim())
        spec = OPTIMIZERS[name]
        assert sum(spec.state_bytes(tuple(p.shape), p.element_size()) for p in model.parameters()) == measured, name
        model.zero_grad(set_to_none=True)
    assert optimizer_spec(torch.optim.SGD(model.parameters(), lr=0.1)).full_states == 0


def test_no_repeated_blocks_gets_its_reason() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    with pytest.raises(UnplannableModel, match="no repeated blocks found"):
        memplan.plan(model, torch.randn(4, 8), budget="1GiB", loss_fn=lambda out, _: out.sum(), device="cpu")


class DataDependent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        return y[y > 0].sum() + x  # a shape that depends on the data


def test_op_without_fake_kernel_gets_its_reason() -> None:
    model = nn.Sequential(DataDependent(), DataDependent())
    with pytest.raises(UnplannableModel, match="data-dependent output"):
        memplan.plan(model, torch.randn(4, 8), budget="1GiB", loss_fn=lambda out, _: out.sum(), device="cpu")


class Residual(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm, self.linear = nn.LayerNorm(width), nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.relu(self.linear(self.norm(x)))


def test_a_stage_whose_first_block_differs() -> None:
    """A torchvision-style stage: its first module differs, the run after it is planned."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), *(Residual(32) for _ in range(4)), nn.Linear(32, 1))
    x = torch.randn(16, 8)
    found = find_blocks(model)
    assert (found.path, found.first, found.count) == ("", 1, 4)
    loss_fn = lambda out, _: out.square().mean()  # noqa: E731
    profile = memplan.calibrate_any(model, x, loss_fn=loss_fn, device="cpu", precision="fp32", optimizer="sgd-momentum")
    budget = breakdown(profile, (F, F, K, K), overheads=Overheads()).reserved_peak
    plan = memplan.plan(model, x, budget=budget, loss_fn=loss_fn, device="cpu", precision="fp32", overheads=Overheads(), optimizer="sgd-momentum")
    assert plan.counts[F] + plan.counts[S] >= 1 and plan.first_block == 1
    reference = copy.deepcopy(model)
    memplan.apply(model, plan)
    for m in (model, reference):
        loss_fn(m(x), x).backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert torch.equal(p.grad, q.grad), name


class Tagged(nn.Module):
    """A block with what a model's own loop reads of its layers: a plain attribute (as
    transformers 4.57's Qwen2 reads ``attention_type``), a buffer, a submodule's setting, a
    property."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.attention_type = "full_attention"
        self.register_buffer("gate", torch.ones(width))
        self.linear = nn.Linear(width, width)
        self.linear.window = 4

    @property
    def mask_name(self) -> str:
        return self.attention_type

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return x + torch.relu(self.linear(x)) * mask


class LoopReadsLayers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Tagged(16) for _ in range(3))
        self.out = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        masks = {"full_attention": torch.ones(16)}
        for block in self.blocks:
            assert isinstance(block, Tagged) and block.linear.window == 4
            x = block(x * block.gate, mask=masks[block.mask_name])
        return self.out(x)


def test_stand_ins_keep_what_the_models_loop_reads_of_its_blocks() -> None:
    """While the rest of the model runs, what stands for a block keeps its attributes,
    buffers, submodules, properties and class: the model's loop runs unchanged."""
    model = LoopReadsLayers()
    x = torch.randn(4, 16)
    loss_fn = lambda out, _: out.square().mean()  # noqa: E731
    plan = memplan.plan(model, x, budget="1GiB", loss_fn=loss_fn, device="cpu", precision="fp32")
    assert plan.blocks == "blocks" and plan.profile.n_blocks == 3
    assert all(type(b) is Tagged for b in model.blocks)  # the model itself untouched


class PlainTable(nn.Module):
    """A block holding a tensor as a plain attribute, not a buffer (GPT-J's positions in
    transformers 4.46)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.table = torch.randn(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.relu(self.linear(x)) * self.table.to(x.device)


def test_a_tensor_held_as_a_plain_attribute_is_faked_with_the_copy() -> None:
    model = nn.Sequential(nn.Linear(8, 16), *(PlainTable(16) for _ in range(3)), nn.Linear(16, 1))
    x = torch.randn(4, 8)
    profile = memplan.calibrate_any(model, x, loss_fn=lambda out, _: out.sum(), device="cpu", precision="fp32", measure=False)
    assert profile.n_blocks == 3 and profile.options[K].saved > 0


class LayerDrop(nn.Module):
    """The loop of BART's and Whisper's decoders under transformers 4.x: in training, each
    layer is skipped where a uniform draw falls below ``layerdrop`` (0 by default)."""

    def __init__(self, layerdrop: float) -> None:
        super().__init__()
        self.layerdrop = layerdrop
        self.layers = nn.ModuleList(Residual(16) for _ in range(3))
        self.out = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            if self.training:
                dropout_probability = torch.rand([])
                if dropout_probability < self.layerdrop:
                    continue
            x = layer(x)
        return self.out(x)


@pytest.mark.parametrize("layerdrop", [0.0, 0.1])
def test_a_layerdrop_loop_runs_its_blocks_as_most_steps_do(layerdrop: float) -> None:
    """A uniform draw compared with the drop probability is answered as most real steps draw
    it: the layers run (they were all skipped: a fake boolean read as true)."""
    model = LayerDrop(layerdrop).train()
    x = torch.randn(4, 16)
    loss_fn = lambda out, _: out.square().mean()  # noqa: E731
    profile = memplan.calibrate_any(model, x, loss_fn=loss_fn, device="cpu", precision="fp32", measure=False)
    assert profile.n_blocks == 3 and profile.options[K].saved > 0
    # the whole step on fake tensors runs the layers too; a layer always dropped (1.0) does not run
    runs, dropped = (reference.fake_step_peak(LayerDrop(p).train(), x, (K, K, K), loss_fn=loss_fn) for p in (layerdrop, 1.0))
    assert runs > dropped


def test_blocks_configured_differently_get_their_reason() -> None:
    """Gemma-2 alternates sliding-window and full attention over identical parameters."""
    model = transformers.AutoModelForCausalLM.from_config(transformers.Gemma2Config(**SMALL, head_dim=16))
    # the setting as the version names it: self_attn.layer_type (transformers 5), attention_type (4.57)
    with pytest.raises(UnplannableModel, match=r"differ in '(self_attn\.layer_type|attention_type)'"):
        memplan.plan(model, example_batch(), budget="1GiB", device="cpu")


def test_sharding_divides_weights_gradients_and_state(arch_and_profile) -> None:
    _, _, profile = arch_and_profile
    one, four = (breakdown(profile, (F,) * 3, world_size=w) for w in (1, 4))
    assert four.weights - profile.buffer_bytes == -(-(one.weights - profile.buffer_bytes) // 4)
    assert four.optimizer == -(-one.optimizer // 4)


def test_bf16_parameters_with_fp32_master_weights() -> None:
    """bf16 parameters and gradients (2 bytes each); the optimizer holds an fp32 master copy
    and fp32 moments (4 + 8 bytes per parameter)."""
    model = build("llama")
    n = sum(p.numel() for p in model.parameters())
    profile = memplan.calibrate_any(model, example_batch(), device="cpu", precision="bf16", measure=False)
    b = breakdown(profile, (K,) * 3)
    assert b.weights - profile.buffer_bytes == 2 * n
    assert b.optimizer == 12 * n
    assert sum(profile.grad_bytes()) + 2 * profile.grad_bytes()[0] == 2 * n  # one block's and the rest, three blocks


def _other_families() -> dict:
    """Models that are not decoder-only language models: (builder, batch, where the blocks are)."""
    t = transformers
    ids = example_batch()["input_ids"]
    return {
        # a post-norm encoder
        "bert": (lambda: t.AutoModelForMaskedLM.from_config(t.BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_size=128, max_position_embeddings=128), attn_implementation="sdpa"),
                 {"input_ids": ids, "labels": ids}, "bert.encoder.layer"),
        # an encoder-decoder: the decoder keeps a config (and a key/value cache) of its own,
        # its first block differs (relative position bias) and hands the bias to the others
        "t5": (lambda: t.AutoModelForSeq2SeqLM.from_config(t.T5Config(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=3, num_heads=4, decoder_start_token_id=0)),
               {"input_ids": ids, "labels": ids}, "decoder.block"),
        # an encoder-decoder whose decoder blocks save only casts of the encoder's output
        # (post-norm, bf16 autocast), and compute its gradient: the encoder's own backward
        # runs after theirs
        "bart": (lambda: t.AutoModelForSeq2SeqLM.from_config(t.BartConfig(vocab_size=VOCAB, d_model=64, encoder_layers=3, decoder_layers=3, encoder_attention_heads=4, decoder_attention_heads=4,
                                                                         encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=128), attn_implementation="sdpa"),
                 {"input_ids": ids, "labels": ids}, "model.decoder.layers"),
        # an image model: patches, not tokens
        "vit": (lambda: t.AutoModelForImageClassification.from_config(t.ViTConfig(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_size=128, image_size=32, patch_size=8, num_labels=5)),
                {"pixel_values": torch.randn(BATCH, 3, 32, 32, generator=torch.Generator().manual_seed(2)), "labels": torch.tensor([1, 4])}, ("vit.layers", "vit.encoder.layer")),  # transformers 5, 4.x
    }


@pytest.mark.parametrize("family", list(_other_families()))
def test_encoders_encoder_decoders_and_image_models(family) -> None:
    """Saved bytes as autograd saves them, and a plan that recomputes leaves loss and
    gradients bit-identical."""
    build_model, batch, path = _other_families()[family]
    torch.manual_seed(0)
    model = build_model().train()
    profile = memplan.calibrate_any(model, batch, device="cpu", measure=False)
    assert profile.blocks in ((path,) if isinstance(path, str) else path)
    measured = autograd_saved_bytes(model, batch)
    assert abs(profile.options[K].saved - measured) <= 0.02 * measured, (family, profile.options[K].saved, measured)
    n = profile.n_blocks
    for choices in ((K,) * n, (F,) * n):
        # the whole step, the encoder's graph, output and backward among it: within 0.1%
        predicted = breakdown(profile, choices, overheads=Overheads()).allocated_peak
        whole = reference.fake_step_peak(model, batch, choices)
        assert abs(predicted / whole - 1) <= 0.001, (family, choices[0], predicted, whole)
    budget = (breakdown(profile, (K,) * n, overheads=Overheads()).reserved_peak + breakdown(profile, (F,) * n, overheads=Overheads()).reserved_peak) // 2
    planned = copy.deepcopy(model)
    plan = memplan.plan(planned, batch, budget=budget, device="cpu", measure=False, overheads=Overheads())
    assert plan.counts[K] < n, plan.summary()
    memplan.apply(planned, plan)

    def loss_and_grads(m: nn.Module) -> tuple[torch.Tensor, dict]:
        torch.manual_seed(3)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = m(**batch).loss
        loss.backward()
        return loss.detach(), {name: p.grad for name, p in m.named_parameters() if p.grad is not None}

    with no_kv_cache(model), no_kv_cache(planned):
        (loss, grads), (ref_loss, ref) = loss_and_grads(planned), loss_and_grads(model)
    assert torch.equal(loss, ref_loss), family
    assert grads.keys() == ref.keys()
    for name, g in ref.items():
        assert torch.equal(grads[name], g), (family, name)


def test_grouped_products_are_counted_and_kept_by_selective_recompute() -> None:
    """A mixture of experts: its grouped matrix products cost 2*M*K*N (forward, and the
    weight gradient grouped along K), and selective recompute keeps their outputs."""
    from trainstack.memplan.tracking import grouped_mm_flops
    from trainstack.memplan.wrappers import save_ops

    tokens, k, n, experts = 12, 16, 8, 3
    a, b = torch.randn(tokens, k), torch.randn(experts, k, n)
    assert grouped_mm_flops(a, b, torch.empty(tokens, n)) == 2 * tokens * k * n
    assert grouped_mm_flops(torch.randn(k, tokens), torch.randn(tokens, n), torch.empty(experts, k, n)) == 2 * k * tokens * n
    assert torch.ops.aten._grouped_mm.default in save_ops()


def test_the_libraries_own_checkpointing_is_measured_off_and_replaced_by_the_plan() -> None:
    """A Hugging Face model with gradient checkpointing enabled: its blocks would recompute
    where the plan says keep. Calibration measures them as they compute without it, and
    apply() hands the decision to the plan (the blocks' flag off, loss and gradients as before)."""
    import warnings

    plain = build("llama")
    model = copy.deepcopy(plain)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # gradient_checkpointing_enable: renamed in transformers 5
        model.gradient_checkpointing_enable()
    assert all(layer.gradient_checkpointing for layer in model.model.layers)
    expected = memplan.calibrate_any(plain, example_batch(), device="cpu", measure=False)
    profile = memplan.calibrate_any(model, example_batch(), device="cpu", measure=False)
    assert {c: o.saved for c, o in profile.options.items()} == {c: o.saved for c, o in expected.options.items()}
    assert all(layer.gradient_checkpointing for layer in model.model.layers)  # calibration leaves the model as it was
    reference_loss, reference = loss_and_grads(plain)
    plan = memplan.plan(model, example_batch(), budget=breakdown(profile, (F, K, K), overheads=Overheads()).reserved_peak, device="cpu", measure=False, overheads=Overheads())
    memplan.apply(model, plan)
    assert not any(layer.gradient_checkpointing for layer in model.model.layers)
    loss, grads = loss_and_grads(model)
    assert torch.equal(loss, reference_loss)
    for name, g in reference.items():
        assert torch.equal(grads[name], g), name


def test_blocks_already_wrapped_for_checkpointing_get_their_reason() -> None:
    """torch.distributed's checkpoint_wrapper (as FSDP training scripts apply it): the wrapped
    blocks recompute whatever a plan says, and a plan over them would recompute twice."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing

    model = build("llama")
    apply_activation_checkpointing(model, check_fn=lambda m: type(m).__name__ == "LlamaDecoderLayer")
    with pytest.raises(UnplannableModel, match="already wrapped for activation checkpointing .CheckpointWrapper."):
        memplan.plan(model, example_batch(), budget="1GiB", device="cpu", measure=False)


class Bottleneck(nn.Module):
    """A ResNet bottleneck: convolutions, batch norm, in-place ReLU after the residual add."""

    def __init__(self, width: int, inner: int, downsample: bool = False) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(width, inner, 1, bias=False), nn.BatchNorm2d(inner)
        self.conv2, self.bn2 = nn.Conv2d(inner, inner, 3, padding=1, bias=False), nn.BatchNorm2d(inner)
        self.conv3, self.bn3 = nn.Conv2d(inner, width, 1, bias=False), nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = nn.Sequential(nn.Conv2d(width, width, 1, bias=False), nn.BatchNorm2d(width)) if downsample else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += identity
        return self.relu(out)


def small_resnet() -> nn.Module:
    """Two stages, each a first block with a downsample path and three plain ones."""
    torch.manual_seed(0)
    stage = lambda width: nn.Sequential(Bottleneck(width, width // 4, downsample=True), *(Bottleneck(width, width // 4) for _ in range(3)))  # noqa: E731
    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), stage(32), nn.Conv2d(32, 64, 3, stride=2, padding=1), stage(64), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 5)).train()


@pytest.mark.parametrize("stage", ["1", "3"])
def test_a_resnet_stage_named(stage: str) -> None:
    """A convolutional stage, named: batch norm's running statistics are buffers, not saved
    activations; the block's output its last ReLU saves is the next block's input, and lives
    into the block's backward; the gradient reaching the block dies once that ReLU has used
    it; the stage's first block (in the head) keeps the blocks' input alive, which the first
    planned block saves too (counted once)."""
    model = small_resnet()
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(4))
    loss_fn = lambda logits, _: torch.nn.functional.cross_entropy(logits.float(), torch.tensor([1, 4]))  # noqa: E731
    profile = memplan.calibrate_any(model, images, blocks=stage, loss_fn=loss_fn, device="cpu", measure=False)
    assert (profile.blocks, profile.first_block, profile.n_blocks) == (stage, 1, 3)
    measured = reference.autograd_saved_bytes(model, images, blocks=stage)
    assert abs(profile.options[K].saved - measured) <= 0.01 * measured, (profile.options[K].saved, measured)
    for choices in ((K,) * 3, (F,) * 3, (F, S, K)):
        predicted = breakdown(profile, choices, overheads=Overheads()).allocated_peak
        whole = reference.fake_step_peak(model, images, choices, loss_fn=loss_fn, blocks=stage)
        assert abs(predicted / whole - 1) <= 0.001, (choices, predicted, whole)


class ResidualReLU(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(width, width, 1, bias=False), nn.Conv2d(width, width, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv2(torch.relu(self.conv1(x))) + x)


def test_blocks_ending_in_relu() -> None:
    """A block whose last op saves its output: the output lives into the block's backward,
    and the gradient handed to the block is freed by the ReLU's backward, not held through
    the block's (one activation over at the last block's backward, before)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), *(ResidualReLU(64) for _ in range(4)), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 5)).train()
    images = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(4))
    loss_fn = lambda logits, _: torch.nn.functional.cross_entropy(logits.float(), torch.tensor([1, 4]))  # noqa: E731
    profile = memplan.calibrate_any(model, images, loss_fn=loss_fn, device="cpu", measure=False)
    assert (profile.first_block, profile.n_blocks) == (1, 4)
    for choices in ((K,) * 4, (F,) * 4, (F, S, K, K)):
        predicted = breakdown(profile, choices, overheads=Overheads())
        whole = reference.fake_step_peak(model, images, choices, loss_fn=loss_fn)
        assert predicted.transient_phase == "backward of block 3"
        assert abs(predicted.allocated_peak / whole - 1) <= 0.001, (choices, predicted.allocated_peak, whole)
