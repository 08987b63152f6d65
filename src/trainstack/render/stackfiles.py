"""Stack-wide rendered files: docker-bake.hcl, a CI matrix workflow, a conda environment.yml. Pure."""

from __future__ import annotations

from trainstack.lock.layers import FlavourLayers
from trainstack.lock.manifest import Manifest
from trainstack.redact import strip_userinfo
from trainstack.render import quote
from trainstack.render.dockerfile import labels
from trainstack.stackfile.schema import Stack


def cache_ref(stack: Stack, cache_key: str) -> str:
    """Registry ref of a flavour's build cache: one tag per cache key, so flavours never share one."""
    return f"{stack.stack.image_ref}/buildcache:{cache_key.replace('/', '-')}"


def _q(value: str) -> str:
    return quote.hcl_string(value)


_y = quote.yaml_string


def render_bake(stack: Stack, all_layers: list[FlavourLayers], images: dict[str, str]) -> str:
    """``images``: slug -> the image reference its build is tagged with (trainstack.lock.tags)."""
    slugs = [layers.flavour.slug for layers in all_layers]
    out = [
        f"# docker buildx bake -f docker-bake.hcl [TARGET]: builds every flavour of "
        f"{quote.comment(stack.stack.name)} {quote.comment(stack.stack.release)}",
        "# index credentials, if any: NETRC=/path/to/netrc (a build secret, in no layer)",
        'variable "NETRC" {',
        '  default = "/dev/null"',
        "}",
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
            f"  tags       = [{_q(images[slug])}]",
            f"  cache-from = [{_q('type=registry,ref=' + ref)}]",
            f"  cache-to   = [{_q('type=registry,mode=max,ref=' + ref)}]",
            '  secret     = ["id=ca,src=${CA_BUNDLE}", "id=netrc,src=${NETRC}"]',
            "  labels = {",
            *[f"    {_q(k)} = {_q(v)}" for k, v in labels(stack, layers).items()],
            "  }",
            "}",
        ]
    return "\n".join(out) + "\n"


def render_workflow(stack: Stack, all_layers: list[FlavourLayers]) -> str:
    """Every value a YAML string of its own; the flavour reaches the shell through an environment
    variable, never by expanding an expression into the script."""
    slugs = ", ".join(_y(layers.flavour.slug) for layers in all_layers)
    return f"""# GitHub Actions: one job per flavour of {quote.comment(stack.stack.name)}, each a bake target with its own cache.
name: {_y("build " + stack.stack.name)}
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
        env:
          FLAVOUR: ${{{{ matrix.flavour }}}}
        run: docker buildx bake -f docker-bake.hcl --push "$FLAVOUR"
"""


def render_environment(stack: Stack, manifest: Manifest, layers: FlavourLayers, name: str | None = None) -> str:
    """A conda environment with the flavour's Python and its locked packages from pip; ``name``:
    the environment's (the stack's name unless given)."""
    pins = [f"{name}=={version}" for name, version in sorted(layers.locked.packages.items())]
    sources = {s.component.key for s in layers.sources}
    pip = [p for p in pins if p.split("==", 1)[0] not in sources]
    index = [f"--extra-index-url {strip_userinfo(layers.locked.index)}"] if layers.locked.index else []
    lines = [
        f"# conda env create -f environment.yml: {quote.comment(stack.stack.name)} {quote.comment(manifest.release)}, "
        f"flavour {quote.comment(layers.flavour.slug)}",
        f"name: {_y(name or stack.stack.name)}",
        "channels:",
        "  - conda-forge",
        "dependencies:",
        f"  - {_y('python=' + layers.flavour.python)}",
        "  - pip",
        "  - pip:",
        *[f"      - {_y(item)}" for item in index + pip],
    ]
    return "\n".join(lines) + "\n"
