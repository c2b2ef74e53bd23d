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
