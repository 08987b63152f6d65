"""The command line: parses arguments and calls one function per verb. Nothing else."""

from __future__ import annotations

import importlib
import sys

import typer

from trainstack import __version__
from trainstack.console import err
from trainstack.errors import TrainstackError

app = typer.Typer(
    name="trainstack",
    help="Declare, lock, build, verify, benchmark and release GPU training stacks.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)

# verb -> module exposing `command`, in the order a release flows through them.
VERBS: dict[str, str] = {
    "check": "trainstack.rules.command", "lock": "trainstack.lock.command", "keys": "trainstack.lock.keys_command",
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


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Declare, lock, build, verify, benchmark and release GPU training stacks."""


for _verb, _module in VERBS.items():
    app.command(_verb)(importlib.import_module(_module).command)


def main(argv: list[str] | None = None) -> int:
    """Entry point: one place where user errors become a one-line message and an exit code."""
    try:
        # without standalone mode click returns a command's typer.Exit code instead of exiting
        code = app(args=argv, standalone_mode=False)
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


def _click_errors() -> type[Exception]:
    import click

    return click.ClickException


if __name__ == "__main__":
    sys.exit(main())
