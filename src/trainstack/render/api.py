"""render_stack: every rendered file computed in memory first, then written atomically."""

from __future__ import annotations

from pathlib import Path

from trainstack.fsutil import write_if_changed
from trainstack.render.dockerfile import render_dockerfile, source_file
from trainstack.render.inputs import Inputs, load_inputs
from trainstack.render.layers import FlavourLayers
from trainstack.render.stackfiles import render_bake, render_environment, render_workflow


def flavour_files(inputs: Inputs, layers: FlavourLayers) -> dict[str, str]:
    """A flavour's build context: its Dockerfile and the lock files its stages bind-mount."""
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


def stack_files(inputs: Inputs) -> dict[str, str]:
    files: dict[str, str] = {}
    for layers in inputs.layers:
        for name, text in flavour_files(inputs, layers).items():
            files[f"{layers.flavour.slug}/{name}"] = text
    files["docker-bake.hcl"] = render_bake(inputs.stack, inputs.layers)
    files["workflow.yml"] = render_workflow(inputs.stack, inputs.layers)
    default = next((lay for lay in inputs.layers if lay.flavour.channel == "release"), inputs.layers[0])
    files["environment.yml"] = render_environment(inputs.stack, inputs.manifest, default)
    return files


def render_stack(stack_path: Path, out: Path, flavour: str | None = None) -> list[Path]:
    """Write the rendered files under ``out``; returns the paths whose content changed."""
    files = stack_files(load_inputs(stack_path, flavour))
    return [out / name for name, text in sorted(files.items()) if write_if_changed(out / name, text)]
