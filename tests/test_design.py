"""The designed sequential test (``--effect``): exact operating characteristics, checked by simulation.

Each cell's design is searched once (a second or two for these cells); the 10,000 simulated paired
experiments per cell are vectorised. The docs table's claims (<= 70% of fixed-n at the effect, <= 50% with no
difference, max <= 1.5x fixed-n) are checked on every cell in the slow test (the largest cell takes ~20 s).
"""

import math

import numpy as np
import pytest

from lerobench.stats.design import operating
from lerobench.stats.planning import plan_design

SIMULATED = 10_000


def cell_rates(base: float, delta: float) -> tuple[float, float]:
    """(base, effect) of a docs-table cell: B = base + delta, or base - delta where that would reach 1."""
    return base, delta if base + delta < 1 else -delta


def simulate(design, summary, p_gain: float, p_lost: float, seed: int) -> dict[str, float]:
    """10,000 paired experiments run pair by pair through ``design.decide`` up to its max pairs."""
    rng = np.random.default_rng(seed)
    u = rng.random((SIMULATED, design.max_pairs))
    gained, lost = np.cumsum(u < p_gain, axis=1), np.cumsum((u >= p_gain) & (u < p_gain + p_lost), axis=1)
    ahead, behind = (gained, lost) if summary["effect"] > 0 else (lost, gained)
    m = np.minimum(ahead + behind, design.max_discordant)
    acts = design.actions[m, np.minimum(ahead, m)]
    stopped = acts != 0
    first = np.where(stopped.any(axis=1), stopped.argmax(axis=1), design.max_pairs - 1)
    rows = np.arange(SIMULATED)
    better = stopped[rows, first] & (acts[rows, first] == 1)
    return {"better": float(better.mean()), "pairs": float((first + 1).mean()),
            "pairs_se": float((first + 1).std() / math.sqrt(SIMULATED))}


@pytest.mark.slow
@pytest.mark.parametrize(("base", "delta", "seed"), [(0.8, 0.10, 1), (0.95, 0.20, 2), (0.5, 0.20, 3)])
def test_exact_operating_characteristics_agree_with_10000_simulated_experiments(base, delta, seed):
    base, effect = cell_rates(base, delta)
    design, summary = plan_design(base, effect)
    r = summary["discordance"]
    assert summary["type_i"] <= 0.025 and summary["power"] >= 0.8  # alpha/2 on the design's side
    up = (r + abs(effect)) / 2
    for theta, p_gain, p_lost in ((0.5, r / 2, r / 2), (summary["theta1"], up, r - up)):
        if effect < 0:
            p_gain, p_lost = p_lost, p_gain
        exact = operating(design, theta, r)
        sim = simulate(design, summary, p_gain, p_lost, seed)
        se = math.sqrt(max(exact["b_better"] * (1 - exact["b_better"]), 1e-4) / SIMULATED)
        assert abs(sim["better"] - exact["b_better"]) <= 4 * se, (theta, sim, exact)
        assert abs(sim["pairs"] - exact["expected_pairs"]) <= 4 * sim["pairs_se"] + 1e-9, (theta, sim, exact)


@pytest.mark.slow
def test_type_one_error_holds_at_any_discordance_and_the_cap_is_never_exceeded():
    design, summary = plan_design(0.8, 0.10)
    for r in (0.05, 0.26, 0.6):  # the design's type-I is a bound whatever the discordance
        assert operating(design, 0.5, r)["b_better"] <= summary["type_i"] + 1e-12
    sim = simulate(design, summary, 0.02, 0.02, 4)  # few discordant pairs: the pair cap binds
    assert sim["pairs"] <= design.max_pairs
    assert summary["max_pairs"] == design.max_pairs <= 1.5 * summary["fixed_n"]


@pytest.mark.slow
@pytest.mark.parametrize("base", [0.5, 0.8, 0.95])
@pytest.mark.parametrize("delta", [0.05, 0.10, 0.20])
def test_docs_table_cells_save_30_percent_at_the_effect_and_half_with_no_difference(base, delta):
    design, s = plan_design(*cell_rates(base, delta))
    assert design is not None and s["type_i"] <= 0.025 and s["power"] >= 0.8
    assert s["expected_pairs_effect"] <= 0.7 * s["fixed_n"]
    assert s["expected_pairs_h0"] <= 0.5 * s["fixed_n"]
    assert s["max_pairs"] <= 1.5 * s["fixed_n"]


@pytest.mark.slow
@pytest.mark.parametrize(("b_wins", "expected"), [(True, "B better"), (False, "undecided")])
def test_ledger_follows_the_design_and_stops_at_its_max_pairs(b_wins, expected):
    """A decided by the table in index order; with no discordant pair it stops undecided at max pairs exactly."""
    from lerobench.plan.stopping import Ledger, Until

    design, summary = plan_design(0.5, 0.2)
    cap = 200
    ledger = Ledger(Until("decided"), ["t"], cap, 0.05, 0.1, {("t", i): False for i in range(cap)}, "A",
                    design, summary)
    for i in range(cap):
        ledger.add("t", i, b_wins)
    block = ledger.block()["versus"]
    assert block["decision"] == expected
    assert block["pairs"] <= design.max_pairs and block["design"]["max_pairs"] == design.max_pairs
    if not b_wins:
        assert block["pairs"] == design.max_pairs and block["reason"] == "max pairs"
    own = block["decision_interval"]  # the design's own interval: leaves 1/2 out exactly when it decided
    low, high = own["theta_b"]
    if b_wins:
        assert own["outcome"] == "better" and low > 0.5 and own["p_value"] <= 0.05
    else:
        assert own["outcome"] == "undecided" and low <= 0.5 <= high and own["p_value"] is None


def exact_by_pairs(design, summary, p_gain: float, p_lost: float) -> float:
    """P("better") by a walk over *pairs* (B-only, A-only, concordant) up to the cap, through ``design.decide``.

    Independent of ``design.walk``/``operating`` (which walk the discordant pairs and add the cap by binomial sums):
    a dynamic programme over the (B-only, A-only) counts after each pair, stopping mass where the table decides.
    """
    ahead_p, behind_p = (p_gain, p_lost) if summary["effect"] > 0 else (p_lost, p_gain)
    alive = {(0, 0): 1.0}
    better = 0.0
    for _ in range(design.max_pairs):
        nxt: dict[tuple[int, int], float] = {}
        for (b, a), p in alive.items():
            for (db, da), q in (((1, 0), ahead_p), ((0, 1), behind_p), ((0, 0), 1 - ahead_p - behind_p)):
                if q <= 0:
                    continue
                state, mass = (b + db, a + da), p * q
                verdict = design.decide(*state)
                if verdict == "better":
                    better += mass
                elif verdict is None:
                    nxt[state] = nxt.get(state, 0.0) + mass
        alive = nxt
    return better


@pytest.mark.parametrize(("base", "effect", "power"), [
    (0.0, 0.3, 0.8),    # run A at 0%: every discordant pair favours B at the effect
    (0.0, 0.9, 0.8),    # a huge effect over 0%
    (0.0, 1.0, 0.8),    # the largest possible
    (1.0, -0.2, 0.8),   # run A at 100%, B worse
    (0.0, 0.3, 0.99),   # power near 1
    (0.3, 0.6, 0.95),   # theta1 < 1, a large effect at high power
])
@pytest.mark.slow
def test_edge_baselines_design_a_test_whose_type_one_error_and_power_hold_exactly(base, effect, power):
    design, summary = plan_design(base, effect, power=power)
    assert design is not None, summary
    r = summary["discordance"]
    gain, lost = (r + abs(effect)) / 2, (r - abs(effect)) / 2
    if effect < 0:
        gain, lost = lost, gain
    type_i = exact_by_pairs(design, summary, r / 2, r / 2)  # no difference, the same discordance
    at_effect = exact_by_pairs(design, summary, gain, lost)
    assert type_i <= 0.025 + 1e-12 and at_effect >= power - 1e-12, (type_i, at_effect)
    assert abs(at_effect - summary["power"]) < 1e-9
    assert type_i <= summary["type_i"] + 1e-12  # the summary's type-I bounds every discordance (cap included)
    for r0 in (0.01, 0.5, 1.0):
        assert exact_by_pairs(design, summary, r0 / 2, r0 / 2) <= summary["type_i"] + 1e-12


@pytest.mark.parametrize(("base", "effect", "cap", "why"), [
    (0.5, 0.001, None, "no fixed-n test"),   # a tiny effect: more than 200,000 pairs
    (0.0, 0.5, 1, "no design reaches"),      # a run A of one pair
    (1.0, -0.5, 3, "no design reaches"),     # too few pairs for 2^-k <= alpha/2
])
@pytest.mark.slow
def test_a_design_that_cannot_reach_its_power_says_why_instead_of_raising(base, effect, cap, why):
    design, summary = plan_design(base, effect, cap=cap)
    assert design is None and why in summary["reason"]


@pytest.mark.parametrize(("base", "effect"), [(1.0, 0.1), (0.0, -0.1), (0.95, 0.2)])
def test_an_impossible_effect_is_refused_in_one_line(base, effect):
    from typer.testing import CliRunner

    from lerobench.cli import app

    result = CliRunner().invoke(app, ["plan", "--base", str(base), "--diff", str(effect)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1 and "[0, 1]" in result.output
