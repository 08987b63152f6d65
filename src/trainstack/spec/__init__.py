"""The stack.toml spec: models, loading with precise errors, and the flavour matrix."""

from trainstack.spec.load import load_stack
from trainstack.spec.matrix import Flavour, expand_flavours, select_flavour
from trainstack.spec.models import Component, Stack

__all__ = ["Component", "Flavour", "Stack", "expand_flavours", "load_stack", "select_flavour"]
