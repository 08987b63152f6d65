"""Memplan: predict the peak memory of a training step and choose what to recompute.

Any model::

    from trainstack import memplan

    plan = memplan.plan(model, example_batch, budget="60GiB")  # or bytes, or "0.9" of the GPU
    memplan.apply(model, plan)  # wraps the planned blocks in place; returns the model
    print(plan.summary(), plan.peak_bytes)

``plan(model, example_batch, *, budget, optimizer="adamw", precision="autocast-bf16",
world_size=1, blocks=None, loss_fn=None, device=None, measure=None, overheads=None)``:

- ``model``: the nn.Module as it will train (before FSDP and torch.compile); its repeated
  blocks are found (the longest run of identical modules in a ModuleList or Sequential,
  the one holding the most parameters), or named by ``blocks`` ("model.layers").
- ``example_batch``: what one step feeds it (a tensor, a tuple or a dict); its first
  dimension is the batch. The step is ``loss_fn(model(**batch | *batch | batch), batch)``;
  the default ``loss_fn`` takes the output itself when it is a scalar, else its ``loss``
  (a Hugging Face model given ``labels``).
- ``optimizer``: a name of ``memplan.optim.OPTIMIZERS`` (adamw, adamw-foreach, sgd,
  sgd-momentum, adafactor, adamw8bit, ...) or a torch optimizer; ``precision``:
  autocast-bf16 (weights as stored under bf16 autocast), bf16 (bf16 parameters, fp32
  master weights and state) or fp32; ``world_size``: GPUs the model is sharded over (FSDP).
- ``measure``: on a CUDA model, one real copy of a block per choice gives the blocks' bytes
  and recompute times (default: when the model's parameters are on a CUDA device).

Calibration runs on fake tensors, so it takes seconds and no memory whatever the size.
A model memplan cannot plan raises ``UnplannableModel`` (a SpecError) whose message says
why in one line; a budget nothing fits raises BudgetError (what is missing, and the batch
or sharding that would fit). The ``Plan`` says per block keep, selective or full
recompute (``plan.choices``, for the blocks at ``plan.blocks`` from ``plan.first_block``),
the predicted peak and its breakdown.

The bench decoder: ``plan_memory(cfg, batch=, seq=, budget_bytes=)`` plans a
``ModelConfig`` through the same calibration (the decoder is a model whose blocks are
known: ``memplan.decoder``) and can also plan compiled blocks. torch is imported only when
these are called.

The modules, from the entry point down: ``api`` (plan, and the calibration it
composes), ``decoder`` (the bench decoder handed to it), ``calibration`` (block and head
measured on fake tensors) over ``blocks`` (the repeated blocks found), ``block_call`` (the
first block's call recorded), ``fake`` (the model copied and run on fake tensors) and
``model_step`` (the model called on a batch, its loss), ``realblock`` (one real block per
choice, its bytes and time), ``tracking`` (the live-bytes tracker and roofline),
``planner`` and ``memory`` (the choice and the memory model, pure arithmetic), ``costs``
(the data they exchange), ``optim``, ``wrappers``, ``budget``, ``reference``, ``report``.
This module only names what the others define.
"""

from __future__ import annotations

from trainstack.memplan.api import COMPILER_BUDGETS, calibrate_any, calibrate_any_compiled, plan
from trainstack.memplan.blocks import UnplannableModel
from trainstack.memplan.costs import Breakdown, Choice, Overheads, Plan, Profile
from trainstack.memplan.decoder import MASTER_UPDATE_TEMPORARIES, measure_compiled_blocks, measure_real_block, plan_memory, stored_as
from trainstack.memplan.wrappers import apply

__all__ = [
    "COMPILER_BUDGETS",
    "MASTER_UPDATE_TEMPORARIES",
    "Breakdown",
    "Choice",
    "Overheads",
    "Plan",
    "Profile",
    "UnplannableModel",
    "apply",
    "calibrate_any",
    "calibrate_any_compiled",
    "measure_compiled_blocks",
    "measure_real_block",
    "plan",
    "plan_memory",
    "stored_as",
]

# The functions are this package's face: they name it as their module (as help() and
# documentation show them), whichever module defines them.
for _function in (apply, calibrate_any, calibrate_any_compiled, measure_compiled_blocks, measure_real_block, plan, plan_memory, stored_as):
    _function.__module__ = __name__
del _function
