"""trainstack: declare, lock, build, verify, benchmark and release GPU training stacks."""

__version__ = "0.1.0"
