"""`trainstack lock`: resolve every flavour with uv, write lock files and the manifest.

Every flavour is resolved before anything is written, and the lock directory (manifest,
flavour and layer locks) is replaced as one unit, so a failed or interrupted lock leaves
the previous lock whole; concurrent locks of one stack take turns.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone
from pathlib import Path

from packaging.utils import canonicalize_name

from trainstack import grammar
from trainstack.console import err
from trainstack.errors import LockError, SpecError
from trainstack.fsutil import dump_json, exclusive, replace_tree
from trainstack.hostnvcc import find_host_nvcc
from trainstack.indexauth import default_from_env
from trainstack.lock.git import pin_source
from trainstack.lock.keys import base_image, build_settings, flavour_cache_key
from trainstack.lock.manifest import (
    MANIFEST_NAME,
    DeclaredIndexes,
    LockedFlavour,
    Manifest,
    load_manifest,
    lock_dir,
    manifest_path,
    read_lock_text,
)
from trainstack.lock.requests import FlavourRequests, flavour_requests, require_one_release, stack_inputs_hash
from trainstack.lock.resolve import compile_request, uv_version
from trainstack.lock.tags import stack_image_refs
from trainstack.redact import strip_userinfo
from trainstack.stackfile import expand_flavours, load_stack, select_flavour
from trainstack.stackfile.compat import needs_host_nvcc, require_rules
from trainstack.stackfile.schema import Stack

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)", re.MULTILINE)


def lock_stack(stack_path: Path, *, flavour: str | None = None, upgrade: Sequence[str] = (), dry_run: bool = False) -> Manifest:
    """Resolve the stack (or one flavour of it) and replace its lock directory as one unit;
    ``dry_run``: resolve, write nothing, and return the manifest it would write.

    One lock of a stack runs at a time: a second waits, then starts from the first's result.
    """
    stack_path = Path(stack_path)
    with _one_at_a_time(stack_path):
        return _lock(stack_path, flavour, upgrade, dry_run)


def _lock(stack_path: Path, flavour: str | None, upgrade: Sequence[str], dry_run: bool = False) -> Manifest:
    stack = load_stack(stack_path)
    chosen = select_flavour(stack, flavour)
    # the whole matrix must hold: the inputs hash covers every flavour, not just ``chosen``
    # what check refuses (no nvcc for a flavour's extensions, the host's looked at as check does) is not locked
    require_rules(stack, expand_flavours(stack), str(stack_path), find_host_nvcc() if needs_host_nvcc(stack) else None)
    all_requests = [flavour_requests(stack, f) for f in expand_flavours(stack)]
    directory = lock_dir(stack_path)
    previous = _previous(directory)
    # the stack's own name, not its file's: renaming the file must not move a lock byte nor a cache key
    header = f"trainstack lock (stack {stack.stack.name})"
    files: dict[str, str] = {}
    locked: dict[str, LockedFlavour] = {}
    todo = [p for p in all_requests if p.flavour in chosen]
    slugs = {p.flavour.slug for p in all_requests}
    redo = {p.flavour.slug for p in todo}
    kept = {s: f for s, f in (previous.flavours.items() if previous else ()) if s in slugs and s not in redo}
    tree = _carried(directory, kept, {p.flavour.slug: p for p in all_requests})  # checked before any resolution
    for number, requests in enumerate(todo, start=1):
        _locking(requests.flavour.slug, number, len(todo))
        entry, texts = _lock_flavour(stack, requests, directory, upgrade, header, str(stack_path))
        locked[requests.flavour.slug] = entry
        files.update(texts)
    manifest = Manifest(
        stack=stack.stack.name,
        release=stack.stack.release,
        image=stack.stack.image_ref,
        inputs_hash=stack_inputs_hash(stack, all_requests),
        uv_version=uv_version(),
        generated_at=_now(),
        flavours=dict(sorted({**kept, **locked}.items())),
    )
    manifest = _keep_timestamp(manifest, previous)
    stack_image_refs(stack, manifest.flavours, Path(stack_path))  # every flavour's tag made, none shared, before a byte is written
    tree.update({relative: text.encode("utf-8") for relative, text in files.items()})
    tree[MANIFEST_NAME] = dump_json(manifest.model_dump(mode="json")).encode("utf-8")
    if not dry_run:
        replace_tree(directory, tree)
    return manifest


@contextmanager
def _one_at_a_time(stack_path: Path) -> Iterator[None]:
    """An exclusive lock on the stack file for the whole run (nothing to lock when it is not a
    readable regular file: load_stack then says why)."""
    with ExitStack() as guard:
        try:
            if stat.S_ISREG(stack_path.stat().st_mode):
                guard.enter_context(exclusive(stack_path, on_wait=lambda: _waiting(stack_path)))
        except OSError:
            pass
        yield


def _locking(slug: str, number: int, total: int) -> None:
    """Which flavour is resolving now: a matrix of flavours takes a while."""
    err.print(f"locking {slug} ({number}/{total})", highlight=False, markup=False, style="dim")


def _waiting(stack_path: Path) -> None:
    err.print(f"waiting for another lock of {stack_path} to finish", highlight=False, markup=False)


def _carried(directory: Path, kept: dict[str, LockedFlavour], all_requests: dict[str, FlavourRequests]) -> dict[str, bytes]:
    """The files of flavours this run does not re-lock, as they are: the lock directory holds
    stack.lock.json and the files it lists, nothing else. Each is read as keys and render read
    it (a regular file inside the folder, never through a link out of it, every line checked),
    so that a planted link cannot copy another file's content into the new lock."""
    tree: dict[str, bytes] = {}
    for slug, entry in kept.items():
        requests = all_requests[slug]
        for relative in (entry.lock_file, *entry.layers.values()):
            try:
                text = read_lock_text(directory, relative, frozenset(requests.sources), declared_indexes(requests))
            except FileNotFoundError:
                continue
            tree[relative] = text.encode("utf-8")
    return tree


def check_lock_current(stack_path: Path, flavour: str | None = None) -> Manifest:
    """The manifest, after checking it still matches the stack's inputs and its files."""
    stack_path = Path(stack_path)
    stack = load_stack(stack_path)
    chosen = select_flavour(stack, flavour)
    all_requests = [flavour_requests(stack, f) for f in expand_flavours(stack)]
    path = manifest_path(stack_path)
    manifest = load_manifest(path)
    fix = f"re-lock with 'trainstack lock {stack_path}'"
    if flavour is None and manifest.inputs_hash != stack_inputs_hash(stack, all_requests):
        raise LockError(f"{path}: the lock no longer matches {stack_path}; {fix}")
    for requests in (p for p in all_requests if p.flavour in chosen):
        entry = manifest.flavours.get(requests.flavour.slug)
        if entry is None:
            raise LockError(f"{path}: flavour {requests.flavour.slug} is not locked; {fix}")
        if entry.inputs_hash != requests.inputs_hash():
            raise LockError(f"{path}: flavour {requests.flavour.slug} was locked from other inputs; {fix}")
        indexes = declared_indexes(requests)
        for relative in (entry.lock_file, *entry.layers.values()):
            try:  # each line checked (its index options against the stack's) before its hash counts
                text = read_lock_text(path.parent, relative, frozenset(requests.sources), indexes)
            except FileNotFoundError:
                raise LockError(f"{path.parent / relative}: missing; {fix}") from None
            if relative == entry.lock_file and _sha256(text.encode()) != entry.lock_sha256:
                raise LockError(f"{path.parent / relative}: changed since it was locked; {fix}")
            if relative == entry.lock_file and parse_pins(text) != entry.packages:
                raise SpecError(f"{path}: flavours.{requests.flavour.slug}.packages: differs from the pins of {relative}; {fix}")
        if (entry.index or "").rstrip("/") != (requests.variant_index or "").rstrip("/"):
            accepted = requests.variant_index or "null (no CUDA-variant index)"
            raise SpecError(
                f"{path}: flavours.{requests.flavour.slug}.index: '{grammar.shown(entry.index)}' is not the "
                f"flavour's CUDA-variant index (accepted: {accepted}); {fix}"
            )
    return manifest


def declared_indexes(requests: FlavourRequests) -> DeclaredIndexes:
    """The indexes a flavour's lock files may name: what the stack declares for it, and with no
    index url declared the environment's default index (the one uv locked against)."""
    default = default_from_env(os.environ)
    request = requests.full
    return DeclaredIndexes.of(request.index_url, request.extra_index_urls, request.find_links, strip_userinfo(default) if default else None)


def _lock_flavour(
    stack: Stack, requests: FlavourRequests, directory: Path, upgrade: Sequence[str], header: str, where: str
) -> tuple[LockedFlavour, dict[str, str]]:
    slug = requests.flavour.slug
    # sources first: a bad pin fails before any resolution
    sources = {key: pin_source(c, directory.parent, where) for key, c in sorted(requests.sources.items())}
    names = [c.name for c in stack.components.values()]
    attempts = stack.build.retries
    full_rel = f"locks/{slug}.txt"
    full = compile_request(
        requests.full,
        previous=_previous_lock(directory, full_rel, requests),
        constraints=None,
        upgrade=upgrade,
        header=header,
        component_names=names,
        attempts=attempts,
    )
    texts = {full_rel: full.text}
    with tempfile.TemporaryDirectory(prefix="trainstack-constraints-") as tmp:
        constraints = Path(tmp) / "full.txt"
        constraints.write_text(full.text, encoding="utf-8")
        for name, request in sorted(requests.layers.items()):
            relative = f"locks/{slug}.{name}.txt"
            texts[relative] = compile_request(
                request,
                previous=_previous_lock(directory, relative, requests),
                constraints=constraints,
                upgrade=upgrade,
                header=header,
                component_names=names,
                attempts=attempts,
            ).text
    for relative, text in sorted(texts.items()):
        require_one_release(requests.flavour, relative, parse_pins(text), where)
    lock_bytes = full.text.encode() + json.dumps(sources, sort_keys=True).encode()
    entry = LockedFlavour(
        **requests.flavour.as_dict(),
        lock_file=full_rel,
        lock_sha256=_sha256(full.text.encode()),
        index=requests.variant_index,
        cache_key=flavour_cache_key(stack, requests.flavour, lock_bytes),
        packages=parse_pins(full.text),
        sources=sources,
        layers={name: f"locks/{slug}.{name}.txt" for name in sorted(requests.layers)},
        inputs_hash=requests.inputs_hash(),
        base_image=base_image(stack, requests.flavour),
        build_settings=build_settings(stack, requests.flavour),
    )
    return entry, texts


def _previous_lock(directory: Path, relative: str, requests: FlavourRequests) -> Path | None:
    """The previous lock file uv starts from (keeping its pins), when it reads as a lock file of
    the folder should; one that does not (a link out of the folder, a hostile line) is not handed
    to uv: the flavour is resolved afresh and the file replaced."""
    try:
        read_lock_text(directory, relative, frozenset(requests.sources), declared_indexes(requests))
    except (OSError, SpecError):
        return None
    return directory / relative


def parse_pins(lock_text: str) -> dict[str, str]:
    """canonical name -> version for every `name==version` line of a lock file."""
    return {canonicalize_name(m.group(1)): m.group(2) for m in _PIN.finditer(lock_text)}


def _previous(directory: Path) -> Manifest | None:
    try:
        return load_manifest(directory / "stack.lock.json")
    except (LockError, SpecError):
        return None


def _keep_timestamp(manifest: Manifest, previous: Manifest | None) -> Manifest:
    """Unchanged content keeps its old timestamp, so the manifest stays byte-identical."""
    if previous is None:
        return manifest
    if manifest.model_dump(exclude={"generated_at"}) == previous.model_dump(exclude={"generated_at"}):
        return manifest.model_copy(update={"generated_at": previous.generated_at})
    return manifest


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
