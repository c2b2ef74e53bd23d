"""The typer app, its consoles and exit codes, and the helpers every command shares.

The CLI is the only part of lerobench that prints. Errors become one red line + exit code here.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from lerobench.errors import STOP_REQUESTED, ConfigError, LerobenchError

# The click exceptions typer raises: click's own in older typer, a vendored copy (typer._click) in newer ones.
click_exceptions = sys.modules[typer.BadParameter.__module__]


class OneLineErrorsGroup(typer.core.TyperGroup):
    """Usage errors of every command (bad value, unknown or missing option) as one ``error:`` line + exit 2.

    Typer would print a boxed, multi-line usage block; scripts and CI logs want one line. Done once here, for
    every command, rather than per command. A bare ``lerobench`` prints the help and exits 0.
    """

    def main(  # type: ignore[override]
        self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
        standalone_mode: bool = True, **extra: Any,
    ) -> Any:
        """Run the command line; in standalone mode (the console script, CliRunner) exit with its code."""
        args = list(sys.argv[1:] if args is None else args) or ["--help"]
        prog_name = prog_name or "lerobench"  # also under `python -m lerobench`
        _plain_strings(self)
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click_exceptions.ClickException as exc:
            usage = isinstance(exc, click_exceptions.UsageError) and exc.ctx is not None
            hint = f" (see {exc.ctx.command_path} --help)" if usage else ""
            message = escape(" ".join(exc.format_message().split()) + hint)
            err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
            sys.exit(exc.exit_code)
        except typer.Abort:
            err_console.print("[bold red]error:[/] aborted")
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


def _plain_strings(group: typer.core.TyperGroup) -> None:
    """Give plain ``str`` options and flags typer's pass-through coercion instead of a pydantic ``TypeAdapter``.

    Why: typer builds a pydantic adapter for every non-bool option it processes, even one left at its
    default of None, and importing pydantic for that was 60 of the ~130 ms that `lerobench list` (one
    ``--family`` option) spent beyond importing typer and rich. A string from the command line needs no
    validation to be a ``str``. Uses typer internals (``typer._coercion``); with another typer the options
    keep typer's own coercion, and tests/test_imports.py notices the import again.
    """
    try:
        from typer import _click as click_core
        from typer._coercion import PassThroughRuntimeParam
    except ImportError:
        return
    params = []
    for command in [group, *group.commands.values()]:
        helper = command.get_help_option(click_core.Context(command, **command.context_settings))  # then cached
        params += [*command.params, *([helper] if helper is not None else [])]
    for param in params:
        descriptor = getattr(param, "type_descriptor", None)
        if descriptor is None or descriptor.file_annotation is not None or getattr(param, "_runtime_param", None):
            continue
        plain = descriptor.annotation is str or (descriptor.annotation is bool and getattr(param, "is_flag", False))
        if plain:  # a flag is a bool already (--help included), a string from the command line a str
            param._runtime_param = PassThroughRuntimeParam(  # type: ignore[attr-defined]
                parameter_info=descriptor.parameter_info, annotation=descriptor.annotation)


app = typer.Typer(
    cls=OneLineErrorsGroup,
    add_completion=False,
    help="Evaluate robot policies on real simulator benchmarks (LIBERO, Meta-World, PushT, ALOHA).",
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: the boxed one cuts option names ("--stop-on-succ…") in 80 columns or a pipe
)
console = Console()
err_console = Console(stderr=True)

EXIT_TOO_MANY_ERRORS = 3
EXIT_INCOMPLETE_MERGE = 4
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


class Terminated(BaseException):
    """Raised in the main thread when SIGTERM arrives, so cleanup runs as for Ctrl-C."""


def fail(exc: LerobenchError) -> None:
    """End the command with the error's one red line and its exit code (where its traceback was saved, if it was)."""
    # escaped: messages hold brackets ("pip install 'lerobench[ray]'") that rich would take for markup and drop
    saved = getattr(exc, "traceback_file", None)
    where = f" (traceback in {saved})" if saved else ""
    err_console.print(f"[bold red]error:[/] {escape(str(exc))}{escape(where)}", highlight=False, soft_wrap=True)
    raise typer.Exit(exc.exit_code)


def rate_text(value: float | None) -> str:
    """A rate as people read it in tables: ``62.5%``, or ``-`` when there is none."""
    return "-" if value is None else f"{100 * value:.1f}%"


def headline_rates(block: dict[str, Any], trials: int) -> str:
    """A results block's rate as a headline: ``62.5% success``; with trials, trial 0's and within K trials'.

    Why both: with ``--trials`` the ``success_rate`` is trial 0's (comparable with 1-trial runs), and printing it
    alone read "0.0% success" for a run whose every episode succeeded by its last trial.
    """
    first = f"{rate_text(block.get('success_rate'))} success"
    within = block.get("success_within_k") or []
    if trials <= 1 or not within:
        return first
    return f"{first} at trial 0, {rate_text(within[-1]['success_rate'])} within {trials} trials"


def plural(n: int, noun: str) -> str:
    """``1 episode``, ``2 episodes``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def elide_middle(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters by dropping its middle: LIBERO names differ at both ends."""
    if len(text) <= width:
        return text
    keep = max(2, width - 1)
    return text[: keep - keep // 2] + "…" + text[len(text) - keep // 2:]


def print_json(data: Any) -> None:
    """``--json`` output: indented, never NaN (not JSON), straight to stdout (no rich markup or wrapping).

    Floats are written at 12 significant digits: ``0.8 * (1 - 0.9)`` is 0.08, not ``0.07999999999999999``.
    """
    import json

    sys.stdout.write(json.dumps(_readable(data), indent=2, allow_nan=False) + "\n")


def _readable(data: Any) -> Any:
    """``data`` with every float at 12 significant digits (binary noise below that is not information)."""
    if isinstance(data, float):
        return float(f"{data:.12g}")
    if isinstance(data, dict):
        return {k: _readable(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_readable(v) for v in data]
    return data



JSON_OPTION = typer.Option(False, "--json", help="Print JSON (for scripts) instead of a table.")


def print_names_table(table: Table, slack: int = 10) -> None:
    """Print a table whose ``no_wrap`` name columns must stay whole: widen past the terminal if they need it.

    Rich would otherwise cut long names ("pick_up_the_black_bowl_…") in an 80-column terminal or a pipe, and
    ``grep`` for a name would miss it; the description column folds into the remaining space instead. Into a
    pipe or a file nothing folds: each row is one line, so ``lerobench list | grep aloha`` shows whole rows.
    """
    width = natural_width(table)
    print_widened(table, width.minimum + slack if console.is_terminal else width.maximum)


def natural_width(table: Table) -> Any:
    """The table's rich ``Measurement`` (minimum, maximum) given unlimited room."""
    from rich.measure import Measurement

    return Measurement.get(console, console.options.update_width(10_000), table)


def print_widened(table: Table, needed: int) -> None:
    """Print ``table`` on a console at least ``needed`` columns wide, uncropped (then the width is restored)."""
    width = console.width
    console.width = max(width, needed)  # print(width=...) is capped at the console's width
    try:
        console.print(table, crop=False)
    finally:
        console.width = width



RETRY_SIGNAL_S = 0.05
"""How soon a stop that arrived during an import is raised again (``_raise_outside_imports``)."""


def _raise_outside_imports(exc_type: type[BaseException], requested: list[type[BaseException]]) -> Any:
    """A signal handler raising ``exc_type``, but never inside Python's import machinery.

    Why: raised there, the exception can land in one of importlib's weakref callbacks, where Python prints
    "Exception ignored in ... Traceback" and drops it: the user sees a traceback and the run goes on. So a
    stop that arrives while importlib's own code runs (scipy's import takes ~0.5 s the first time a task is
    summarized) is raised again ``RETRY_SIGNAL_S`` later (SIGALRM). ``requested`` records the
    stop at once: an error raised meanwhile (workers killed by the same signal) is a consequence of it.
    """

    def handler(signum: int, frame: Any) -> None:
        if exc_type not in requested:
            requested.append(exc_type)
        STOP_REQUESTED.set()
        if frame is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
            signal.signal(signal.SIGALRM, handler)
            signal.setitimer(signal.ITIMER_REAL, RETRY_SIGNAL_S)
            return
        raise exc_type()

    return handler



@contextmanager
def interrupts_keep_results(hint: str) -> Iterator[None]:
    """Ctrl-C and SIGTERM (``docker stop``, a job scheduler) end a run with one line and exit 130 / 143.

    Cleanup runs as for any exception (workers stopped, finished episodes already on disk); ``hint`` says how
    to continue. Shared by every command that runs episodes (``eval``, ``robustness``).
    """
    requested: list[type[BaseException]] = []
    STOP_REQUESTED.clear()
    previous = {sig: signal.signal(sig, _raise_outside_imports(exc, requested))
                for sig, exc in ((signal.SIGTERM, Terminated), (signal.SIGINT, KeyboardInterrupt))}
    previous[signal.SIGALRM] = signal.getsignal(signal.SIGALRM)
    try:
        yield
    except (KeyboardInterrupt, Terminated, Exception) as exc:
        if isinstance(exc, Exception) and not requested:
            raise
        stop = type(exc) if isinstance(exc, (KeyboardInterrupt, Terminated)) else requested[0]
        if stop is KeyboardInterrupt:
            err_console.print(f"[bold red]interrupted:[/] finished episodes are saved; {hint}")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        err_console.print(f"[bold red]terminated:[/] finished episodes are saved; {hint}")
        raise typer.Exit(EXIT_TERMINATED) from None
    finally:
        STOP_REQUESTED.clear()
        signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def task_names(tasks: str | None) -> list[str] | None:
    """``--tasks`` as a list of names, None when not given; an empty value is refused.

    Why: ``--tasks "$TASKS"`` with an unset shell variable would otherwise run every task (hours on libero_90).
    """
    if tasks is None:
        return None
    names = [t.strip() for t in tasks.split(",") if t.strip()]
    if not names:
        raise ConfigError(f"--tasks {tasks!r} names no task (an empty shell variable?): give task names, indices "
                          f"or ranges, or leave --tasks out to run every task")
    return names
