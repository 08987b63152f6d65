"""The stack.toml spec: its schema, loading with precise errors, and the flavour matrix."""

from trainstack.stackfile.load import load_stack
from trainstack.stackfile.matrix import Flavour, expand_flavours, select_flavour
from trainstack.stackfile.schema import Component, Stack

__all__ = ["Component", "Flavour", "Stack", "expand_flavours", "load_stack", "select_flavour"]
