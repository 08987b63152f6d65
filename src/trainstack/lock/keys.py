"""Cache keys: one per flavour, `<image>-<flavour slug>-<12 hex>`. Pure."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from trainstack.stackfile.matrix import Flavour, base_of, components_for
from trainstack.stackfile.schema import Stack

# Bumped when the rendered build (Dockerfile layers, build scripts) changes in a way
# that makes old cache entries wrong even though no lock changed.
TEMPLATE_VERSION = "2"


def cache_key(
    *,
    image: str,
    slug: str,
    base_image: str,
    lock_bytes: bytes,
    build_args: Mapping[str, str],
    template_version: str = TEMPLATE_VERSION,
) -> str:
    """Identical inputs always give the identical key; the slug keeps flavours apart."""
    payload = {
        "image": image,
        "slug": slug,
        "base": base_image,
        "lock": hashlib.sha256(lock_bytes).hexdigest(),
        "args": dict(sorted(build_args.items())),
        "template": template_version,
    }
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
    return f"{image_name(image)}-{slug}-{digest[:12]}"


def image_name(image: str) -> str:
    """'registry.example.com/ml/trainstack/torch' -> 'torch'."""
    return image.rstrip("/").rsplit("/", 1)[-1]


def base_image(stack: Stack, flavour: Flavour) -> str:
    found = base_of(stack, flavour)
    return found[1] if found is not None else flavour.os


def build_args(stack: Stack, flavour: Flavour) -> dict[str, str]:
    """Everything besides the lock that changes what a build of this flavour produces."""
    args: dict[str, str] = {"system_packages": " ".join(sorted(stack.build.system_packages))}
    for component in components_for(stack, flavour):
        for name, value in component.build_env.items():
            args[f"{component.key}.{name}"] = value
        if component.jobs is not None:
            args[f"{component.key}.jobs"] = f"{component.jobs.divisor}/{component.jobs.cap}"
    for name, value in stack.env.items():  # baked into the image's last layer and the venv's activation
        args[f"env.{name}"] = value
    return args


def build_settings(stack: Stack, flavour: Flavour) -> dict[str, str]:
    """What the release notes compare between two releases' builds: the build arguments and the
    compiler cache (its size changes no build output, so it is not in the cache key)."""
    cache = stack.build.compiler_cache
    return {**build_args(stack, flavour), "compiler_cache": f"{cache.kind} {cache.max_size}"}


def flavour_cache_key(stack: Stack, flavour: Flavour, lock_bytes: bytes) -> str:
    return cache_key(
        image=stack.stack.image_ref,
        slug=flavour.slug,
        base_image=base_image(stack, flavour),
        lock_bytes=lock_bytes,
        build_args=build_args(stack, flavour),
    )
