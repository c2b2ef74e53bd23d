"""`lerobench plan`: episodes a paired A/B comparison needs: fixed-n, designed and anytime-valid (``eval --versus``)."""

from __future__ import annotations

from typing import Any

import typer

from lerobench.cli.common import app, console, fail, print_json
from lerobench.errors import ConfigError


def _n(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def designed_line(d: dict[str, Any]) -> str:
    """The designed test (``--until decided --effect``) in one line: its exact operating characteristics."""
    if d.get("reason"):
        return f"designed (eval --versus A --until decided --effect {d['effect']:g}): none, {d['reason']}"
    twice = d.get("expected_pairs_2effect")
    return (f"designed (eval --versus A --until decided --effect {d['effect']:g}): expected [bold]"
            f"{_n(d['expected_pairs_effect'])}[/] pairs at the effect, {_n(d['expected_pairs_h0'])} with no "
            f"difference" + (f", {_n(twice)} at twice the effect" if twice is not None else "")
            + f"; at most {_n(d['max_pairs'])}; exact: type-I {d['type_i']:.4f} ({d['decides']}, one side; "
            f"the other at alpha/2 by the e-process), power {100 * d['power']:.1f}% (discordance "
            f"{100 * d['discordance']:.1f}% under both)")


def progress_designed_line(d: dict[str, Any]) -> str:
    """The designed progress test (``--metric progress --effect``) in one line: its simulated figures, its bound."""
    command = f"eval --versus A --until decided --metric progress --effect {d['effect']:g}"
    if d.get("reason"):
        return f"designed on progress ({command}): none, {d['reason']}"
    twice = d.get("expected_pairs_2effect")
    return (f"designed on progress ({command}): expected [bold]{_n(d['expected_pairs_effect'])}[/] pairs at the "
            f"effect, {_n(d['expected_pairs_h0'])} with no difference"
            + (f", {_n(twice)} at twice the effect" if twice is not None else "")
            + f"; at most {_n(d['max_pairs'])}; power {100 * d['power']:.1f}% and type-I "
            f"{d['type_i_simulated']:.4f} simulated ({d['simulations']:,} runs of its planning model: B = A's "
            f"progress lifted by the effect, independent given the episode); type-I <= {d['type_i_bound']:g} "
            f"({d['decides']}, one side) for any distribution (Ville)")


@app.command("plan", short_help="Episodes a paired A/B comparison needs: fixed-n and sequential.")
def plan(
    base: float = typer.Option(..., "--base", help="Success rate of A (the baseline), e.g. 0.8."),
    diff: float = typer.Option(..., "--diff", help="Difference to detect: rate(B) - rate(A), e.g. 0.05."),
    discordance: float | None = typer.Option(
        None, "--discordance", help="Share of pairs where A and B disagree (default: A and B independent given "
                                    "the episode, the most discordant case for positively correlated policies)."),
    alpha: float = typer.Option(0.05, "--alpha", help="Two-sided error level."),
    power: float = typer.Option(0.8, "--power", help="Power of the fixed-n test (and of the capped sequential one)."),
    sims: int = typer.Option(2000, "--sims", min=100, help="Simulated runs for the sequential figures."),
    progress_base: float | None = typer.Option(
        None, "--progress-base", help="Mean progress of A (with --progress-diff: also the designed test on "
                                      "progress, --metric progress --effect)."),
    progress_diff: float | None = typer.Option(
        None, "--progress-diff", help="Mean progress difference to detect, B - A (the --effect of --metric progress)."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
) -> None:
    """Pairs (task, episode) needed to detect --diff over --base: exact McNemar at fixed n, and --until decided."""
    from lerobench.stats.planning import plan_comparison

    try:
        if not (0 < alpha < 1 and 0 < power < 1):
            raise ConfigError(f"--alpha and --power must lie in (0, 1), got {alpha:g} and {power:g}")
        if not (0 <= base <= 1 and 0 <= base + diff <= 1):
            raise ConfigError(f"--diff {diff:g} over --base {base:g} gives rate(B) = {base + diff:g}: impossible "
                              f"(both rates must lie in [0, 1])")
        if (progress_base is None) != (progress_diff is None):
            raise ConfigError("--progress-base and --progress-diff go together")
        if progress_diff == 0:
            raise ConfigError("--progress-diff must be non-zero: there is no difference to detect")
        result = plan_comparison(base, diff, discordance, alpha, power, sims, progress_base=progress_base,
                                 progress_diff=progress_diff)
    except ValueError as exc:
        fail(ConfigError(str(exc)))
    except ConfigError as exc:
        fail(exc)
    if as_json:
        print_json(result)
        return
    seq = result["sequential"]
    console.print(f"A at {100 * base:.1f}%, B at {100 * (base + diff):.1f}%; {result['assumption']}: B-only "
                  f"{100 * result['p_gain']:.1f}% and A-only {100 * result['p_lost']:.1f}% of pairs.",
                  highlight=False, soft_wrap=True)
    console.print(f"fixed n, exact McNemar, {100 * power:g}% power at alpha {alpha:g}: "
                  f"[bold]{_n(result['fixed_n'])}[/] pairs", highlight=False)
    console.print(f"sequential (eval --versus A --until decided): expected [bold]{_n(seq['mean'])}[/] pairs, 90th "
                  f"percentile {_n(seq['p90'])}; capped at {_n(seq['cap_at_power'])} pairs for the same "
                  f"{100 * power:g}% power: expected {_n(seq['mean_capped'])} "
                  f"({seq['simulations']:,} simulated runs, {100 * seq['undecided']:.1f}% undecided)",
                  highlight=False, soft_wrap=True)
    console.print(designed_line(result["designed"]), highlight=False, soft_wrap=True)
    if "progress" in result and progress_base is not None and progress_diff is not None:
        p = result["progress"]
        console.print(f"on progress: A's mean progress {progress_base:g}, B's {progress_base + progress_diff:g} "
                      f"({p['run_a_model']} before run A exists; eval plans on run A's own values)",
                      highlight=False, soft_wrap=True)
        console.print(progress_designed_line(p), highlight=False, soft_wrap=True)
    console.print("pairs are (task, episode) pairs over the whole comparison: divide by the number of tasks for "
                  "--episodes per task", highlight=False, soft_wrap=True)
