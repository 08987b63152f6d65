"""Git sources: clone (a network step, retried) and check out the pinned commit, or fail on one line."""

from __future__ import annotations

import shutil
from pathlib import Path

from trainstack import grammar, proc
from trainstack.builder.steps import Steps
from trainstack.errors import BuildError
from trainstack.stackfile.schema import Component

# the transports a stack's git source may use; never 'ext::' (runs a command) or another helper
GIT_ENV = {"GIT_ALLOW_PROTOCOL": "file:git:http:https:ssh", "GIT_TERMINAL_PROMPT": "0"}


def fetch_git(steps: Steps, component: Component, dest: Path) -> str:
    """Clone ``component.git`` into ``dest`` at ``component.commit``; returns the full sha."""
    assert component.git is not None and component.commit is not None
    try:  # again here: a component built without validation must not reach git as an option
        grammar.git_url(component.git)
        grammar.commit(component.commit)
    except ValueError as exc:
        raise BuildError(f"components.{grammar.shown(component.name)}: {exc}") from None
    shutil.rmtree(dest, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    clone = ["git", "clone", "--quiet", "--no-checkout", "--", component.git, str(dest)]
    steps.run(f"fetch-{component.key}", clone, network=True, env=GIT_ENV)
    found = proc.run(
        ["git", "-C", dest, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{component.commit}^{{commit}}"],
        echo=False,
    )
    if not found.ok:
        raise BuildError(
            f"components.{component.name}.commit: {component.commit} does not exist in {component.git}",
            hint="pin 'commit' to a sha of that repository and re-lock",
        )
    steps.run(f"checkout-{component.key}", ["git", "-C", dest, "checkout", "--quiet", "--detach", found.stdout.strip(), "--"])
    return found.stdout.strip()
