"""Build backends (venv, oci) behind one interface, with retries, CPU budget, disk checks and atomic swaps."""

from trainstack.builder.api import build_stack

__all__ = ["build_stack"]
