"""One exception class per kind of user-facing failure, each with its exit code.

Every error is caught once, in ``cli.main``, and printed as a single line.
"""

from __future__ import annotations


class TrainstackError(Exception):
    """Base class: a failure the user can act on. Never shown with a traceback."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class UsageError(TrainstackError):
    """Bad arguments or options on the command line."""

    exit_code = 2


class SpecError(TrainstackError):
    """A stack.toml (or another input file) that does not validate."""

    exit_code = 2


class RuleViolation(TrainstackError):
    """A flavour breaks a compatibility rule."""

    exit_code = 3


class LockError(TrainstackError):
    """Resolution failed, or a lock no longer matches its stack."""

    exit_code = 4


class NetworkError(TrainstackError):
    """A network step failed after all its retries."""

    exit_code = 5


class ToolMissingError(TrainstackError):
    """A required external program is not installed."""

    exit_code = 6


class BuildError(TrainstackError):
    """A build step failed."""

    exit_code = 7


class DiskSpaceError(BuildError):
    """Not enough free disk for the next step."""


class VerifyError(TrainstackError):
    """Verification could not run (not: the gate failed; that is exit 1)."""

    exit_code = 8


class BudgetError(TrainstackError):
    """No plan fits the memory budget: says by how much, and what would fit."""

    exit_code = 9


class OutputError(TrainstackError):
    """An output could not be written (disk full, no permission); the previous one is unchanged."""

    exit_code = 10
