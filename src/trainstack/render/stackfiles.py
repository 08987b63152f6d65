"""Stack-wide rendered files: docker-bake.hcl, a CI matrix workflow, a conda environment.yml. Pure."""

from __future__ import annotations

import json

from trainstack.lock.manifest import Manifest
from trainstack.render.dockerfile import labels
from trainstack.render.layers import FlavourLayers
from trainstack.spec.models import Stack


def cache_ref(stack: Stack, cache_key: str) -> str:
    """Registry ref of a flavour's build cache: one tag per cache key, so flavours never share one."""
    return f"{stack.stack.image_ref}/buildcache:{cache_key.replace('/', '-')}"


def image_tag(stack: Stack, slug: str) -> str:
    return f"{stack.stack.image_ref}:{stack.stack.release}-{slug}"


def _q(value: str) -> str:
    return json.dumps(value)


def render_bake(stack: Stack, all_layers: list[FlavourLayers]) -> str:
    slugs = [layers.flavour.slug for layers in all_layers]
    out = [
        f"# docker buildx bake -f docker-bake.hcl [TARGET]: builds every flavour of {stack.stack.name} {stack.stack.release}",
        'variable "CA_BUNDLE" {',
        '  default = "/etc/ssl/certs/ca-certificates.crt"',
        "}",
        "",
        'group "default" {',
        f"  targets = [{', '.join(_q(s) for s in slugs)}]",
        "}",
    ]
    for layers in all_layers:
        slug = layers.flavour.slug
        ref = cache_ref(stack, layers.locked.cache_key)
        out += [
            "",
            f"target {_q(slug)} {{",
            f"  context    = {_q(slug)}",
            '  dockerfile = "Dockerfile"',
            '  target     = "final"',
            f"  tags       = [{_q(image_tag(stack, slug))}]",
            f"  cache-from = [{_q('type=registry,ref=' + ref)}]",
            f"  cache-to   = [{_q('type=registry,mode=max,ref=' + ref)}]",
            '  secret     = ["id=ca,src=${CA_BUNDLE}"]',
            "  labels = {",
            *[f"    {_q(k)} = {_q(v)}" for k, v in labels(stack, layers).items()],
            "  }",
            "}",
        ]
    return "\n".join(out) + "\n"


def render_workflow(stack: Stack, all_layers: list[FlavourLayers]) -> str:
    slugs = ", ".join(layers.flavour.slug for layers in all_layers)
    return f"""# GitHub Actions: one job per flavour of {stack.stack.name}, each a bake target with its own cache.
name: build {stack.stack.name}
on:
  workflow_dispatch:
  push:
    paths: ["**/docker-bake.hcl", "**/Dockerfile", "**/*.txt"]
permissions:
  contents: read
  packages: write
jobs:
  build:
    runs-on: ubuntu-latest
    strategy:
      fail-fast: false
      matrix:
        flavour: [{slugs}]
    steps:
      - uses: actions/checkout@v4
      - uses: docker/setup-buildx-action@v3
      - name: bake ${{{{ matrix.flavour }}}}
        run: docker buildx bake -f docker-bake.hcl --push "${{{{ matrix.flavour }}}}"
"""


def render_environment(stack: Stack, manifest: Manifest, layers: FlavourLayers) -> str:
    """A conda environment with the flavour's Python and its locked packages from pip."""
    pins = [f"{name}=={version}" for name, version in sorted(layers.locked.packages.items())]
    sources = {s.component.key for s in layers.sources}
    pip = [p for p in pins if p.split("==", 1)[0] not in sources]
    index = [f"--extra-index-url {layers.locked.index}"] if layers.locked.index else []
    lines = [
        f"# conda env create -f environment.yml: {stack.stack.name} {manifest.release}, flavour {layers.flavour.slug}",
        f"name: {stack.stack.name}",
        "channels:",
        "  - conda-forge",
        "dependencies:",
        f"  - python={layers.flavour.python}",
        "  - pip",
        "  - pip:",
        *[f"      - {item}" for item in index + pip],
    ]
    return "\n".join(lines) + "\n"
