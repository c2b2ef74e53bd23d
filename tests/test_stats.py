import numpy as np
import pytest

from lerobench.stats import compare_paired, mcnemar_exact, paired_difference_ci


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
