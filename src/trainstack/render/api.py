"""render_stack: every rendered file computed in memory first, then the output directory
replaced as one unit (the old rendered files or the new ones, never a mix)."""

from __future__ import annotations

import re
from pathlib import Path

from trainstack.errors import RuleViolation, UsageError
from trainstack.fsutil import replace_tree
from trainstack.lock.inputs import Inputs, load_inputs
from trainstack.lock.layers import FlavourLayers
from trainstack.render import quote
from trainstack.render.dockerfile import render_dockerfile, source_file
from trainstack.render.placement import ClusterOptions, cluster_files
from trainstack.render.stackfiles import render_bake, render_environment, render_workflow
from trainstack.stackfile.compat import oci_refusal


def flavour_files(inputs: Inputs, layers: FlavourLayers) -> dict[str, str]:
    """A flavour's build context: its Dockerfile and the lock files its stages bind-mount.
    RuleViolation for a flavour whose image build has no nvcc for its extensions: a Dockerfile
    that compiles them without CUDA_HOME nor its GPU targets is never written."""
    refusal = oci_refusal(inputs.stack, layers.flavour)
    if refusal is not None:
        raise RuleViolation(
            f"{inputs.stack_path}: flavour {layers.flavour.slug}: {refusal}",
            hint="trainstack check -v shows where each flavour's nvcc comes from",
        )
    files = {
        "Dockerfile": render_dockerfile(inputs.stack, layers, inputs.manifest.uv_version),
        "torch.txt": layers.torch.text(),
        "extras.txt": layers.extras.text(),
        "toolchain.txt": layers.toolchain.text(),
    }
    for src in layers.sources:
        files[source_file(src)] = _source_lock(layers, src.entry_text)
    return files


def _source_lock(layers: FlavourLayers, entry_text: str) -> str:
    return "".join(f"{o}\n" for o in layers.full.options) + entry_text


SLUG = re.compile(r"[a-z0-9][a-z0-9.-]*")


def stack_files(inputs: Inputs) -> dict[str, str]:
    files: dict[str, str] = {}
    for layers in inputs.layers:
        slug = quote.matching(layers.flavour.slug, SLUG, "matrix", "a flavour name of letters, digits, '.' and '-'")
        for name, text in flavour_files(inputs, layers).items():
            files[f"{slug}/{name}"] = text
        # each flavour's own conda environment (its Python, its pins), named apart
        files[f"{slug}/environment.yml"] = render_environment(
            inputs.stack, inputs.manifest, layers, name=f"{inputs.stack.stack.name}-{layers.flavour.slug}"
        )
    files["docker-bake.hcl"] = render_bake(inputs.stack, inputs.layers, inputs.images)
    files["workflow.yml"] = render_workflow(inputs.stack, inputs.layers)
    default = next((lay for lay in inputs.layers if lay.flavour.channel == "release"), inputs.layers[0])
    files["environment.yml"] = render_environment(inputs.stack, inputs.manifest, default)
    return files


def render_stack(stack_path: Path, out: Path, flavour: str | None = None, *, cluster: ClusterOptions | None = None) -> list[Path]:
    """Write the rendered files under ``out``; returns the paths whose content changed.

    Files of flavours not rendered this time are kept; ``out`` is replaced as a whole, so it
    must hold nothing but rendered files. ``cluster``: the Slurm or Kubernetes files of each
    flavour too, under ``<flavour>/slurm/`` or ``<flavour>/kubernetes/``.
    """
    inputs = load_inputs(stack_path, flavour)
    texts = stack_files(inputs)
    if cluster is not None:
        texts.update(cluster_files(inputs, cluster))
    files = {name: text.encode("utf-8") for name, text in texts.items()}
    previous = _rendered(out)
    replace_tree(out, {**previous, **files})
    return [out / name for name, data in sorted(files.items()) if previous.get(name) != data]


STACK_FILES = ("docker-bake.hcl", "workflow.yml", "environment.yml")


def _rendered(out: Path) -> dict[str, bytes]:
    """What an earlier render left in ``out``; UsageError for anything render does not write."""
    if not out.exists() and not out.is_symlink():
        return {}
    if out.is_symlink() or not out.is_dir():
        raise _foreign(out, out, "is not a directory")
    found: dict[str, bytes] = {}
    for entry in sorted(out.iterdir()):
        if entry.is_symlink() or not (entry.is_dir() or entry.name in STACK_FILES and entry.is_file()):
            raise _foreign(out, entry, "is not a file render writes")
        if entry.is_file():
            found[entry.name] = entry.read_bytes()
            continue
        for path in sorted(entry.rglob("*")):  # a flavour's files: Dockerfile, locks, sources/*.txt
            if path.is_symlink() or not (path.is_file() or path.is_dir()):
                raise _foreign(out, path, "is not a file render writes")
            if path.is_file():
                found[path.relative_to(out).as_posix()] = path.read_bytes()
    return found


def _foreign(out: Path, entry: Path, why: str) -> UsageError:
    return UsageError(
        f"--out {out}: {entry} {why}",
        hint="render into a directory of its own (default build/render): it is replaced as a whole",
    )
