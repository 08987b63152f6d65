#!/usr/bin/env python3
"""Memplan's calibration on Hugging Face model families nobody here wrote, on a CPU.

Each family is built with ``from_config`` from a small config of its own kind (no download:
three blocks, width 64), and planned by ``memplan.calibrate_any`` (fake tensors). Its
predictions are set beside two references that compose nothing (``memplan.reference``):

- saved: the bytes one block saves for backward, against the storages autograd really
  saves in a real forward of that block (``saved_tensors_hooks``);
- peak keep / full / mixed: the allocated peak of a whole training step (AdamW, bf16
  autocast) with every block kept, every block recomputed, and the first recomputed, the
  second selective, the rest kept; against the most bytes live over the same step run
  whole on fake tensors.

Printed as a table and written to OUT/memplan_families.txt and .json (atomically).

``--torchvision``: torchvision's image classifiers instead (``torchvision.models``, random
weights, 5 classes, cross-entropy on their logits), each planned on the run of blocks memplan
finds (the stage holding the most parameters) and ResNet-50 also on its first stage, named;
written to OUT/memplan_torchvision.txt and .json.

``--matrix PY,PY,...``: the families under each Python (a venv per transformers version, and
per torch version: a torch other than this Python's names its column and folder, as in
``4.46.2-torch2.5.1``), each run as above into OUT/memplan_families_matrix/<column>/, then
one table with a column per version (saved-bytes error / largest whole-step peak error, or why
the family did not plan) written to OUT/memplan_families_matrix.txt and .json.

Usage: python benchmarks/memplan_families.py [--out benchmarks/results/memplan_families] [--only llama,t5] [--torchvision] [--matrix PY,PY]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import sys
import time
import traceback
from pathlib import Path

import torch
import transformers as t

from trainstack import memplan
from trainstack.fsutil import atomic_write_text
from trainstack.memplan.memory import breakdown
from trainstack.memplan.costs import Choice, Overheads
from trainstack.memplan.model_step import default_loss
from trainstack.memplan.reference import autograd_saved_bytes, fake_step_peak

K, S, F = Choice.KEEP, Choice.SELECTIVE, Choice.FULL
VOCAB, BATCH, SEQ = 256, 2, 48
SMALL = {"vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128}
ENC_DEC = {"vocab_size": VOCAB, "d_model": 64, "encoder_layers": 3, "decoder_layers": 3, "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128}


def tokens() -> dict:
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    return {"input_ids": ids, "labels": ids}


def pixels() -> dict:
    return {"pixel_values": torch.randn(BATCH, 3, 32, 32, generator=torch.Generator().manual_seed(1)), "labels": torch.tensor([1, 4])}


def audio() -> dict:
    return {"input_features": torch.randn(BATCH, 16, 48, generator=torch.Generator().manual_seed(1)), "labels": tokens()["labels"][:, :16]}


causal, masked, seq2seq = t.AutoModelForCausalLM, t.AutoModelForMaskedLM, t.AutoModelForSeq2SeqLM
# family: (what is particular to it, auto class, config, batch)
FAMILIES = {
    "llama": ("pre-norm RMSNorm, rotary, grouped KV heads", causal, lambda: t.LlamaConfig(**SMALL), tokens),
    "qwen2": ("tied embeddings, QKV biases", causal, lambda: t.Qwen2Config(**SMALL, tie_word_embeddings=True), tokens),
    "qwen3": ("per-head q/k norms", causal, lambda: t.Qwen3Config(**SMALL, head_dim=16), tokens),
    "mistral": ("Llama-like, sliding window off", causal, lambda: t.MistralConfig(**SMALL, sliding_window=None), tokens),
    "gemma": ("scaled embeddings, GeGLU", causal, lambda: t.GemmaConfig(**SMALL, head_dim=16), tokens),
    "gemma3": ("four norms a block, q/k norms", causal, lambda: t.Gemma3TextConfig(**SMALL, head_dim=16), tokens),
    "olmo2": ("norms after attention and MLP", causal, lambda: t.Olmo2Config(**SMALL), tokens),
    "cohere": ("attention and MLP side by side, LayerNorm", causal, lambda: t.CohereConfig(**SMALL), tokens),
    "phi3": ("fused QKV and gate-up projections", causal, lambda: t.Phi3Config(**SMALL, pad_token_id=0), tokens),
    "phi": ("parallel block, partial rotary, LayerNorm", causal, lambda: t.PhiConfig(**SMALL), tokens),
    "stablelm": ("LayerNorm, partial rotary", causal, lambda: t.StableLmConfig(**SMALL), tokens),
    "granite": ("scaled residuals and logits", causal, lambda: t.GraniteConfig(**SMALL), tokens),
    "starcoder2": ("LayerNorm, biases, GELU MLP", causal, lambda: t.Starcoder2Config(**SMALL), tokens),
    "falcon": ("parallel block, multi-query groups", causal,
               lambda: t.FalconConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, new_decoder_architecture=True, num_kv_heads=2), tokens),
    "gpt2": ("learned positions, Conv1D, LayerNorm", causal, lambda: t.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=3, n_head=4, n_positions=128), tokens),
    "gpt_neox": ("parallel residual, fused QKV", causal, lambda: t.GPTNeoXConfig(**{k: v for k, v in SMALL.items() if k != "num_key_value_heads"}), tokens),
    "gptj": ("parallel block, rotary on part of each head", causal, lambda: t.GPTJConfig(vocab_size=VOCAB, n_embd=64, n_layer=3, n_head=4, n_positions=128, rotary_dim=8), tokens),
    "gpt_bigcode": ("multi-query attention", causal, lambda: t.GPTBigCodeConfig(vocab_size=VOCAB, n_embd=64, n_layer=3, n_head=4, n_positions=128), tokens),
    "opt": ("learned positions, ReLU MLP", causal,
            lambda: t.OPTConfig(vocab_size=VOCAB, hidden_size=64, ffn_dim=128, num_hidden_layers=3, num_attention_heads=4, max_position_embeddings=128, word_embed_proj_dim=64), tokens),
    "mixtral": ("mixture of experts (grouped products, float32 weights)", causal, lambda: t.MixtralConfig(**SMALL, num_local_experts=4, num_experts_per_tok=2), tokens),
    "qwen2_moe": ("experts and a shared expert", causal,
                  lambda: t.Qwen2MoeConfig(**SMALL, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=64), tokens),
    "mamba": ("state-space blocks, no attention", causal, lambda: t.MambaConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=3), tokens),
    "bert": ("post-norm encoder, masked LM", masked,
             lambda: t.BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_size=128, max_position_embeddings=128), tokens),
    "t5": ("encoder-decoder; the decoder's first block differs", seq2seq,
           lambda: t.T5Config(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=3, num_heads=4, decoder_start_token_id=0), tokens),
    "bart": ("encoder-decoder, post-norm", seq2seq, lambda: t.BartConfig(**ENC_DEC, max_position_embeddings=128), tokens),
    "vit": ("image patches", t.AutoModelForImageClassification,
            lambda: t.ViTConfig(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_size=128, image_size=32, patch_size=8, num_labels=5), pixels),
    "whisper": ("speech encoder-decoder", t.AutoModelForSpeechSeq2Seq,
                lambda: t.WhisperConfig(**ENC_DEC, num_mel_bins=16, max_source_positions=24, max_target_positions=64, decoder_start_token_id=0, pad_token_id=0), audio),
}


def vision(name: str, size: int):
    """torchvision's ``name`` (random weights, 5 classes) and a batch of ``size`` pixel images."""

    def make():
        import torchvision

        torch.manual_seed(0)
        model = getattr(torchvision.models, name)(num_classes=5).train()
        return model, (torch.randn(BATCH, 3, size, size, generator=torch.Generator().manual_seed(1)),)

    return make


def class_loss(logits, _batch):
    return torch.nn.functional.cross_entropy(logits.float(), torch.tensor([1, 4]))


# family: (what is particular to it, model and batch, the list of blocks: None finds it)
TORCHVISION = {
    "resnet50": ("bottleneck stages, batch norm; the last stage found", vision("resnet50", 64), None),
    "resnet50/layer1": ("the first stage, named: the most activations", vision("resnet50", 64), "layer1"),
    "convnext_tiny": ("depthwise convolutions, layer scale", vision("convnext_tiny", 64), None),
    "efficientnet_b0": ("inverted residuals, squeeze-excitation", vision("efficientnet_b0", 64), None),
    "mobilenet_v3_large": ("hard-swish, squeeze-excitation", vision("mobilenet_v3_large", 64), None),
    "regnet_y_400mf": ("grouped convolutions", vision("regnet_y_400mf", 64), None),
    "swin_t": ("shifted windows", vision("swin_t", 64), None),
    "vit_b_16": ("image patches, 224 px", vision("vit_b_16", 224), None),
}


def hugging_face(name: str):
    _, auto, config, batch_of = FAMILIES[name]
    return lambda: (build(auto, config), batch_of())


def build(auto, config):
    """The model from a fresh config (a refused attention implementation stays in the config it was asked of)."""
    torch.manual_seed(0)
    try:
        return auto.from_config(config(), attn_implementation="sdpa").train()
    except ValueError:  # a family without an SDPA path
        return auto.from_config(config()).train()


def measure(name: str, what: str, make, blocks: str | None = None, loss_fn=default_loss) -> dict:
    model, batch = make()
    t0 = time.perf_counter()
    profile = memplan.calibrate_any(model, batch, device="cpu", measure=False, blocks=blocks, loss_fn=loss_fn)
    seconds = time.perf_counter() - t0
    n = profile.n_blocks
    row = {"family": name, "what": what, "blocks": f"{profile.blocks}[{profile.first_block}:{profile.first_block + n}]", "calibration_s": round(seconds, 2)}
    row["saved_predicted"], row["saved_autograd"] = profile.options[K].saved, autograd_saved_bytes(model, batch, blocks=blocks)
    mixed = (F, S, *(K,) * (n - 2)) if n >= 2 else (F,)
    for label, choices in (("keep", (K,) * n), ("full", (F,) * n), ("mixed", mixed)):
        row[f"peak_{label}_predicted"] = breakdown(profile, choices, overheads=Overheads()).allocated_peak
        row[f"peak_{label}_fake_step"] = fake_step_peak(model, batch, choices, loss_fn=loss_fn, blocks=blocks)
    return row


def error(row: dict, key: str, reference: str) -> float:
    return row[key] / row[reference] - 1


def table(rows: list[dict]) -> str:
    head = f"{'family':<18} {'blocks':<26} {'saved pred':>10} {'autograd':>10} {'error':>7}  {'peak keep':>9} {'full':>7} {'mixed':>7}  {'calib s':>7}  what"
    lines = [head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['family']:<18} not planned: {r['error']}")
            continue
        peaks = [f"{error(r, f'peak_{c}_predicted', f'peak_{c}_fake_step'):+.2%}" for c in ("keep", "full", "mixed")]
        lines.append(
            f"{r['family']:<18} {r['blocks']:<26} {r['saved_predicted']:>10} {r['saved_autograd']:>10} {error(r, 'saved_predicted', 'saved_autograd'):>+7.2%}  "
            f"{peaks[0]:>9} {peaks[1]:>7} {peaks[2]:>7}  {r['calibration_s']:>7.2f}  {r['what']}"
        )
    return "\n".join(lines)


def summary(rows: list[dict]) -> list[str]:
    ok = [r for r in rows if "error" not in r]
    if not ok:
        return ["no family planned"]
    saved = [abs(error(r, "saved_predicted", "saved_autograd")) for r in ok]
    peaks = [abs(error(r, f"peak_{c}_predicted", f"peak_{c}_fake_step")) for r in ok for c in ("keep", "full", "mixed")]
    exact = sum(r["saved_predicted"] == r["saved_autograd"] for r in ok)
    return [
        f"{len(ok)} of {len(rows)} families planned; saved bytes exactly autograd's in {exact}, largest error {max(saved):.2%}; "
        f"allocated peak of a whole step (keep, full, mixed) within {max(peaks):.2%} of the fake step's",
    ]


def label(run: dict) -> str:
    """A column's head: its transformers version, and its torch where that is not the matrix's own."""
    release = run["torch"].split("+")[0]
    return f"transformers {run['transformers']}" + ("" if release == torch.__version__.split("+")[0] else f", torch {release}")


def others(runs: list[dict]) -> str:
    """The torch builds of the columns that name their own torch, as a clause ('' where none)."""
    mine = torch.__version__.split("+")[0]
    builds = list(dict.fromkeys(run["torch"] for run in runs if run["torch"].split("+")[0] != mine))
    return f" (the columns naming a torch: {', '.join(builds)}, PyPI's builds, run on the CPU)" if builds else ""


def matrix_cell(row: dict | None) -> str:
    """saved-bytes error / largest whole-step peak error; why a family did not plan; '-' where
    the version has no such family."""
    if row is None:
        return "-"
    if "error" in row:
        reason = row["error"]
        return "absent" if "has no attribute" in reason and "Config" in reason else "fails: " + reason[:60]
    peaks = max(abs(error(row, f"peak_{c}_predicted", f"peak_{c}_fake_step")) for c in ("keep", "full", "mixed"))
    return f"{error(row, 'saved_predicted', 'saved_autograd'):+.2%} / {peaks:.2%}"


def column(python: str) -> str:
    """The column a Python's run fills: its transformers version, and its torch's where that is
    not this Python's (``4.46.2-torch2.5.1``); also the name of the run's folder."""
    probe = "import torch, transformers; print(transformers.__version__, torch.__version__)"
    version, its_torch = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    release = its_torch.split("+")[0]
    return version if release == torch.__version__.split("+")[0] else f"{version}-torch{release}"


def matrix(pythons: list[str], out: Path, only: str, reuse: bool = False) -> int:
    """The families under each of ``pythons``, one column per transformers version (with
    ``reuse``, a version whose results an earlier run left in OUT is not run again)."""
    runs, shown, jobs = [], [], []
    logs = Path(tempfile.mkdtemp(prefix="memplan-families-"))  # each run's console, kept where a run fails
    for python in pythons:  # one process per version, side by side: each is mostly one core's work
        version = column(python)
        folder = out / "memplan_families_matrix" / version
        folder.mkdir(parents=True, exist_ok=True)
        command = [python, __file__, "--out", str(folder), *(["--only", only] if only else [])]
        if reuse and (folder / "memplan_families.json").exists():
            jobs.append((folder, version, None))
            continue
        print(f"$ {' '.join(command)}", flush=True)
        with open(logs / f"{version}.log", "w") as log:
            jobs.append((folder, version, subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)))
    for folder, version, job in jobs:
        if job is not None and job.wait() != 0:
            print(f"error: the families under transformers {version.replace('-torch', ' and torch ')} failed; see {logs / (version + '.log')}", file=sys.stderr)
            return 1
        runs.append(json.loads((folder / "memplan_families.json").read_text()))
        shown.append("<python with " + label(runs[-1]).replace(", ", " and ") + ">")
    shutil.rmtree(logs, ignore_errors=True)
    families = list(dict.fromkeys(r["family"] for run in runs for r in run["rows"]))
    by = [{r["family"]: r for r in run["rows"]} for run in runs]
    width = max(28, *(len(label(run)) + 1 for run in runs), *(len(matrix_cell(b.get(f))) for b in by for f in families))
    head = f"{'family':<14} " + " ".join(f"{label(run):<{width}}" for run in runs)
    lines = [head, "-" * len(head)]
    lines += [f"{f:<14} " + " ".join(f"{matrix_cell(b.get(f)):<{width}}" for b in by) for f in families]
    header = [
        "$ python3 benchmarks/memplan_families.py --out " + str(out) + (f" --only {only}" if only else "") + (" --reuse" if reuse else "") + " --matrix " + ",".join(shown),
        f"CPU, torch {torch.__version__}{others(runs)}: batch {BATCH}, seq {SEQ}; cell = saved bytes predicted / autograd's - 1, "
        "then the largest |predicted / fake step - 1| of the whole-step peaks (keep, full, mixed); absent: the version has no such family",
    ]
    footer = [f"{label(run)}: {run['summary'][0]}" for run in runs]
    text = "\n".join([*header, "", *lines, "", *footer])
    print("\n" + text)
    atomic_write_text(out / "memplan_families_matrix.txt", text + "\n")
    document = {"command": header[0][2:], "versions": [{"transformers": run["transformers"], "torch": run["torch"], "rows": run["rows"], "summary": run["summary"]} for run in runs]}
    atomic_write_text(out / "memplan_families_matrix.json", json.dumps(document, indent=2) + "\n")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/memplan_families"))
    ap.add_argument("--only", default="", help="comma-separated families (default: all)")
    ap.add_argument("--torchvision", action="store_true", help="torchvision's image classifiers instead of Hugging Face families")
    ap.add_argument("--matrix", default="", help="comma-separated Python interpreters, one per transformers version: a column each")
    ap.add_argument("--reuse", action="store_true", help="with --matrix: keep a version's results an earlier run wrote under OUT")
    args = ap.parse_args()
    if args.matrix:
        return matrix([p for p in args.matrix.split(",") if p], args.out, args.only, args.reuse)
    if args.torchvision:
        try:
            import torchvision
        except ImportError as exc:
            print(f"error: --torchvision: torchvision does not import ({exc}); install the torchvision built for torch {torch.__version__}", file=sys.stderr)
            return 6
        families = {name: (what, make, blocks, class_loss) for name, (what, make, blocks) in TORCHVISION.items()}
        stem, versions = "memplan_torchvision", {"torchvision": torchvision.__version__}
        shape = f"batch {BATCH} images"
    else:
        families = {name: (spec[0], hugging_face(name), None, default_loss) for name, spec in FAMILIES.items()}
        stem, versions, shape = "memplan_families", {"transformers": t.__version__}, f"batch {BATCH}, seq {SEQ} (tokens)"
    names = [n for n in (args.only.split(",") if args.only else families) if n]
    unknown = [n for n in names if n not in families]
    if unknown:
        print(f"error: --only: unknown families {', '.join(unknown)}; accepted: {', '.join(families)}", file=sys.stderr)
        return 2
    rows = []
    for name in names:
        what, make, blocks, loss_fn = families[name]
        try:
            rows.append(measure(name, what, make, blocks, loss_fn))
        except Exception as exc:  # noqa: BLE001 - a family memplan cannot plan is a row, with its reason
            traceback.print_exc()
            rows.append({"family": name, "what": what, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"})
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    header = [
        "$ python3 " + " ".join(["benchmarks/memplan_families.py", *sys.argv[1:]]),
        f"CPU, torch {torch.__version__}, {', '.join(f'{k} {v}' for k, v in versions.items())}: {shape}, bf16 autocast, fused AdamW; "
        "error = predicted / reference - 1",
    ]
    text = "\n".join([*header, "", table(rows), "", *summary(rows)])
    print("\n" + text)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / f"{stem}.txt", text + "\n")
    document = {"command": header[0][2:], "torch": torch.__version__, **versions, "rows": rows, "summary": summary(rows)}
    atomic_write_text(args.out / f"{stem}.json", json.dumps(document, indent=2) + "\n")
    return 0

if __name__ == "__main__":
    sys.exit(main())
