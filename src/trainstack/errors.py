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


class ProvenanceError(TrainstackError):
    """Signed provenance that does not hold: its signature, or a digest it names, differs."""

    exit_code = 1


class BusyError(TrainstackError):
    """Another trainstack run holds what this one would change (a build of the same flavour); nothing was done."""

    exit_code = 11


class NotBuiltError(VerifyError):
    """The environment to verify is not there: its flavour was never built (or was removed)."""


# --- the exit-code table ----------------------------------------------------------------
# The one source of each verb's exit codes: every verb's --help ends with its row, and the
# README's table is checked against it. Within a verb each code means one thing.

BAD_INPUT = "bad input"
INTERRUPTED = 130

# health keeps the monitoring convention (0 ok, 1 warn, 2 critical, 3 unknown), so its bad input
# cannot be 2: it is 64 (sysexits' EX_USAGE), which monitoring tools read as unknown, as they should.
HEALTH_BAD_INPUT = 64

# verb -> (what 0 means, the other codes with what each means), in the README's order.
EXIT_TABLE: dict[str, tuple[str, tuple[tuple[int, str], ...]]] = {
    "check": ("every rule holds", ((3, "a rule is broken"), (10, "--output not written (disk full)"), (2, BAD_INPUT))),
    "lock": (
        "locked",
        (
            (3, "a rule is broken"),
            (4, "resolution failed"),
            (5, "network failure"),
            (10, "not written (disk full, no permission; the previous lock kept)"),
            (2, BAD_INPUT),
        ),
    ),
    "keys": ("done", ((4, "no lock, or it no longer matches the stack"), (2, BAD_INPUT))),
    "render": ("done", ((4, "no lock, or it no longer matches the stack"), (10, "not written (the previous files kept)"), (2, BAD_INPUT))),
    "build": (
        "built",
        (
            (7, "a step failed (its log kept)"),
            (5, "network failure"),
            (6, "a tool missing"),
            (4, "stale lock"),
            (10, "build folder not writable (the previous build kept)"),
            (11, "another build of the flavour is running (nothing done)"),
            (2, BAD_INPUT),
        ),
    ),
    "report": (
        "reported",
        (
            (8, "the flavour is not built (with --stack)"),
            (10, "--output not written (disk full)"),
            (2, "bad input (a path that is not a working Python included)"),
        ),
    ),
    "linkcheck": ("nothing broken", ((1, "a link is broken"), (10, "--output not written (disk full)"), (2, BAD_INPUT))),
    "verify": (
        "the gate passes",
        (
            (1, "the gate fails, or --provenance does not hold"),
            (8, "the flavour is not built"),
            (6, "an image's --provenance: buildah or docker, the one that built it, missing"),
            (10, "verify.json not written (disk full)"),
            (2, "bad input (a suite command not pytest without --trust)"),
        ),
    ),
    "release": ("written", ((4, "a lock manifest missing or stale"), (10, "not written (the previous notes kept)"), (2, BAD_INPUT))),
    "health": (
        "ok",
        (
            (1, "warn; with --prolog the node fails (Slurm drains it); with --fleet a node fails, stands out or a node pair is slow"),
            (2, "critical"),
            (3, "unknown"),
            (6, "no torch at level 2 or 3"),
            (10, "--output not written (disk full)"),
            (HEALTH_BAD_INPUT, BAD_INPUT),
        ),
    ),
    "bench": (
        "measured",
        (
            (1, "a mode failed or nothing was measured"),
            (6, "no torch or no GPU"),
            (4, "a lock of --attribute missing or stale"),
            (7, "an environment of --attribute not built"),
            (10, "a result not written where asked (it is in a new file the error names)"),
            (2, BAD_INPUT),
        ),
    ),
    "memplan": ("a plan", ((9, "no plan fits the budget"), (6, "no torch"), (10, "--output not written (disk full)"), (2, BAD_INPUT))),
    "run": (
        "the job succeeded (once it starts, the code is the job's own)",
        ((2, "bad input (before the job starts)"), (6, "the command is not a program on PATH")),
    ),
}


def bad_input_code(verb: str | None) -> int:
    """The code a verb exits with on bad input: 2, except where 2 already means something else."""
    return HEALTH_BAD_INPUT if verb == "health" else UsageError.exit_code


def exit_codes_line(verb: str) -> str:
    """A verb's row of the table in words: 'Exit 0 ok, 1 warn, ...; 130 after Ctrl-C.'"""
    success, others = EXIT_TABLE[verb]
    codes = ", ".join(f"{code} {meaning}" for code, meaning in others)
    return f"Exit codes: 0 {success}, {codes}; {INTERRUPTED} after Ctrl-C."


def readme_rows() -> list[str]:
    """The README's exit-code table, as Markdown rows, made from the same table."""
    return [
        f"| `{verb}` | {success} | {', '.join(f'{code} {meaning}' for code, meaning in others)} |"
        for verb, (success, others) in EXIT_TABLE.items()
    ]
