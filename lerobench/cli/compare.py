"""`lerobench compare`: B against A with exact paired tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from lerobench.cli.common import (
    app,
    console,
    elide_middle,
    err_console,
    fail,
    natural_width,
    print_json,
    print_widened,
    rate_text,
)
from lerobench.errors import LerobenchError


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.1f}"


def _p(value: float, floor: float | None = None) -> str:
    """A p-value; one at its test's floor (``p_value_floor``: the pooled exact test's, 2e-12) as ``≤floor (floor)``."""
    if floor is not None and value <= floor * (1 + 1e-6):
        return f"≤{floor:.0e} (floor)"
    return f"{value:.2g}" if value < 0.001 else f"{value:.3f}"


def _print_whole(table: Table) -> None:
    """Print ``table`` with every cell whole: the console widened to the table's natural width (not a TTY)."""
    print_widened(table, natural_width(table).maximum)


def task_label(task: dict[str, Any], width: int) -> str:
    """A task's row label: its suite index, then its name elided in the middle to fit ``width`` (unique)."""
    prefix = f"{task['index']}: " if task.get("index") is not None else ""
    return prefix + elide_middle(task["task"], max(12, width - len(prefix)))


def _print_comparison(c: dict[str, Any]) -> None:
    from lerobench.stats.intervals import points_interval

    a, b = c["a"], c["b"]
    kind = f"paired on {c['matched_episodes']} episodes" if c["paired"] else "UNPAIRED: no episode matches"
    console.print(f"A = {a['policy']} ({a['path']})\nB = {b['policy']} ({b['path']})", highlight=False)
    for note in c["differences"]:  # above the table: these numbers are not from the same episodes
        err_console.print(f"[bold yellow]differs:[/] {escape(note)} (--allow-different)", highlight=False)
    if c["treatment"]:
        console.print(f"compared: {escape('; '.join(c['treatment']))}", highlight=False)
    inputs = c.get("same_observations_throughout")
    if inputs and c["paired"]:
        known = inputs["identical"] + inputs["different"]
        unknown = f" ({inputs['unknown']} without digests)" if inputs["unknown"] else ""
        console.print(f"same observations throughout: {inputs['identical']} of {known} paired episodes showed the "
                      f"policy the same observations at every read{unknown} (the digest chain; --versus's pairing "
                      f"check compares the first observation only)", highlight=False)
    sequential = c.get("sequential")
    if sequential:  # the rule that stopped a run comes first: it is the analysis, the table below is descriptive
        head = (f"run B was stopped by {sequential['rule']}: " if sequential["decision"] is not None else "")
        console.print(f"[bold]{escape(head + sequential['line'])}[/]", highlight=False, soft_wrap=True)
        kind += "; DESCRIPTIVE: fixed-n figures after a sequential stop"
    table = Table(title=f"B − A, {kind}", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("task", "n", "A", "B", "B − A", "95% CI", "p", "Holm p", ""):
        table.add_column(col, justify="left" if col == "task" else "right", no_wrap=True)
    # In a terminal: names elided to what the 8 number columns leave. Piped or in CI: nothing is ever cut
    # (rich would cut every cell to 80 columns: "1.9e-…", "bett…"); the table is as wide as it needs.
    wide = not console.is_terminal
    name_width = 10_000 if wide else max(20, console.width - 62)

    def row(label: str, block: dict[str, Any], holm: str) -> list[str]:
        lo, hi = block["ci95"]
        n = str(block["n_a"]) if block["n_a"] == block["n_b"] else f"{block['n_a']}/{block['n_b']}"
        mark = ("[green]better[/]" if block["difference"] > 0 else "[red]worse[/]") if block["significant"] else ""
        return [label, n, rate_text(block["rate_a"]), rate_text(block["rate_b"]), _signed(block["difference"]),
                points_interval((lo, hi)), _p(block["p_value"], block.get("p_value_floor")), holm, mark]

    for t in c["tasks"]:
        table.add_row(*row(escape(task_label(t, name_width)), t, _p(t["p_holm"])))
    for name, g in c["groups"].items():
        table.add_row(*row(f"[italic]{name}[/]", g, ""))
    table.add_row(*row("[bold]overall[/]", c["overall"], ""))
    if wide:
        _print_whole(table)
    else:
        console.print(table)
    for trial in c.get("per_trial", [])[1:]:
        o = trial["overall"]
        lo, hi = o["ci95"]
        console.print(f"trial {trial['trial']}: A {rate_text(o['rate_a'])}, B {rate_text(o['rate_b'])}, "
                      f"B − A {_signed(o['difference'])} points (95% CI {points_interval((lo, hi), ' to ')}), "
                      f"p {_p(o['p_value'], o.get('p_value_floor'))}", highlight=False, soft_wrap=wide)
    for within in c.get("pass_at_k", [])[1:]:
        o = within["overall"]
        lo, hi = o["ci95"]
        k = within["k"]
        console.print(f"pass@{k} (success within the first {k} trials): A {rate_text(o['rate_a'])}, "
                      f"B {rate_text(o['rate_b'])}, B − A {_signed(o['difference'])} points "
                      f"(95% CI {points_interval((lo, hi), ' to ')}), p {_p(o['p_value'], o.get('p_value_floor'))}",
                      highlight=False, soft_wrap=wide)
    for note in c["notes"]:
        err_console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    console.print(f"[bold]{c['verdict']}[/], by {c['verdict_by']} (alpha {c['alpha']}; "
                  f"tasks: {c['tasks'][0]['test']}, Holm-adjusted; "
                  f"overall: {c['overall']['test']})", highlight=False, soft_wrap=wide)


@app.command("compare", short_help="Is run B better than run A? Exact paired tests (same seed).")
def compare(
    run_a: Path = typer.Argument(..., metavar="RUN_A", help="Baseline run directory (A)."),
    run_b: Path = typer.Argument(..., metavar="RUN_B", help="Candidate run directory (B); differences are B − A."),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON instead of a table."),
    alpha: float = typer.Option(0.05, "--alpha", help="Significance level (tasks: after Holm adjustment)."),
    fail_if_worse: bool = typer.Option(False, "--fail-if-worse",
                                       help="Exit 1 when B is significantly worse than A (overall or any task)."),
    allow_different: bool = typer.Option(False, "--allow-different",
                                         help="Compare runs of different episodes (suite, backend options, seed, "
                                              "step limit, simulator) anyway; the differences are printed."),
) -> None:
    """Is B better than A, or is it noise? Exact paired tests on matching episodes (same seed)."""
    from lerobench.analysis.compare import compare_runs, load_run

    try:
        comparison = compare_runs(load_run(run_a), load_run(run_b), alpha=alpha, allow_different=allow_different)
    except LerobenchError as exc:
        fail(exc)
    if as_json:
        print_json(comparison)
    else:
        _print_comparison(comparison)
    if fail_if_worse and comparison["b_worse"]:
        raise typer.Exit(1)
