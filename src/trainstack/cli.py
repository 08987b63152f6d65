"""The command line: parses arguments and calls one function per verb. Nothing else.

Conventions every verb follows (README, "Conventions"): errors are one line on stderr that
starts with ``error:``; ``--json`` prints the verb's result as JSON on stdout and
``--output FILE`` writes it; options that take a list accept commas (``--skip a,b``); sizes
need a unit. Every verb takes ``-h``, ``-q``/``-v`` and ``--color``, and its help ends with its
exit codes, from ``errors.EXIT_TABLE``. Only the verb being run is imported, so
``trainstack --help`` stays fast.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import sys
import textwrap
from collections.abc import Callable, Iterable
from typing import Any, Protocol, cast

import typer

from trainstack import __version__, console
from trainstack.console import print_error, print_hint
from trainstack.errors import EXIT_TABLE, INTERRUPTED, TrainstackError, UsageError, bad_input_code, exit_codes_line
from trainstack.redact import masked

# verb -> module exposing `command`, in the order a release flows through them.
VERBS: dict[str, str] = {
    "check": "trainstack.stackfile.command",
    "lock": "trainstack.lock.command",
    "keys": "trainstack.lock.keys_command",
    "render": "trainstack.render.command",
    "build": "trainstack.builder.command",
    "report": "trainstack.verify.report_command",
    "linkcheck": "trainstack.verify.linkcheck.command",
    "verify": "trainstack.verify.command",
    "release": "trainstack.release.command",
    "health": "trainstack.health.command",
    "bench": "trainstack.bench.command",
    "memplan": "trainstack.memplan.command",
    "run": "trainstack.run.command",
}

# What `trainstack --help` lists, so that listing the verbs imports none of them.
SUMMARIES: dict[str, str] = {
    "check": "Check every flavour against the compatibility rules; exit 3 when one is broken.",
    "lock": "Resolve every flavour with uv and write the lock files and stack.lock.json.",
    "keys": "Print the cache key of every locked flavour.",
    "render": "Render a Dockerfile per flavour, docker-bake.hcl, a CI workflow and environment.yml.",
    "build": "Build each flavour as a uv venv or an OCI image.",
    "report": "Report what an environment contains: OS, compilers, Python, torch, CUDA, GPUs, drift.",
    "linkcheck": "Resolve the NEEDED and dlopen'ed libraries of every ELF object, as ld.so would.",
    "verify": "Report, op table, link check, smoke checks and test suites; one verdict.",
    "release": "Write release notes (Markdown, JSON, HTML) from two lock manifests and results.",
    "health": "Check whether this node can run a training job; exit 0 ok, 1 warn, 2 critical, 3 unknown.",
    "bench": "Measure training throughput (tokens/s, MFU, memory) of a Llama-family decoder. Needs torch.",
    "memplan": "Predict peak training memory and choose what to recompute to fit a budget. Needs torch.",
    "run": "Run a training job with on-demand profiling, OOM snapshots and the memory plan; no code change.",
}

PROG = "trainstack"


# What this module reads and replaces on click's objects. typer carries its own copy of click (older typer
# uses click itself), so there is no one class to name: these protocols name the attributes used.
class _Documented(Protocol):
    help: str | None


class _Argument(Protocol):
    name: str | None
    metavar: str | None
    nargs: int
    required: bool
    display_type_rich: Callable[[Any], str | None]
    _rich_display_name: Callable[[], str]
    _usage_display_name: Callable[[], str]
    get_usage_pieces: Callable[[Any], list[str]]


class _Option(Protocol):
    name: str | None
    help: str | None
    process_value: Callable[[Any, Any], Any]


class _ClickError(Protocol):
    def format_message(self) -> str: ...


def _version(value: bool) -> None:
    if value:
        print(f"trainstack {__version__}")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Declare, lock, build, verify, benchmark and release GPU training stacks.

    Run 'trainstack VERB --help' for a verb's options, exit codes and an example.
    """


def build_app(verbs: Iterable[str] = VERBS, *, summaries_only: bool = False) -> typer.Typer:
    """The typer app with ``verbs`` registered (importing only their modules).

    ``summaries_only``: every verb is listed with its summary and none is imported (the
    root help); such an app can show help but run no verb.
    """
    app = typer.Typer(
        name=PROG,
        help="Declare, lock, build, verify, benchmark and release GPU training stacks.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,  # help is plain text: '[verify.links]' stays as written
        context_settings=_context_settings(),
    )
    app.callback()(_root)
    for verb in verbs:
        if summaries_only:
            app.command(verb, help=SUMMARIES[verb], short_help=SUMMARIES[verb])(_listed_only)
        else:
            command = _with_common_options(importlib.import_module(VERBS[verb]).command)
            app.command(verb, epilog=_epilog(verb), context_settings=_context_settings())(command)
    return app


def _epilog(verb: str) -> str:
    """The verb's exit codes, in paragraphs short enough to copy from a CI log (a line of at most 160 columns)."""
    return "\n\n".join(textwrap.wrap(exit_codes_line(verb), 160, break_on_hyphens=False))


def _context_settings() -> dict[str, object]:
    """-h beside --help; help as wide as the terminal, and unwrapped in a pipe or a file
    (COLUMNS, where set, decides in either case)."""
    settings: dict[str, object] = {"help_option_names": ["-h", "--help"]}
    width = console.columns()
    if width is None and not console.stdout_is_terminal():
        width = console.UNWRAPPED_WIDTH
    if width is not None:
        settings.update(terminal_width=width, max_content_width=width)
    return settings


def _set_verbosity(ctx: object, param: _Option, value: int) -> int:
    """-q and -v count against each other: -q is -1, -v 1, -vv 2."""
    store = getattr(ctx, "meta", {})
    store[param.name] = value or 0
    console.configure(verbosity=store.get("ts_verbose", 0) - store.get("ts_quiet", 0))
    return value


def _set_color(ctx: object, param: object, value: str) -> str:
    if value not in console.COLOR_CHOICES:
        raise UsageError(f"--color {value}: accepted: {', '.join(console.COLOR_CHOICES)}")
    console.configure(color=value)
    return value


COMMON_OPTIONS = (
    inspect.Parameter(
        "ts_quiet",
        inspect.Parameter.KEYWORD_ONLY,
        annotation=int,
        default=typer.Option(
            0,
            "--quiet",
            "-q",
            count=True,
            is_eager=True,
            callback=_set_verbosity,
            show_default=False,
            help="Only errors, warnings and the result: no progress, commands or notes.",
        ),
    ),
    inspect.Parameter(
        "ts_verbose",
        inspect.Parameter.KEYWORD_ONLY,
        annotation=int,
        default=typer.Option(
            0,
            "--verbose",
            "-v",
            count=True,
            is_eager=True,
            callback=_set_verbosity,
            show_default=False,
            help="More detail: every command trainstack runs, and the verb's notes.",
        ),
    ),
    inspect.Parameter(
        "ts_color",
        inspect.Parameter.KEYWORD_ONLY,
        annotation=str,
        default=typer.Option(
            "auto",
            "--color",
            metavar="auto|always|never",
            is_eager=True,
            callback=_set_color,
            help="Colour: auto (a terminal, unless NO_COLOR is set; FORCE_COLOR colours anything), always or never.",
        ),
    ),
)


def _with_common_options(func: Callable[..., object]) -> Callable[..., object]:
    """``func`` with -q/-v and --color added to its options: one declaration for every verb."""
    signature = inspect.signature(func)

    @functools.wraps(func)
    def verb(*args: object, **kwargs: object) -> object:
        for parameter in COMMON_OPTIONS:
            kwargs.pop(parameter.name, None)  # their callbacks already set the console
        return func(*args, **kwargs)

    verb.__signature__ = signature.replace(parameters=[*signature.parameters.values(), *COMMON_OPTIONS])  # type: ignore[attr-defined]  # typer reads __signature__ from the wrapper, which mypy's Callable has no slot for
    return verb


def _listed_only() -> None:
    raise UsageError("this app only lists the verbs")


def __getattr__(name: str) -> typer.Typer:
    """``trainstack.cli.app``: the app with every verb, for embedding and tests."""
    if name == "app":
        return build_app()
    raise AttributeError(name)


def _verb_in(argv: list[str]) -> str | None:
    return next((arg for arg in argv if not arg.startswith("-")), None)


def _app_for(argv: list[str]) -> typer.Typer:
    """Only the verb being run is imported: each verb's modules cost start-up time."""
    verb = _verb_in(argv)
    if verb is None:
        return build_app(summaries_only=True)
    if verb not in VERBS:
        close = difflib.get_close_matches(verb, VERBS, n=1)
        hint = f"perhaps you meant '{close[0]}'?" if close else f"verbs: {', '.join(VERBS)}"
        raise UsageError(f"no verb '{verb}'", hint=hint)
    return build_app([verb])


def _plain_help(command: _Documented) -> None:
    """Help that reads as words: NAME placeholders instead of '<int range>', ranges spelt out."""
    for sub in getattr(command, "commands", {}).values():
        _plain_help(sub)
    text = getattr(command, "help", None)
    if text:
        command.help = _keep_examples(text)
    for param in getattr(command, "params", []):
        if param.param_type_name == "argument":
            _plain_argument(param)
        elif param.metavar is None and not getattr(param, "is_flag", False):
            longest = max(param.opts, key=len)
            name = longest.lstrip("-").replace("-", "_").upper()
            param.metavar = "FILE" if name == "OUTPUT" else name
        if hasattr(param, "_get_number_range_help_str"):
            counted = getattr(param, "count", False)  # -q, -v: a count, not a number to give
            param._get_number_range_help_str = (lambda: None) if counted else _range_words(param)
        if getattr(param, "multiple", False) and _holds_text(param):
            _accept_commas(param)


def _keep_examples(text: str) -> str:
    """Example paragraphs kept on one line each (click's '\\b'), so they can be copied whole."""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(f"\b\n{p}" if p.startswith("Example") else p for p in paragraphs)


def _plain_argument(param: _Argument) -> None:
    """An argument shows as its NAME (with '...' when it takes several), without a type label."""
    name = param.metavar or (param.name or "").upper()
    many = "..." if param.nargs != 1 else ""
    param.display_type_rich = lambda ctx: None
    param._rich_display_name = lambda: name + many
    param._usage_display_name = lambda: (name if param.required else f"[{name}]") + many
    if getattr(param, "hidden", False):  # a hidden argument (one that catches strays) is not in the usage line
        param.get_usage_pieces = lambda ctx: []


def _holds_text(param: object) -> bool:
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is not None:
        return descriptor.annotation in (list[str], list[str] | None)
    return getattr(getattr(param, "type", None), "name", "") == "text"


def _accept_commas(param: _Option) -> None:
    """A repeatable text option also takes comma lists: '--skip a,b' is '--skip a --skip b'."""
    process = param.process_value

    def split_then_process(ctx: object, value: object) -> object:
        if isinstance(value, (list, tuple)):
            pieces = [piece.strip() for item in value for piece in str(item).split(",")]
            value = type(value)(piece for piece in pieces if piece)
        return process(ctx, value)

    param.process_value = split_then_process
    if param.help and "comma" not in param.help:
        param.help = f"{param.help} Repeat the option, or separate values with commas."


def _range_words(param: object) -> Callable[[], str | None]:
    low, high = getattr(param, "min", None), getattr(param, "max", None)

    def words() -> str | None:
        if low is not None and high is not None:
            return f"{low} to {high}"
        if low is not None:
            return f"at least {low}"
        return f"at most {high}" if high is not None else None

    return words


def _run(argv: list[str]) -> int:
    command = typer.main.get_command(_app_for(argv))
    _plain_help(command)
    # without standalone mode click returns a command's typer.Exit code instead of exiting
    code = command.main(args=argv, prog_name=PROG, standalone_mode=False)
    if code == INTERRUPTED:  # typer turns a Ctrl-C inside a verb into this code, silently
        print_error("interrupted")
    return code if isinstance(code, int) else 0


def main(argv: list[str] | None = None) -> int:
    """Entry point: one place where user errors become a one-line message and an exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    console.configure(color="auto", verbosity=0)  # each call starts from the defaults
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = masked(sys.stdout), masked(sys.stderr)  # every line out goes through the masking pass
    try:
        return _main(args)
    finally:
        sys.stdout, sys.stderr = streams


def _main(args: list[str]) -> int:
    try:
        return _run(args)
    except TrainstackError as exc:
        print_error(str(exc))
        return _bad_input(exc.exit_code, args)
    except ModuleNotFoundError as exc:
        from trainstack.extras import from_import_error

        missing = from_import_error(exc, _verb_in(args))
        if missing is None:
            raise
        print_error(str(missing))
        return missing.exit_code
    except KeyboardInterrupt:
        print_error("interrupted")
        return INTERRUPTED
    except _markup_error() as exc:
        # a message that reached rich's markup parser unescaped: still one line, never a traceback
        print_error(f"a message could not be printed ({exc}); this is a bug in trainstack")
        return 70
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        print_error("aborted")
        return 1
    except _click_errors() as exc:
        return _bad_input(_usage_error(cast(_ClickError, exc)), args)  # one of _click_errors(): a ClickException
    except BrokenPipeError:
        return 0


def _bad_input(code: int, args: list[str]) -> int:
    """Bad input exits 2, except in a verb where 2 means something else (the table says what)."""
    verb = _verb_in(args)
    return bad_input_code(verb) if code == UsageError.exit_code and verb in EXIT_TABLE else code


def _usage_error(exc: _ClickError) -> int:
    """A click usage error as 'error: ...' and one line saying where the help is."""
    if type(exc).__name__ == "NoArgsIsHelpError":  # 'trainstack' alone: the help, as click would
        sys.stdout.write(exc.format_message() + "\n")
        return getattr(exc, "exit_code", 2)
    print_error(exc.format_message())
    ctx = getattr(exc, "ctx", None)
    if ctx is not None:
        print_hint(f"{ctx.get_usage()}  (see '{ctx.command_path} --help')")
    return getattr(exc, "exit_code", 2)


def _markup_error() -> type[Exception]:
    from rich.errors import MarkupError

    return MarkupError


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
