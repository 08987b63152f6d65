"""Lock: uv resolution per flavour, the lock manifest, cache keys, the lock files' text split into image layers,
and the locked stack that render and build start from (``lock.inputs``)."""

from trainstack.lock.keys import TEMPLATE_VERSION, cache_key, flavour_cache_key
from trainstack.lock.lock import check_lock_current, lock_stack, parse_pins
from trainstack.lock.manifest import LockedFlavour, Manifest, load_manifest, lock_dir, manifest_path

__all__ = [
    "TEMPLATE_VERSION",
    "LockedFlavour",
    "Manifest",
    "cache_key",
    "check_lock_current",
    "flavour_cache_key",
    "load_manifest",
    "lock_dir",
    "lock_stack",
    "manifest_path",
    "parse_pins",
]
