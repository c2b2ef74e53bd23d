"""`lerobench merge`: shard outputs back into one run."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.markup import escape

from lerobench.cli.common import EXIT_INCOMPLETE_MERGE, app, err_console, fail
from lerobench.errors import LerobenchError


@app.command("merge", short_help="Merge the outputs of `eval --shard I/N` runs into one run.")
def merge_shards(
    shard_dirs: list[Path] = typer.Argument(..., metavar="SHARD_DIR",
                                          help="Output directories of `eval --shard I/N` runs."),
    output: Path = typer.Option(..., "--output", "-o", help="New directory for the merged run."),
    allow_incomplete: bool = typer.Option(
        False, "--allow-incomplete",
        help=f"Exit 0 when episodes are missing (default: exit {EXIT_INCOMPLETE_MERGE}, results still written)."),
) -> None:
    """Merge shard outputs into one run (episodes.jsonl, results.json, videos); see docs/sharding.md."""
    from lerobench.analysis.merge import merge

    try:
        results = merge(output, shard_dirs, command=tuple(sys.argv))
    except LerobenchError as exc:
        fail(exc)
    for note in results["merge_notes"]:
        err_console.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
    from lerobench.cli.summary import print_summary  # not at import: `lerobench list` needs none of it

    print_summary(results, output, merged_from=len(results["shards"]))
    if not results["complete"]:
        shown = ", ".join(f"{m['task']}#{m['episode']}" for m in results["missing"][:10])
        more = f" and {len(results['missing']) - 10} more" if len(results["missing"]) > 10 else ""
        err_console.print(f"[yellow]incomplete: {len(results['missing'])} episodes missing ({shown}{more}); "
                          f"results.json lists them under 'missing'[/]", highlight=False, soft_wrap=True)
        if not allow_incomplete:  # a job that merges shards must not pass with a shard lost
            raise typer.Exit(EXIT_INCOMPLETE_MERGE)
