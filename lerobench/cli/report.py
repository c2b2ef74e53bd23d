"""`lerobench report`: one HTML page for one or more runs (inline but for the videos, which it links)."""

from __future__ import annotations

from pathlib import Path

import typer

from lerobench.cli.common import app, console, fail
from lerobench.errors import LerobenchError


@app.command("report", short_help="One HTML report: charts, tables, video thumbnails (linking the MP4s).")
def report(
    runs: list[Path] = typer.Argument(..., metavar="RUN",
                                    help="Run directories (the first is the baseline for significance)."),
    output: Path = typer.Option(Path("report.html"), "--output", "-o", help="HTML file to write."),
    alpha: float = typer.Option(0.05, "--alpha", help="Significance level for the marks on the chart."),
    allow_different: bool = typer.Option(False, "--allow-different",
                                         help="Report runs of different episodes (suite, seed, step limit...) "
                                              "together; the differences are listed."),
) -> None:
    """Write one HTML report (charts, tables, errors, video thumbnails linking to the MP4s) for runs."""
    from lerobench.analysis.report import write_report

    try:
        path = write_report(runs, output, alpha=alpha, allow_different=allow_different)
    except LerobenchError as exc:
        fail(exc)
    console.print(f"Report: [bold]{path}[/]", highlight=False)
