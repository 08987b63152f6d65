"""A real release replayed: the seed's two stacks (torch-extras 2024.4.0 -> 2024.5.0, tests/data/release_seed)
copied with this checkout's input hashes, and the seven changes the release between them holds."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from trainstack.lock.requests import flavour_requests, stack_inputs_hash
from trainstack.stackfile import load_stack
from trainstack.stackfile.matrix import expand_flavours

SEED = Path(__file__).resolve().parent / "data" / "release_seed"
SEVEN = [
    "apex: 2386a91 → a7de60e",
    "deepspeed: 0.12.6 → 0.14.2",
    "flash-attn: 2.4.2 → 2.5.8",
    "numpy: added 1.26.4",
    "torch: 2.2.2 → 2.3.0",
    "torchaudio: 2.2.2 → 2.3.0",
    "torchvision: 0.17.2 → 0.18.0",
]


@pytest.fixture()
def seed(tmp_path: Path) -> Path:
    """A copy of the seed whose manifests' input hashes are this checkout's (what 'lock' would
    write for these stacks), so the release sees a current lock."""
    root = tmp_path / "seed"
    shutil.copytree(SEED, root)
    for side in ("before", "after"):
        stack_path = root / side / "torch-extras.toml"
        stack = load_stack(stack_path)
        plans = [flavour_requests(stack, f) for f in expand_flavours(stack)]
        path = stack_path.parent / "torch-extras.lock" / "stack.lock.json"
        manifest = json.loads(path.read_text())
        manifest["inputs_hash"] = stack_inputs_hash(stack, plans)
        for plan in plans:
            entry = manifest["flavours"][plan.flavour.slug]
            entry["inputs_hash"] = plan.inputs_hash()
            entry["lock_sha256"] = hashlib.sha256((path.parent / entry["lock_file"]).read_bytes()).hexdigest()
        path.write_text(json.dumps(manifest, indent=2))
    return root
