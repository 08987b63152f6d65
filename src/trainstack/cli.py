"""The command line: parses arguments and calls one function per verb. Nothing else."""

from __future__ import annotations

import difflib
import importlib
import sys
from collections.abc import Iterable

import typer

from trainstack import __version__
from trainstack.console import err
from trainstack.errors import TrainstackError, UsageError

# verb -> module exposing `command`, in the order a release flows through them.
VERBS: dict[str, str] = {
    "check": "trainstack.rules.command",
    "lock": "trainstack.lock.command",
    "keys": "trainstack.lock.keys_command",
    "render": "trainstack.render.command",
    "build": "trainstack.build.command",
    "report": "trainstack.verify.report_command",
    "linkcheck": "trainstack.verify.linkcheck.command",
    "verify": "trainstack.verify.command",
    "release": "trainstack.release.command",
    "health": "trainstack.health.command",
    "bench": "trainstack.bench.command",
    "memplan": "trainstack.memplan.command",
}


def _version(value: bool) -> None:
    if value:
        print(f"trainstack {__version__}")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Declare, lock, build, verify, benchmark and release GPU training stacks."""


def build_app(verbs: Iterable[str] = VERBS) -> typer.Typer:
    """The typer app with ``verbs`` registered (importing only their modules)."""
    app = typer.Typer(
        name="trainstack",
        help="Declare, lock, build, verify, benchmark and release GPU training stacks.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode="rich",
    )
    app.callback()(_root)
    for verb in verbs:
        app.command(verb)(importlib.import_module(VERBS[verb]).command)
    return app


def __getattr__(name: str) -> typer.Typer:
    """``trainstack.cli.app``: the app with every verb, for embedding and tests."""
    if name == "app":
        return build_app()
    raise AttributeError(name)


def _app_for(argv: list[str]) -> typer.Typer:
    """Only the verb being run is imported: each verb's modules cost start-up time."""
    verb = next((arg for arg in argv if not arg.startswith("-")), None)
    if verb is None:
        return build_app()
    if verb not in VERBS:
        close = difflib.get_close_matches(verb, VERBS, n=1)
        hint = f"perhaps you meant '{close[0]}'?" if close else f"verbs: {', '.join(VERBS)}"
        raise UsageError(f"no verb '{verb}'", hint=hint)
    return build_app([verb])


def main(argv: list[str] | None = None) -> int:
    """Entry point: one place where user errors become a one-line message and an exit code."""
    try:
        # without standalone mode click returns a command's typer.Exit code instead of exiting
        args = list(sys.argv[1:] if argv is None else argv)
        code = _app_for(args)(args=args, standalone_mode=False)
    except TrainstackError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        return exc.exit_code
    except KeyboardInterrupt:
        err.print("[bold red]interrupted[/]")
        return 130
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        return 1
    except _click_errors() as exc:
        exc.show()
        return exc.exit_code
    return code if isinstance(code, int) else 0


def _click_errors() -> tuple[type[Exception], ...]:
    """Usage errors: newer typer raises them from its own copy of click, older from click."""
    found = []
    for module in ("typer._click.exceptions", "click.exceptions"):
        try:
            found.append(importlib.import_module(module).ClickException)
        except ImportError:
            continue
    return tuple(found)


if __name__ == "__main__":
    sys.exit(main())
