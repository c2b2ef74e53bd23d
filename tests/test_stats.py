import numpy as np
import pytest

from lerobench.stats.binomial import compare_paired, mcnemar_exact, paired_difference_ci


@pytest.mark.parametrize("b,c", [(0, 0), (0, 5), (3, 9), (10, 10), (1, 20), (25, 12)])
def test_mcnemar_matches_statsmodels(b, c):
    from statsmodels.stats.contingency_tables import mcnemar

    reference = mcnemar(np.array([[7, b], [c, 4]]), exact=True).pvalue
    assert mcnemar_exact(b, c) == pytest.approx(min(1.0, reference), abs=1e-12)


def test_paired_ci_covers_true_difference_about_95_percent():
    rng = np.random.default_rng(0)
    n, p_gain, p_lost = 40, 0.2, 0.05
    truth, hits, reps = p_gain - p_lost, 0, 2000
    for _ in range(reps):
        cells = rng.multinomial(n, [p_gain, p_lost, 1 - p_gain - p_lost])
        lo, hi = paired_difference_ci(int(cells[0]), int(cells[1]), n)
        hits += lo <= truth <= hi
    assert 0.93 <= hits / reps <= 0.98


def test_compare_paired_identical_and_opposite():
    same = compare_paired([True, False, True], [True, False, True])
    assert same.delta == 0 and same.p_value == 1.0 and same.ci95[0] < 0 < same.ci95[1]
    better = compare_paired([False] * 12, [True] * 12)
    assert better.delta == 1.0 and better.gained == 12 and better.p_value < 0.001 and better.ci95[1] == 1.0


# -- unpaired ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sa,na,sb,nb", [(3, 10, 9, 10), (0, 12, 5, 12), (20, 50, 28, 50), (7, 7, 2, 9)])
def test_unpaired_exact_is_scipys_boschloo(sa, na, sb, nb):
    from scipy.stats import barnard_exact, boschloo_exact, fisher_exact

    from lerobench.stats.binomial import unpaired_exact

    p, test = unpaired_exact(sa, na, sb, nb)
    table = [[sb, nb - sb], [sa, na - sa]]
    assert test == "boschloo"
    assert p == pytest.approx(boschloo_exact(table).pvalue, rel=1e-9)
    # Independent sanity: an unconditional test is never less powerful than Fisher's, and close to Barnard's.
    assert p <= fisher_exact(table).pvalue + 1e-12
    assert p == pytest.approx(barnard_exact(table).pvalue, abs=0.05)


def test_unpaired_exact_large_runs_use_fisher_and_degenerate_tables_give_1():
    from scipy.stats import fisher_exact

    from lerobench.stats.binomial import unpaired_exact

    p, test = unpaired_exact(100, 250, 130, 250)
    assert test == "fisher" and p == pytest.approx(fisher_exact([[130, 120], [100, 150]]).pvalue, rel=1e-12)
    assert unpaired_exact(0, 10, 0, 10) == (1.0, "none")
    assert unpaired_exact(10, 10, 7, 7) == (1.0, "none")


# Newcombe (1998), Statistics in Medicine 17:873-890, Table II, method 10 (the hybrid score interval).
@pytest.mark.parametrize("sa,na,sb,nb,low,high", [
    (48, 80, 56, 70, 0.0524, 0.3339), (3, 10, 9, 10, 0.1705, 0.8090),
    (2, 7, 6, 7, 0.0582, 0.8062), (0, 29, 5, 56, -0.0381, 0.1926)])
def test_unpaired_ci_matches_newcombe_table_ii_and_statsmodels(sa, na, sb, nb, low, high):
    from statsmodels.stats.proportion import confint_proportions_2indep

    from lerobench.stats.binomial import unpaired_difference_ci

    lo, hi = unpaired_difference_ci(sa, na, sb, nb)
    assert (lo, hi) == (pytest.approx(low, abs=6e-5), pytest.approx(high, abs=6e-5))
    ref = confint_proportions_2indep(sb, nb, sa, na, method="newcomb", compare="diff")
    assert (lo, hi) == (pytest.approx(ref[0], abs=1e-6), pytest.approx(ref[1], abs=1e-6))


# -- many tasks -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("p_values", [[0.01, 0.04, 0.03, 0.5], [0.2], [0.001, 0.001, 0.9, 0.04, 0.02, 0.3], []])
def test_holm_matches_statsmodels(p_values):
    from statsmodels.stats.multitest import multipletests

    from lerobench.stats.binomial import holm

    adjusted = holm(p_values)
    if p_values:
        assert adjusted == pytest.approx(list(multipletests(p_values, method="holm")[1]), abs=1e-12)
    else:
        assert adjusted == []


def test_stratified_bootstrap_is_seeded_and_agrees_with_scipy_for_one_task():
    from scipy.stats import bootstrap

    from lerobench.stats.binomial import stratified_bootstrap_ci

    rng = np.random.default_rng(1)
    a, b = rng.random(40) < 0.4, rng.random(40) < 0.7
    ci = stratified_bootstrap_ci([(a, b)], paired=True, seed=3)
    assert ci == stratified_bootstrap_ci([(a, b)], paired=True, seed=3)
    assert ci != stratified_bootstrap_ci([(a, b)], paired=True, seed=4)
    ref = bootstrap(((b.astype(float) - a.astype(float)),), np.mean, method="percentile", n_resamples=10_000,
                    random_state=0).confidence_interval
    assert ci[0] == pytest.approx(ref.low, abs=0.03) and ci[1] == pytest.approx(ref.high, abs=0.03)
    assert ci[0] < b.mean() - a.mean() < ci[1]


def test_stratified_bootstrap_keeps_each_task_count_fixed():
    from lerobench.stats.binomial import stratified_bootstrap_ci

    # A task with no variation on either side adds a constant: the interval of two such tasks is a point.
    fixed = [([False] * 10, [True] * 10), ([True] * 10, [True] * 10)]
    assert stratified_bootstrap_ci(fixed, paired=True) == [0.5, 0.5]
    assert stratified_bootstrap_ci(fixed, paired=False) == [0.5, 0.5]


@pytest.mark.slow
def test_mcnemar_power_matches_simulation():
    from lerobench.stats.binomial import mcnemar_exact, mcnemar_power

    rng = np.random.default_rng(0)
    n, p_gain, p_lost = 30, 0.25, 0.05
    cells = rng.multinomial(n, [p_gain, p_lost, 1 - p_gain - p_lost], size=4000)
    simulated = np.mean([mcnemar_exact(int(g), int(lost)) <= 0.05 for g, lost, _ in cells])
    assert mcnemar_power(n, p_gain, p_lost) == pytest.approx(simulated, abs=0.03)


def test_docs_worked_example_unpaired_not_significant_paired_significant():
    """docs/compare.md: 40 episodes, A 20 (50%), B 28 (70%); same seed: 19 both, 9 B-only, 1 A-only, 11 neither."""
    from lerobench.stats.binomial import unpaired_exact

    a = [True] * 19 + [False] * 9 + [True] * 1 + [False] * 11
    b = [True] * 19 + [True] * 9 + [False] * 1 + [False] * 11
    assert sum(a) == 20 and sum(b) == 28
    unpaired, _ = unpaired_exact(20, 40, 28, 40)
    paired = compare_paired(a, b)
    assert round(unpaired, 3) == 0.075 and unpaired > 0.05
    assert (paired.gained, paired.lost) == (9, 1) and round(paired.p_value, 3) == 0.021 and paired.p_value < 0.05


@pytest.mark.slow
def test_pooled_paired_interval_is_exact_by_enumeration_and_agrees_with_its_p_value():
    """Every table of n = 9 pairs, at a grid of gain/loss rates: coverage >= 95% (the bootstrap's is not)."""
    from scipy.stats import multinomial

    from lerobench.stats.binomial import paired_difference_exact

    n = 9
    tables = [(g, lost) for g in range(n + 1) for lost in range(n + 1 - g)]
    results = {t: paired_difference_exact(*t, n) for t in tables}
    for (ci, p) in results.values():
        assert (ci[0] > 0 or ci[1] < 0) == (p <= 0.05)  # one test: the interval leaves 0 out iff p <= alpha
    worst = 1.0
    for p_gain in np.linspace(0, 0.9, 7):
        for p_lost in np.linspace(0, 0.9, 7):
            if p_gain + p_lost > 1:
                continue
            delta = p_gain - p_lost
            covered = sum(multinomial.pmf([g, lost, n - g - lost], n, [p_gain, p_lost, 1 - p_gain - p_lost])
                          for (g, lost), (ci, _) in results.items() if ci[0] <= delta <= ci[1])
            worst = min(worst, covered)
    assert worst >= 0.95, worst
    # a stopped run's 7 B-only of 33 (every other pair alike): not narrower than exact Clopper-Pearson allows
    ci, p = paired_difference_exact(7, 0, 33)
    assert ci[0] < 0.09 and ci[1] > 0.38 and p < 0.05


@pytest.mark.parametrize("discordant", [10, 20, 30])
def test_pooled_p_value_of_one_stratum_all_one_way_is_mcnemars_exact_p_below_the_old_floor(discordant):
    """Issue 61: 30 of 30 discordant pairs printed p 0.0002, where McNemar's exact p is 1.9e-9.

    Every pair discordant and one way: the largest tail over the discordance is at discordance 1, where the
    unconditional test is McNemar's conditional one; the p-value is scipy's exact binomial p plus 2 gamma (1e-12
    below REFINE_BELOW, 1e-4 above: 10 of 10 pairs, McNemar's 0.00195).
    """
    from scipy.stats import binomtest

    from lerobench.stats.binomial import BERGER_BOOS_GAMMA, PAIRED_P_FLOOR, paired_difference_exact

    mcnemar = binomtest(discordant, discordant, 0.5).pvalue
    added = PAIRED_P_FLOOR if mcnemar < 1e-3 else 2 * BERGER_BOOS_GAMMA  # refined only below REFINE_BELOW
    for gained, lost in ((discordant, 0), (0, discordant)):
        _, p = paired_difference_exact(gained, lost, discordant)
        assert p == pytest.approx(mcnemar + added, rel=1e-9)
    if discordant == 30:
        assert p < 2 * BERGER_BOOS_GAMMA / 1e4  # far below the 2e-4 it printed


def test_pooled_p_value_keeps_its_size_below_the_old_floor_and_its_interval_agreement():
    """The refined p-value is exact: P(p <= a) <= a for every a, by enumerating every table of 30 pairs at rate(B)
    = rate(A) (a grid of discordances), and p <= alpha exactly when the interval leaves 0 out."""
    from scipy.stats import multinomial

    from lerobench.stats.binomial import PAIRED_P_FLOOR, paired_difference_exact, paired_difference_p

    n = 30
    tables = [(g, lost) for g in range(n + 1) for lost in range(n + 1 - g)]
    p = {t: paired_difference_p(*t, n) for t in tables}
    assert min(p.values()) < 1e-8 and min(p.values()) >= PAIRED_P_FLOOR
    for discordance in (0.05, 0.2, 0.5, 0.8, 1.0):
        pmf = {t: multinomial.pmf([t[0], t[1], n - sum(t)], n, [discordance / 2, discordance / 2, 1 - discordance])
               for t in tables}
        for level in (1e-8, 1e-6, 1e-4, 1e-3, 0.01, 0.05):
            size = sum(pmf[t] for t in tables if p[t] <= level)
            assert size <= level, (discordance, level, size)
    for alpha in (0.05, 1e-4):
        for table in ((12, 0), (20, 2), (7, 0), (9, 1)):
            ci, p_value = paired_difference_exact(*table, n, alpha=alpha)
            assert (ci[0] > 0 or ci[1] < 0) == (p_value <= alpha), (table, alpha, ci, p_value)
