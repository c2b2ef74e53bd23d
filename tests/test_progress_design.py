"""The designed progress test (``--metric progress --effect``): validity, power and interval by simulation."""

from __future__ import annotations

import numpy as np
import pytest

from lerobench.stats import progress_design as pd

ALPHA = 0.05


def _null(kind: str, rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """Differences with mean exactly 0: symmetric spread, skewed two-point, and two independent Beta draws."""
    if kind == "beta":
        return rng.beta(0.5, 0.5, shape) - rng.beta(0.5, 0.5, shape)
    if kind == "skewed":  # +0.9 w.p. 0.1, -0.1 w.p. 0.9: rare large gains, the hard case for a bettor
        return np.where(rng.random(shape) < 0.1, 0.9, -0.1)
    return rng.choice([-0.5, 0.0, 0.5], shape, p=[0.25, 0.5, 0.25])


@pytest.mark.parametrize("effect", [0.1, -0.2])
def test_type_i_error_under_the_null_for_any_distribution(effect):
    """Either direction decided with probability <= alpha (the designed side <= alpha/2), consulted after every
    pair up to the cap, 3,000 streams per null distribution; a bettor that sees the pair it bets on fails."""
    rng = np.random.default_rng(1)
    design = pd.ProgressDesign(effect, 4.0, 0.15, 0.2, 400, ALPHA)
    for kind in ("beta", "skewed", "three"):
        _, code = pd.stops(_null(kind, rng, (3000, 400)), design)
        se = np.sqrt(0.025 * 0.975 / 3000)
        assert np.mean(code == 1) <= ALPHA / 2 + 3 * se, kind
        assert np.mean(np.abs(code) == 1) <= ALPHA + 3 * se, kind
    # The check can fail: bets that peek at the current pair (lam = 3/4 when it went the planned way).
    d = _null("beta", rng, (3000, 400))
    y = np.sign(effect) * d
    peeking = np.cumsum(np.log1p(0.75 * np.clip(y, 0, None)), axis=1)
    assert np.mean((peeking >= np.log(2 / ALPHA)).any(axis=1)) > 3 * ALPHA


def test_power_at_the_design_effect_and_fewer_pairs_with_no_difference():
    """A planned design reaches its power on fresh streams of its planning model and stops sooner with no
    difference (futility) than at its cap."""
    a = pd.beta_values(0.5, seed=3)
    design, summary = pd.design_progress_test(a, 0.2, ALPHA, 0.8, sims=500)
    assert design is not None and summary["power"] >= 0.8 - 0.02
    pairs, code = pd.stops(pd.planning_differences(a, 0.2, 4000, design.max_pairs, seed=99), design)
    assert np.mean(code == 1) >= 0.8 - 3 * np.sqrt(0.16 / 4000)
    pairs0, code0 = pd.stops(pd.planning_differences(a, 0.0, 4000, design.max_pairs, seed=98), design)
    assert np.mean(np.abs(code0) == 1) <= ALPHA and pairs0.mean() < 0.7 * design.max_pairs
    assert summary["expected_pairs_h0"] < design.max_pairs and summary["first_bet"] > 0


def test_the_interval_covers_and_excludes_zero_exactly_when_decided():
    """The designed rule's own interval at its stop: covers the true mean difference in >= 95% of runs and
    excludes 0 exactly when a direction was decided, on the decided side."""
    rng = np.random.default_rng(5)
    design = pd.ProgressDesign(0.15, 4.0, 0.12, 0.2, 150, ALPHA)
    covered = 0
    runs = 120
    for i in range(runs):
        true = (0.0, 0.1, 0.3)[i % 3]
        d = true + rng.uniform(-0.6, 0.6, 150)  # inside [-1, 1], mean exactly ``true``
        stop = int(pd.stops(d[None, :], design)[0][0])
        verdict = pd.decide(d[:stop], design)
        low, high = pd.decision_interval(d[:stop], design)["mean_difference"]
        covered += low <= true <= high
        if verdict == "B better":
            assert low > 0
        elif verdict == "A better":
            assert high < 0
        else:
            assert low <= 0 <= high
    assert covered / runs >= 0.95


def test_the_ledger_runs_the_design_and_names_what_it_decided_about():
    """A designed progress rule in the ledger: decides in round order, its block carries the design, and the
    line says mean progress, the design's figures and success beside it, descriptive."""
    from lerobench.plan.stopping import Ledger, Until, stopping_line

    tasks, cap = ["t1", "t2"], 40
    recorded = {(t, i): False for t in tasks for i in range(cap)}
    progress_a = {(t, i): 0.3 + 0.1 * (i % 3) for t in tasks for i in range(cap)}
    design, summary = pd.design_progress_test(list(progress_a.values()), 0.3, ALPHA, 0.8, cap * 2, sims=300)
    assert design is not None
    ledger = Ledger(Until("decided"), tasks, cap, ALPHA, 0.1, recorded, "runs/A", design, summary,
                    metric="progress", recorded_progress=progress_a)
    for i in reversed(range(cap)):
        for t in tasks:
            ledger.add(t, i, i % 2 == 0, 0.8)
    block = ledger.block()
    v = block["versus"]
    assert v["decision"] == "B better" and v["pairs"] < 2 * cap and v["design"]["effect"] == 0.3
    assert v["decision_interval"]["mean_difference"][0] > 0 and v["decision_interval"]["p_value"] <= ALPHA
    assert v["success_descriptive"]["descriptive"] and "designed" in block["method"]
    line = stopping_line(block)
    assert line.startswith("B better on mean progress") and "designed test for a mean progress difference" in line
    assert "descriptive only (not what was decided)" in line


def test_futility_is_named_on_mean_progress():
    """No difference: the design stops for futility and says it is about mean progress (compare's words too)."""
    design = pd.ProgressDesign(0.2, 4.0, 0.1, 0.2, 300, ALPHA)
    d = np.random.default_rng(2).normal(0, 0.2, 300).clip(-1, 1)
    stop = int(pd.stops(d[None, :], design)[0][0])
    assert pd.decide(d[:stop - 1], design) is None and stop < 300
    assert pd.decide(d[:stop], design) == "B not better by 0.2"


def test_plan_prints_both_metrics():
    """``lerobench plan`` with --progress-base/--progress-diff prints the success design and the progress one."""
    from typer.testing import CliRunner

    from lerobench.cli import app

    out = CliRunner().invoke(app, ["plan", "--base", "0.5", "--diff", "0.3", "--progress-base", "0.5",
                                   "--progress-diff", "0.3", "--sims", "200"])
    assert out.exit_code == 0, out.output
    assert "designed (eval --versus A --until decided --effect 0.3)" in out.output
    assert "designed on progress (eval --versus A --until decided --metric progress --effect 0.3)" in out.output
    import lerobench
    from lerobench.errors import ConfigError

    with pytest.raises(ConfigError, match="go together"):
        lerobench.plan_comparison(0.5, 0.3, progress_base=0.5)
    refused = CliRunner().invoke(app, ["plan", "--base", "0.5", "--diff", "0.3", "--progress-diff", "0.3"])
    assert refused.exit_code == 2 and "go together" in refused.output


@pytest.mark.sim
def test_pusht_designed_progress_decision_end_to_end(tmp_path, pusht_noisy_run):
    """Real gym-pusht at 50 steps: B = pusht-expert against A = pusht-expert-noisy with --metric progress --effect
    0.25 prints its design before B runs and decides B better on mean progress within the design's cap; compare
    and report name what was decided about and put success beside it, descriptive."""
    import json

    from typer.testing import CliRunner

    from lerobench.cli import app

    runner = CliRunner()

    def run(*args):
        return runner.invoke(app, ["eval", "--suite", "pusht", "--videos", "0", "--max-steps", "50", *map(str, args)])

    a = pusht_noisy_run  # pusht-expert-noisy, 40 episodes (conftest.py)
    versus = run("--policy", "pusht-expert", "--versus", a, "--until", "decided", "--metric", "progress",
                 "--effect", "0.25", "--output", tmp_path / "b")
    assert versus.exit_code == 0, versus.output
    assert "designed on progress (eval --versus A --until decided --metric progress --effect 0.25)" in versus.output
    assert "B better on mean progress" in versus.output
    stopping = json.loads((tmp_path / "b" / "results.json").read_text())["stopping"]
    v = stopping["versus"]
    assert v["decision"] == "B better" and v["pairs"] <= v["design"]["max_pairs"] <= 40
    assert v["design"]["metric"] == "progress" and "designed" in stopping["method"]
    assert v["decision_interval"]["mean_difference"][0] > 0 and v["success_descriptive"]["descriptive"]
    compared = runner.invoke(app, ["compare", str(a), str(tmp_path / "b")])
    assert compared.exit_code == 0, compared.output
    text = " ".join(compared.output.split())
    assert "B better on mean progress" in text and "designed test for a mean progress difference" in text
    assert "Success, descriptive only (not what was decided)" in text
    as_json = json.loads(runner.invoke(app, ["compare", str(a), str(tmp_path / "b"), "--json"]).output)
    assert as_json["verdict"] == "B better than A on mean progress (max_progress), not success"
    report = runner.invoke(app, ["report", str(a), str(tmp_path / "b"), "-o", str(tmp_path / "r.html")])
    html = (tmp_path / "r.html").read_text()
    assert report.exit_code == 0 and "on mean progress" in html and "descriptive only (not what was decided)" in html
    import lerobench  # the same decision from Python, on the same pairs (the plan is seeded: the same design)

    api = lerobench.evaluate(suite="pusht", policy="pusht-expert", versus=a, until="decided",
                             metric="progress", effect=0.25, max_steps=50, videos=0, output=None)
    assert api.decision == "B better" and api.stopping["versus"]["pairs"] == v["pairs"]
    assert api.stopping["versus"]["design"]["max_pairs"] == v["design"]["max_pairs"]
    refused = run("--policy", "pusht-expert", "--versus", a, "--until", "decided", "--metric", "progress",
                  "--effect", "0.5", "--output", tmp_path / "c")
    assert refused.exit_code == 2 and "is impossible" in refused.output, refused.output
    assert not (tmp_path / "c" / "episodes.jsonl").exists()
