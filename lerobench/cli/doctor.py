"""`lerobench doctor`: one table for a bug report; exit 1 when something a run needs is broken."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from lerobench.cli.common import app, console, err_console, print_json

STYLE = {"ok": "green", "info": "", "warn": "yellow", "missing": "dim", "fail": "bold red"}


@app.command("doctor", short_help="Check this machine: versions vs pinned, rendering, assets, golden state.")
def doctor(
    as_json: bool = typer.Option(False, "--json", help="Print the checks as JSON instead of a table."),
    fresh: bool = typer.Option(False, "--fresh", help="Rerun the golden-state checks instead of using the cache."),
) -> None:
    """Check this machine for a run: versions vs pinned, rendering, assets, golden state, cores; exit 1 if broken.

    One table (or ``--json``) to paste into a bug report: Python, lerobench and simulator versions, a real
    offscreen render, assets and the golden-state check per installed backend, usable cores and memory, and
    the auto batch size a run would pick.
    """
    from lerobench.doctor import failures, run_doctor

    rows = run_doctor(fresh=fresh)
    failed = failures(rows)
    if as_json:
        print_json({"ok": not failed, "checks": [r.to_json() for r in rows]})
    else:
        table = Table(title="lerobench doctor")
        for col in ("check", "status", "value"):
            table.add_column(col, overflow="fold")
        for r in rows:
            style = STYLE.get(r.status, "")
            table.add_row(r.name, f"[{style}]{r.status}[/]" if style else r.status, escape(r.value))
        console.print(table)
    if failed:
        first = failed[0]
        more = f" (and {len(failed) - 1} more failed check{'s' * (len(failed) > 2)})" if len(failed) > 1 else ""
        err_console.print(f"[bold red]error:[/] {escape(first.name)}: {escape(first.value)}{more}", highlight=False,
                          soft_wrap=True)
        raise typer.Exit(1)
