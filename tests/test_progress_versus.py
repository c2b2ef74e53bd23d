"""The paired progress test (``--metric progress``): validity by simulation, a check that can fail, power, interval."""

from __future__ import annotations

import numpy as np
import pytest

from lerobench.stats import paired_progress as pp
from lerobench.stats.sequential import first_crossing, paired_evalues

STREAMS, PAIRS, ALPHA = 1000, 300, 0.05


@pytest.mark.parametrize("a, b", [(0.5, 0.5), (0.3, 0.8), (2.0, 2.0)])
def test_anytime_type_i_error_under_the_null(a, b):
    """A and B from the same Beta distribution: a decision is ever made over 300 pairs in <= alpha of 1,000 streams."""
    rng = np.random.default_rng(62)
    d = rng.beta(a, b, (STREAMS, PAIRS)) - rng.beta(a, b, (STREAMS, PAIRS))
    stops, _ = pp.simulate_stops(d, ALPHA)
    ever = float((stops <= PAIRS).mean())
    # Binomial noise on 1,000 streams: 0.05 + 2 standard errors would still be a pass by luck; the level must hold.
    assert ever <= ALPHA, ever


def test_the_check_can_fail_a_naive_repeated_t_test_exceeds_alpha():
    """The same check on a t-test looked at after every pair (from pair 5) rejects far more than alpha."""
    from scipy import stats

    rng = np.random.default_rng(62)
    d = rng.beta(0.5, 0.5, (STREAMS, PAIRS)) - rng.beta(0.5, 0.5, (STREAMS, PAIRS))
    n = np.arange(1, PAIRS + 1)
    mean = np.cumsum(d, axis=1) / n
    var = (np.cumsum(d * d, axis=1) - n * mean * mean) / np.maximum(n - 1, 1)
    t = mean / np.sqrt(np.maximum(var, 1e-12) / n)
    crit = stats.t.ppf(1 - ALPHA / 2, np.maximum(n - 1, 1))
    ever = float(((np.abs(t) >= crit) & (n >= 5)).any(axis=1).mean())
    assert ever > 3 * ALPHA, ever


def _correlated(rng, shift, streams=STREAMS, pairs=PAIRS):
    """Paired progress with a shared episode difficulty (same start): B's progress shifted up on the logit scale."""
    z = rng.normal(size=(streams, pairs))
    a = 1 / (1 + np.exp(-(z + rng.normal(0, 0.7, z.shape))))
    b = 1 / (1 + np.exp(-(z + shift + rng.normal(0, 0.7, z.shape))))
    return a, b


def test_fewer_pairs_than_the_binary_test_on_the_same_episodes():
    """Success = progress >= 0.8 on the same episodes: the progress test decides B better sooner and more often."""
    rng = np.random.default_rng(7)
    a, b = _correlated(rng, 0.6)
    stops, b_better = pp.simulate_stops(b - a, ALPHA)
    sa, sb = a >= 0.8, b >= 0.8
    e_b, e_a = paired_evalues(np.cumsum(sb & ~sa, axis=1), np.cumsum(sa & ~sb, axis=1))
    binary = first_crossing((e_b >= 2 / ALPHA) | (e_a >= 2 / ALPHA)) + 1
    progress_pairs = np.minimum(stops, PAIRS + 1)
    assert b_better.mean() >= 0.99
    assert np.median(progress_pairs) < 0.95 * np.median(binary)
    assert progress_pairs.mean() < binary.mean()


def test_the_interval_covers_and_excludes_zero_exactly_when_decided():
    """At the data-dependent stop the interval covers the true mean difference in >= 95% of 200 streams; at the
    decision's pair it excludes 0 in the decided direction, one pair before it holds 0."""
    big_a, big_b = _correlated(np.random.default_rng(99), 0.4, streams=200, pairs=1000)
    truth = float((big_b - big_a).mean())
    rng = np.random.default_rng(3)
    misses, decided = 0, 0
    for _ in range(200):
        a, b = _correlated(rng, 0.4, streams=1, pairs=150)
        d = list((b - a)[0])
        verdict, at = pp.decision(d)
        low, high = pp.confidence_sequence(d[:at])
        if verdict is not None:
            decided += 1
            assert (low > 0) if verdict == "B better" else (high < 0)
            before = pp.confidence_sequence(d[: at - 1])
            assert before[0] <= 0 <= before[1]
        misses += not low <= truth <= high
    assert decided >= 100
    assert misses <= 0.05 * 200, misses


def test_p_value_and_e_values_are_the_decisions():
    """p = min(1, 2 / max e) is <= alpha exactly when a direction was decided; values outside [-1, 1] refused."""
    d = [0.3, 0.5, 0.2, 0.4, 0.6, 0.1, 0.5, 0.3, 0.4, 0.2, 0.5, 0.4] * 2
    verdict, at = pp.decision(d)
    assert verdict == "B better"
    stop = pp.decision_interval(d[:at])
    assert stop["p_value"] <= ALPHA and stop["mean_difference"][0] > 0
    undecided = pp.decision_interval(d[:2])
    assert undecided["p_value"] > ALPHA and undecided["mean_difference"][0] < 0 < undecided["mean_difference"][1]
    flipped = pp.decision([-x for x in d])
    assert flipped == ("A better", at)
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        pp.decision([1.5])


def test_the_ledger_decides_on_progress_in_round_order_and_says_what_it_decided_about():
    """The rule reads pairs round by round whatever order they finish in; the block names the metric and puts
    success beside it, descriptive; a run where B is better on progress but never on success is decided."""
    from lerobench.plan.stopping import Ledger, Until, stopping_line

    tasks, cap = ["t1", "t2"], 30
    recorded = {(t, i): False for t in tasks for i in range(cap)}
    progress_a = {(t, i): 0.3 for t in tasks for i in range(cap)}
    ledger = Ledger(Until("decided"), tasks, cap, 0.05, 0.1, recorded, "runs/A", metric="progress",
                    recorded_progress=progress_a)
    for i in reversed(range(cap)):  # finish order: last first; the ledger waits for index order
        for t in tasks:
            ledger.add(t, i, False, 0.7)
    block = ledger.block()
    v = block["versus"]
    assert v["metric"] == "progress" and v["decision"] == "B better" and v["gained"] == v["lost"] == 0
    assert v["pairs"] < 2 * cap and v["decision_interval"]["mean_difference"][0] > 0
    assert v["success_descriptive"]["descriptive"] and v["success_descriptive"]["rate_b"] == 0.0
    assert "fixed_n_at_observed_rates" not in v and "difference_cs" not in v
    line = stopping_line(block)
    assert line.startswith("B better on mean progress") and "descriptive only (not what was decided)" in line
    assert not ledger.wants("t1", v["pairs"])


def test_success_metric_is_unchanged_by_default():
    """Without --metric the block has no metric field and decides on the discordant pairs, as before."""
    from lerobench.plan.stopping import Ledger, Until

    recorded = {("t", i): False for i in range(20)}
    ledger = Ledger(Until("decided"), ["t"], 20, 0.05, 0.1, recorded, "A")
    for i in range(20):
        ledger.add("t", i, True, 0.0)
    v = ledger.block()["versus"]
    assert "metric" not in v and v["decision"] == "B better" and v["gained"] == v["pairs"] < 20


@pytest.mark.sim
def test_pusht_expert_against_its_noisy_variant_on_progress_end_to_end(tmp_path, pusht_noisy_run):
    """Real gym-pusht: B = pusht-expert decides better than A = pusht-expert-noisy on mean progress within A's 40
    episodes; compare and report say what was decided about; a run A without progress is refused before B runs."""
    import json

    from typer.testing import CliRunner

    from lerobench.cli import app

    runner = CliRunner()

    def run(*args):
        return runner.invoke(app, ["eval", "--suite", "pusht", "--videos", "0", "--max-steps", "50", *map(str, args)])

    a = pusht_noisy_run  # pusht-expert-noisy, 40 episodes (conftest.py)
    versus = run("--policy", "pusht-expert", "--versus", a, "--until", "decided", "--metric", "progress",
                 "--output", tmp_path / "b")
    assert versus.exit_code == 0, versus.output
    assert "B better on mean progress" in versus.output
    v = json.loads((tmp_path / "b" / "results.json").read_text())["stopping"]["versus"]
    assert v["metric"] == "progress" and v["decision"] == "B better" and v["pairs"] < 40
    assert v["decision_interval"]["p_value"] <= 0.05 and v["decision_interval"]["mean_difference"][0] > 0
    assert v["success_descriptive"]["descriptive"] is True
    compared = runner.invoke(app, ["compare", str(a), str(tmp_path / "b"), "--json"])
    assert compared.exit_code == 0, compared.output
    c = json.loads(compared.output)
    assert c["verdict"].endswith("on mean progress (max_progress), not success")
    assert c["sequential"]["metric"] == "progress" and "not what was decided" in c["sequential"]["line"]
    report = runner.invoke(app, ["report", str(a), str(tmp_path / "b"), "-o", str(tmp_path / "r.html")])
    assert report.exit_code == 0 and "on mean progress" in (tmp_path / "r.html").read_text()
    import lerobench  # the same decision from Python, on the same pairs

    api = lerobench.evaluate(suite="pusht", policy="pusht-expert", versus=a, until="decided",
                             metric="progress", max_steps=50, videos=0, output=None)
    assert api.decision == "B better" and api.stopping["versus"]["pairs"] == v["pairs"]
    # Run A's lines without progress (recorded before its backend defined it): refused before B runs.
    import shutil

    old = shutil.copytree(a, tmp_path / "a_old")  # the shared run A stays as it is
    lines = [json.loads(x) for x in (old / "episodes.jsonl").read_text().splitlines()]
    (old / "episodes.jsonl").write_text(
        "".join(json.dumps({k: e[k] for k in e if k not in ("progress", "max_progress")}) + "\n" for e in lines))
    refused = run("--policy", "pusht-expert", "--versus", old, "--until", "decided", "--metric",
                  "progress", "--output", tmp_path / "c")
    assert refused.exit_code == 2 and "has no task progress" in refused.output, refused.output
    assert not (tmp_path / "c" / "episodes.jsonl").exists()


@pytest.mark.parametrize("args, said", [
    (("--metric", "progress"), "needs --versus"),
    (("--metric", "reward"), "--metric"),
])
def test_a_metric_without_a_paired_decision_or_unknown_is_refused(tmp_path, args, said):
    from typer.testing import CliRunner

    from lerobench.cli import app

    out = CliRunner().invoke(app, ["eval", "--suite", "pusht", "--policy", "pusht-expert", "--episodes", "2",
                                   "--output", str(tmp_path / "x"), *args])
    assert out.exit_code == 2 and said in out.output, out.output
