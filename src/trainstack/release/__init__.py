"""Release notes from two lock manifests, verify and bench results, and changelog fragments."""

from trainstack.release.publish import make_release

__all__ = ["make_release"]
