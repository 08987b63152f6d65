"""Rendered build files: a Dockerfile per flavour, docker-bake.hcl, a CI workflow, environment.yml."""

from trainstack.render.api import render_stack

__all__ = ["render_stack"]
