"""Where a flavour's cluster files point: the built venv's interpreter (or the one given) and the
image pinned by the digest of its build record. Reads build.json, the one edge of rendering a
cluster's files; the rest is pure (cluster, slurm, kubernetes)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trainstack.console import print_error
from trainstack.errors import SpecError, UsageError
from trainstack.fsutil import describe_os_error, read_regular
from trainstack.lock.inputs import Inputs
from trainstack.render import quote
from trainstack.render.cluster import Placement
from trainstack.render.kubernetes import kubernetes_files
from trainstack.render.slurm import slurm_files

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


class BuildRecord(BaseModel):
    """What render reads of a flavour's build.json (the builder writes the whole record)."""

    model_config = ConfigDict(extra="ignore")

    flavour: str = Field(max_length=200)
    image: str | None = Field(default=None, max_length=500)
    image_digest: str | None = Field(default=None, pattern=DIGEST.pattern)


ENGINES = ("slurm", "kubernetes")


@dataclass(frozen=True)
class ClusterOptions:
    engine: str  # slurm | kubernetes
    build_dir: Path = Path("build")
    python: str | None = None  # the interpreter on the nodes; default the built venv's
    image: bool = False  # Slurm: the sbatch scripts run the stack's image through pyxis
    squashfs: str | None = None  # with image: the image as a squashfs file on the nodes


def squashfs_path(path: str) -> str:
    """--squashfs: an absolute path on one line (pyxis takes a path that starts with '/' as a file)."""
    quote.one_line(path, "--squashfs")
    if not path.startswith("/") or len(path) > 4096:
        raise UsageError(
            f"--squashfs {quote.comment(path)}: accepted: an absolute path on the nodes "
            "(/shared/images/stack.sqsh), at most 4096 characters"
        )
    return path


def _record(build_dir: Path, slug: str) -> BuildRecord | None:
    path = build_dir / slug / "build.json"
    if not path.exists():
        return None
    try:
        return BuildRecord.model_validate_json(read_regular(path, "build record", limit=4 << 20))
    except OSError as exc:
        raise SpecError(f"{path}: cannot read: {describe_os_error(exc)}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        raise SpecError(
            f"{path}: {'.'.join(str(x) for x in first['loc']) or '(document)'}: {first['msg']} "
            "(accepted: the build.json 'trainstack build' writes)"
        ) from None


def placement(inputs: Inputs, slug: str, options: ClusterOptions) -> Placement:
    record = _record(options.build_dir, slug)
    python = options.python or str((options.build_dir / slug / "venv" / "bin" / "python").absolute())
    quote.one_line(python, "--python")
    tag = inputs.images[slug]
    path = options.build_dir / slug / "build.json"
    pyxis: dict[str, Any] = {"pyxis": options.image, "squashfs": options.squashfs}
    if record is not None and record.image_digest and record.image == tag:
        return Placement(inputs.stack, slug, python, f"{tag}@{record.image_digest}", pinned=True, **pyxis)
    if record is None:
        why = f"no {path}"
    elif record.image != tag:
        why = f"{path} is of image {quote.comment(record.image)}, not {tag} (build the flavour again)"
    else:
        why = f"{path} records no image digest (push the image, then build again)"
    return Placement(inputs.stack, slug, python, tag, pinned=False, unpinned_why=why, **pyxis)


def cluster_files(inputs: Inputs, options: ClusterOptions) -> dict[str, str]:
    files: dict[str, str] = {}
    for layers in inputs.layers:
        slug = layers.flavour.slug
        p = placement(inputs, slug, options)
        if options.engine == "slurm":
            rendered = slurm_files(p)
            if p.pyxis and not p.squashfs and not p.pinned:
                print_error(f"{slug}: the sbatch scripts name the image by its tag, not pinned: {p.unpinned_why}", prefix="warning:")
        else:
            rendered = kubernetes_files(p)
            if not p.pinned:
                print_error(f"{slug}: the Kubernetes manifests name the image by its tag, not pinned: {p.unpinned_why}", prefix="warning:")
        files.update({f"{slug}/{name}": text for name, text in rendered.items()})
    return files
