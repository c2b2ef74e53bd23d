"""The designed test's own interval (issue 44): exact coverage over its sample space, and one answer with the decision.

Every number here is an exact sum over the discordant walk (``stats/stagewise.py``), not a simulation: for each
outcome the run can end in, its interval; coverage at a true theta is the chance of the outcomes whose interval
holds it. Designs: two planned ones (positive and negative effect) and a hand-built wide table on which the
other direction's e-process and the caps are reachable (the planned designs accept before either can happen).
"""

from __future__ import annotations

import numpy as np
import pytest

from lerobench.stats.design import ACCEPT, B_BETTER, CONTINUE
from lerobench.stats.planning import plan_design
from lerobench.stats.sequential import _log_one_sided, paired_decision, paired_evalues, paired_theta_cs
from lerobench.stats.stagewise import (
    coverage,
    decision_interval,
    from_rows,
    outcome_space,
    rows,
    run_table,
    tails,
    theta_intervals,
)

ALPHA = 0.05


@pytest.fixture(scope="module")
def planned():
    return {key: plan_design(*key) for key in ((0.5, 0.2), (0.7, -0.15))}


def wide_table(M: int = 40):
    """Continue until the e-process decides B better, accept at M below it: both directions and caps reachable."""
    m, b = np.meshgrid(np.arange(M + 1), np.arange(M + 1), indexing="ij")
    e_b, _ = paired_evalues(b, np.maximum(m - b, 0))
    actions = np.full((M + 1, M + 1), CONTINUE, dtype=np.int8)
    actions[e_b >= 2 / ALPHA] = B_BETTER
    actions[M][actions[M] == CONTINUE] = ACCEPT
    return actions


def check_design(actions, thetas, caps):
    table = run_table(actions, ALPHA)
    for cap in caps:
        outcomes, _ = outcome_space(table, cap)
        intervals = theta_intervals(table, outcomes, ALPHA)
        for outcome, (low, high) in zip(outcomes, intervals, strict=True):
            # excludes 1/2 exactly when the run decided, and on the decided side
            assert (low > 0.5) == (outcome.kind == "better"), (cap, outcome, low, high)
            assert (high < 0.5) == (outcome.kind == "worse"), (cap, outcome, low, high)
        covered = coverage(table, thetas, ALPHA, cap)
        assert min(covered) >= 1 - ALPHA, (cap, dict(zip(thetas, covered, strict=True)))
    return table


@pytest.mark.slow
def test_planned_designs_cover_at_every_effect_and_agree_with_their_decision(planned):
    for design, summary in planned.values():
        theta1 = summary["theta1"]
        check_design(design.actions, [0.5, theta1, 1 - theta1, 0.5 + (theta1 - 0.5) / 2, 0.95, 0.05],
                     caps=[None, design.max_discordant // 3])


@pytest.mark.slow
def test_a_wide_table_with_both_directions_and_caps_covers_and_agrees():
    table = check_design(wide_table(), [0.5, 0.3, 0.65, 0.8, 0.98], caps=[None, 12, 25])
    outcomes, _ = outcome_space(table, 25)
    assert {o.kind for o in outcomes} == {"better", "worse", "undecided"}
    assert {o.kind for o in outcome_space(table)[0]} >= {"better", "worse", "accept"}


def test_tails_are_monotone_in_theta_so_each_end_is_one_crossing():
    table = run_table(wide_table(30), ALPHA)
    outcomes, _ = outcome_space(table, 20)
    grid = np.linspace(0.001, 0.999, 200)
    for outcome in outcomes:
        ge, le, _ = tails(table, grid, [outcome] * len(grid))
        assert np.all(np.diff(ge) >= -1e-12) and np.all(np.diff(le) <= 1e-12), outcome


def test_the_table_travels_through_results_json(planned):
    design, summary = planned[(0.5, 0.2)]
    assert np.array_equal(np.tril(from_rows(summary["table"])), np.tril(design.actions))  # b <= m: the walk's cells
    assert rows(from_rows(summary["table"])) == summary["table"]


def test_decision_interval_in_b_terms_for_a_negative_effect(planned):
    design, summary = planned[(0.7, -0.15)]
    table = run_table(design.actions, ALPHA)
    better = next(o for o in outcome_space(table)[0] if o.kind == "better")  # "A better" for a negative effect
    got = decision_interval(design.actions, ALPHA, gained=better.discordant - better.ahead, lost=better.ahead,
                            pairs=3 * better.discordant, positive=False)
    assert got["outcome"] == "better" and got["theta_b"][1] < 0.5 and got["p_value"] <= ALPHA
    assert got["difference_at_observed_discordance"][1] < 0


@pytest.mark.slow
def test_the_eprocess_interval_excludes_one_half_exactly_when_it_decides():
    for gained in range(41):
        for lost in range(41 - gained):
            low, high = paired_theta_cs(gained, lost, ALPHA)
            decided = paired_decision(gained, lost, ALPHA)
            assert (low > 0.5) == (decided == "B better") and (high < 0.5) == (decided == "A better"), \
                (gained, lost, low, high)


@pytest.mark.slow
@pytest.mark.parametrize("theta", [0.5, 0.7, 0.95])
def test_the_eprocess_interval_covers_at_every_stop(theta):
    """Simulated: the chance that the sequence *ever* leaves out the true theta over 300 discordant pairs."""
    rng = np.random.default_rng(7)
    wins = np.cumsum(rng.random((3000, 300)) < theta, axis=1)
    steps = np.arange(1, 301)
    threshold = np.log(2 / ALPHA)
    out = ((_log_one_sided(wins, steps - wins, theta, 1.0, True) >= threshold)
           | (_log_one_sided(wins, steps - wins, theta, 1.0, False) >= threshold))
    ever = out.any(axis=1).mean()
    assert ever <= ALPHA + 3 * np.sqrt(ALPHA * (1 - ALPHA) / 3000), ever
