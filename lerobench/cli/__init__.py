"""The ``lerobench`` command: one module per subcommand, all registered on one typer app (``cli/common.py``)."""

import importlib

from lerobench.cli.common import (
    EXIT_INCOMPLETE_MERGE,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    EXIT_TOO_MANY_ERRORS,
    app,
)

COMMAND_MODULES = ("browse", "evaluate", "check_policy", "check_resets", "merge", "serve", "compare", "report",
                   "robustness", "plan", "doctor")
"""Imported in this order to register their commands: ``--help`` lists them so."""

for _name in COMMAND_MODULES:
    importlib.import_module(f"lerobench.cli.{_name}")

__all__ = ["EXIT_INCOMPLETE_MERGE", "EXIT_INTERRUPTED", "EXIT_TERMINATED", "EXIT_TOO_MANY_ERRORS", "app", "main"]


def main() -> None:
    """Console-script entry point: the command's own process, so it may ask MKL for its strict mode first."""
    from lerobench.streams import tolerate_gone_readers
    from lerobench.system import bounded_malloc_arenas, strict_mkl_default

    tolerate_gone_readers()  # `lerobench eval ... | head` still finishes the run (lerobench/streams.py)

    strict_mkl_default()  # before any MKL call: a CPU call's threads may then follow the cores (policies/kernels.py)
    bounded_malloc_arenas()  # before any thread: threads share what they free (system.py)
    app()  # usage errors and the bare command: OneLineErrorsGroup
