"""Validity of the anytime-valid statistics, shown by simulation and exact enumeration (issue 22, 6a-6d).

Vectorised: the whole file runs in a few seconds. benchmarks/sequential.py prints the full tables.
"""

import math

import numpy as np
import pytest

from lerobench.stats.binomial import clopper_pearson, stratified_exact
from lerobench.stats.sequential import (
    beta_binomial_cs,
    paired_decision,
    paired_difference_cs,
    paired_evalues,
    subgaussian_cs,
)
from lerobench.stats.validity import (
    cs_coverage,
    cs_table,
    exact_coverage,
    h0_rejection_rate,
    order_coverage,
)


@pytest.fixture(scope="module")
def table():
    return cs_table(500)


@pytest.mark.slow
@pytest.mark.parametrize("p", [0.02, 0.5, 0.95, 0.99])
def test_confidence_sequence_covers_at_every_n_up_to_500(table, p):
    """(a) 2,000 streams, checked after every episode: covered at all n <= 500 in >= 95% of them."""
    assert cs_coverage(p, streams=2000, max_n=500, table=table) >= 0.95


@pytest.mark.slow
@pytest.mark.parametrize("discordance", [0.05, 0.2, 0.5])
def test_paired_test_under_h0_rejects_at_most_alpha_with_continuous_monitoring(discordance):
    """(b) 2,000 streams of 1,000 pairs under H0, the test consulted after every pair."""
    assert h0_rejection_rate(discordance, streams=2000, max_pairs=1000) <= 0.05


def test_completion_order_loses_coverage_and_index_order_keeps_it(table):
    """(c) successes finish sooner: updating as episodes complete is biased; in episode-index order it is not."""
    four = order_coverage(4, streams=2000, max_n=200, table=table)
    sixteen = order_coverage(16, streams=2000, max_n=200, table=table)
    assert four["index"] >= 0.95 and sixteen["index"] >= 0.95
    assert four["completion"] < 0.9 and sixteen["completion"] < 0.2


@pytest.mark.parametrize("n", [10, 20, 50])
def test_clopper_pearson_never_covers_below_nominal_by_exact_enumeration(n):
    """(d) exact coverage on a grid of rates, including where robot policies live."""
    grid = [0.01, 0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 0.92, 0.95, 0.98, 0.99]
    assert min(exact_coverage("clopper-pearson", n, p) for p in grid) >= 0.95
    if n == 50:  # the reason for the change: Wilson under-covers there (reference figures)
        assert [round(exact_coverage("wilson", 50, p), 3) for p in (0.92, 0.98, 0.99)] == [0.941, 0.922, 0.911]


def test_clopper_pearson_matches_statsmodels_beta_interval():
    from statsmodels.stats.proportion import proportion_confint

    for k, n in [(0, 10), (3, 10), (49, 50), (50, 50), (17, 40)]:
        assert clopper_pearson(k, n) == pytest.approx(proportion_confint(k, n, method="beta"), abs=1e-9)


@pytest.mark.slow
def test_clopper_pearson_is_scipys_beta_quantile_bit_for_bit_and_binomtests_interval():
    from scipy.stats import beta, binomtest

    for n in (*range(1, 31), 50, 100):
        for k in range(n + 1):
            low, high = clopper_pearson(k, n)
            assert low == (0.0 if k == 0 else float(beta.ppf(0.025, k, n - k + 1)))
            assert high == (1.0 if k == n else float(beta.ppf(0.975, k + 1, n - k)))
            ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
            assert (low, high) == pytest.approx((ci.low, ci.high), abs=1e-12)


def test_stratified_interval_is_the_exact_one_for_one_task_and_never_narrower_than_pooled():
    assert stratified_exact([(45, 50)]) == pytest.approx(clopper_pearson(45, 50), abs=1e-9)
    assert stratified_exact([(50, 50), (40, 50)]) == pytest.approx(clopper_pearson(90, 100), abs=1e-9)
    low, high = stratified_exact([(0, 50), (50, 50)])
    assert low <= 0.5 <= high


def test_beta_binomial_bounds_sit_on_the_mixture_boundary():
    from scipy.special import betaln

    s, n = 17, 40
    low, high = beta_binomial_cs(s, n)
    for p in (low, high):
        log_m = betaln(0.5 + s, 0.5 + n - s) - betaln(0.5, 0.5) - s * math.log(p) - (n - s) * math.log(1 - p)
        assert log_m == pytest.approx(math.log(20), abs=1e-6)
    assert beta_binomial_cs(0, 0) == (0.0, 1.0)
    assert beta_binomial_cs(30, 30)[1] == 1.0 and beta_binomial_cs(0, 30)[0] == 0.0


def test_paired_evalues_are_the_half_mixtures_by_numerical_integration():
    from scipy.integrate import quad

    w, lost = 9, 3
    ratio = lambda t: (t / 0.5) ** w * ((1 - t) / 0.5) ** lost  # noqa: E731 - uniform prior on each half
    e_b, e_a = paired_evalues(w, lost)
    assert e_b == pytest.approx(2 * quad(ratio, 0.5, 1)[0], rel=1e-8)
    assert e_a == pytest.approx(2 * quad(ratio, 0, 0.5)[0], rel=1e-8)
    assert paired_decision(8, 0) == "B better" and paired_decision(0, 8) == "A better"
    assert paired_decision(7, 0) is None and paired_decision(30, 30) is None


@pytest.mark.slow
def test_difference_and_suite_sequences_cover_by_simulation():
    rng = np.random.default_rng(1)
    streams, n = 1000, 300
    gain = rng.random((streams, n)) < 0.15
    loss = ~gain & (rng.random((streams, n)) < 0.05 / 0.85)
    steps = np.arange(1, n + 1)
    low, high = paired_difference_cs(np.cumsum(gain, 1), np.cumsum(loss, 1), steps)
    assert ((low <= 0.1) & (0.1 <= high)).all(axis=1).mean() >= 0.95
    # Tasks with different rates interleaved round by round: the suite sequence covers their mean.
    rates = np.tile([0.99, 0.5, 0.1, 0.9], n // 4)
    outcomes = rng.random((streams, n)) < rates
    low, high = subgaussian_cs(np.cumsum(outcomes, 1), steps)
    rounds = slice(3, None, 4)  # after each complete round the running average of the rates is the suite mean
    mean = rates.mean()
    assert ((low[:, rounds] <= mean) & (mean <= high[:, rounds])).all(axis=1).mean() >= 0.95


@pytest.mark.slow
def test_plan_prints_fixed_n_from_exact_power_and_sequential_figures():
    from typer.testing import CliRunner

    from lerobench.cli import app
    from lerobench.stats.binomial import mcnemar_power
    from lerobench.stats.validity import fixed_n_for_power, paired_rates

    p_gain, p_lost = paired_rates(0.7, 0.2)
    assert (p_gain, p_lost) == pytest.approx((0.27, 0.07))
    n = fixed_n_for_power(p_gain, p_lost)
    assert mcnemar_power(n, p_gain, p_lost) >= 0.8 > mcnemar_power(n - 1, p_gain, p_lost)
    result = CliRunner().invoke(app, ["plan", "--base", "0.7", "--diff", "0.2", "--sims", "300", "--json"])
    assert result.exit_code == 0, result.output
    data = __import__("json").loads(result.output)
    assert data["fixed_n"] == n and data["sequential"]["undecided"] < 0.01
    assert 0.5 * n < data["sequential"]["mean"] < 2 * n and data["sequential"]["b_better"] > 0.99
    bad = CliRunner().invoke(app, ["plan", "--base", "0.9", "--diff", "0.2"])
    assert bad.exit_code != 0 and "rates must lie in [0, 1]" in bad.output
