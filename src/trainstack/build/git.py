"""Git sources: clone (a network step, retried) and check out the pinned commit, or fail on one line."""

from __future__ import annotations

import shutil
from pathlib import Path

from trainstack import proc
from trainstack.build.steps import Steps
from trainstack.errors import BuildError
from trainstack.spec.models import Component


def fetch_git(steps: Steps, component: Component, dest: Path) -> str:
    """Clone ``component.git`` into ``dest`` at ``component.commit``; returns the full sha."""
    assert component.git is not None and component.commit is not None
    shutil.rmtree(dest, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    steps.run(f"fetch-{component.key}", ["git", "clone", "--quiet", "--no-checkout", component.git, dest], network=True)
    found = proc.run(["git", "-C", dest, "rev-parse", "--verify", "--quiet", f"{component.commit}^{{commit}}"], echo=False)
    if not found.ok:
        raise BuildError(
            f"components.{component.name}.commit: {component.commit} does not exist in {component.git}",
            hint="pin 'commit' to a sha of that repository and re-lock",
        )
    steps.run(f"checkout-{component.key}", ["git", "-C", dest, "checkout", "--quiet", "--detach", found.stdout.strip()])
    return found.stdout.strip()
