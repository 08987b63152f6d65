"""What a real step holds, measured without memplan's composition: the references its
predictions are checked against on a CPU (tests, ``benchmarks/memplan_families.py``).

- ``autograd_saved_bytes``: the bytes autograd saves in one real block's forward, read
  from the saved tensors themselves (``saved_tensors_hooks``);
- ``fake_step_peak``: the most bytes live over a whole training step, the model trained
  on fake tensors under the live-bytes tracker, every block as it is, nothing composed.
"""

from __future__ import annotations

from typing import Any

from trainstack.memplan.block_call import hidden_of, record_call
from trainstack.memplan.blocks import find_blocks
from trainstack.memplan.costs import Choice
from trainstack.memplan.fake import as_eager, fake_as_real, fake_copy, fake_like
from trainstack.memplan.model_step import call_model, default_loss, no_kv_cache
from trainstack.memplan.optim import precision_spec
from trainstack.memplan.tracking import Roofline, tracker
from trainstack.memplan.wrappers import apply_choices


def autograd_saved_bytes(model: Any, batch: Any, *, autocast: bool = True, blocks: str | None = None) -> int:
    """Bytes autograd saves in the forward of ``model``'s first planned block, called as the
    model calls it on ``batch`` (CPU): the storages of its saved tensors, the block's input
    among them where saved; excluded are the parameters and buffers (batch norm's running
    statistics), what the model hands every block, and the block's output where the block
    saves it (ResNet's in-place ReLU): that is the next block's input, counted there.
    ``blocks``: the list of blocks, as ``memplan.plan`` takes it."""
    import torch

    run = find_blocks(model, blocks)
    block = model.get_submodule(run.path)[run.first]
    amp = torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast)
    with no_kv_cache(model):  # with gradients: an input the model hands the block needing one, needs one here
        call = record_call(model, block, batch, label="block", context=amp).with_grad_inputs()
    args, kwargs = call.with_x(call.fresh_x())
    exclude = {p.untyped_storage().data_ptr() for p in (*model.parameters(), *model.buffers())}
    exclude |= {
        t.untyped_storage().data_ptr()
        for t in torch.utils._pytree.tree_flatten((call.args, call.kwargs))[0]
        if isinstance(t, torch.Tensor) and t is not call.x
    }
    storages: dict[int, int] = {}

    def pack(t: Any) -> Any:
        s = t.untyped_storage()
        if s.data_ptr() not in exclude:
            storages[s.data_ptr()] = s.nbytes()
        return t

    with no_kv_cache(model), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), amp:
        output = hidden_of(block(*args, **kwargs))
    storages.pop(output.untyped_storage().data_ptr(), None)
    return sum(storages.values())


def fake_step_peak(
    model: Any,
    batch: Any,
    choices: tuple[Choice, ...],
    *,
    loss_fn: Any = default_loss,
    steps: int = 2,
    blocks: str | None = None,
    device: str = "cpu",
) -> int:
    """The most bytes live over the last of ``steps`` training steps (fused AdamW, bf16
    autocast) of ``model`` with its blocks wrapped per ``choices``, built and trained on fake tensors
    (of ``device``) under the live-bytes tracker: the whole step, nothing composed."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = tracker(Roofline())
    with FakeTensorMode(), fake_as_real(), as_eager(), mode:
        fake = fake_copy(model, device, precision_spec("autocast-bf16"))  # tied parameters stay tied; no key/value cache
        run = find_blocks(fake, blocks)
        apply_choices(fake, choices, run.path, run.first)
        opt = torch.optim.AdamW(fake.parameters(), fused=True)  # as memplan's "adamw" (fused: no temporaries)
        for step in range(steps):
            if step == steps - 1:
                mode.reset_peak()
            fake_batch = fake_like(batch, device)
            with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
                loss = loss_fn(call_model(fake, fake_batch), fake_batch)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            del loss
        return mode.state.peak
