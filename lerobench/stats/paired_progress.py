"""An anytime-valid paired test on task progress: ``--versus --until decided --metric progress`` (issue 62 item 2).

The binary test (``sequential.paired_evalues``) learns only from discordant pairs, and a pair where both
policies pushed the T 80% of the way and one of them crossed the success threshold says as much as one where one
policy did nothing. Here each pair gives d = progress(B) - progress(A) in [-1, 1] (the *highest* progress of each
episode, ``max_progress``), and the test is on the mean difference delta = E[d]:

- **Map to [0, 1]**: x = (d + 1) / 2 has mean m = (delta + 1) / 2; "no difference" is m = 1/2.
- **Two one-sided betting e-processes** (Waudby-Smith & Ramdas, "Estimating means of bounded random variables by
  betting", JRSS-B 2024): a gambler betting that the mean is above m holds
  K+_t(m) = prod_i (1 + lam+_i (x_i - m)), one betting below holds K-_t(m) = prod_i (1 - lam-_i (x_i - m)). The
  bets are predictable (each from the pairs before it, never from how many will come) and in [0, c/m] and
  [0, c/(1 - m)] (c = 3/4), so every factor is positive; under mean m each capital is a nonnegative martingale
  whatever the distribution of d, and by Ville's inequality it ever reaches 2/alpha with probability <= alpha/2.
  "B better" when K+(1/2) reaches 2/alpha, "A better" when K-(1/2) does: two-sided level alpha, however often it
  is looked at.
- **The bets: aGRAPA** (the paper's approximate growth-rate-adaptive plug-in, section 5.3):
  lam+ = (mu - m) / (s2 + (mu - m)^2), clipped to [0, c/m], from the running mean mu and variance s2 of the pairs
  so far (one pseudo-pair at m = 1/2, variance 1/4). It bets hard when the differences are consistent, which is
  what makes a policy that is better on every pair decide in a handful of pairs even when no pair is discordant.
- **The decision's own interval**: the confidence sequence for delta, every m at which neither gambler (the
  decision's, taken at m instead of 1/2) ever reached 2/alpha, computed on a grid of m (a superset's hull: still
  valid). At m = 1/2 these are the decision's e-processes, so it excludes 0 exactly when a direction was decided.
- **p-value**: min(1, 2 / the larger running-maximum e-value), anytime-valid, <= alpha exactly when decided.

The values must come in a fixed order (round by round, index order), never in finish order (plan/stopping.py).
Checked by simulation in ``tests/test_progress_versus.py`` (type-I error under the null, a naive repeated t-test
that fails the same check, power against the binary test on the same episodes). Heavy imports stay inside.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from lerobench.stats.betting import TRUNCATION, kept_interval, log_capitals, to_unit  # noqa: F401 - TRUNCATION: named in docs

GRID = 2001
"""Candidate means m on [0, 1] for the confidence sequence (step 1/2000 on m, 1/1000 on delta)."""

METHOD = ("anytime-valid: two one-sided betting e-processes (Waudby-Smith & Ramdas 2024, aGRAPA bets) on "
          "(d + 1) / 2, d = max_progress(B) - max_progress(A) per pair, each at alpha/2; the interval is every mean "
          "difference at which neither e-process ever reached 2/alpha")


def evalues(differences: Any) -> tuple[Any, Any]:
    """Running e-values (e_b, e_a) for "B better" and "A better" after each pair: arrays shaped like the input.

    Vectorised over leading axes (the validity tests simulate thousands of streams at once). The decision at pair
    t is whether either has reached 2/alpha at any pair up to t (``first_decision``).
    """
    import numpy as np

    up, down = log_capitals(to_unit(differences), 0.5)
    with np.errstate(over="ignore"):
        return np.exp(up), np.exp(down)


def decision(differences: Sequence[float], alpha: float = 0.05) -> tuple[str | None, int]:
    """The first decision over ``differences`` in order: ("B better" | "A better" | None, pairs it took).

    Pairs is the index (1-based) of the pair at which an e-value first reached 2/alpha, or len(differences) when
    none did. If both reached it at the same pair (impossible: one of them falls whenever the other rises), "B
    better" would be checked first.
    """
    import numpy as np

    if len(differences) == 0:
        return None, 0
    e_b, e_a = evalues(differences)
    hit = (e_b >= 2 / alpha) | (e_a >= 2 / alpha)
    if not hit.any():
        return None, len(differences)
    at = int(np.argmax(hit))
    return ("B better" if e_b[at] >= 2 / alpha else "A better"), at + 1


def confidence_sequence(differences: Sequence[float], alpha: float = 0.05) -> tuple[float, float]:
    """Anytime-valid (1 - alpha) interval for the mean progress difference after ``differences`` (in order).

    The candidates m (mapped to delta = 2m - 1) that neither one-sided e-process rejected at any prefix: found on
    a grid, then each end refined by bisection between the last rejected and the first kept grid point (the kept
    side is reported, rounded outward to 1e-9). At m = 1/2 these are the decision's e-processes, so the interval
    excludes 0 exactly when a direction was decided.
    """
    import numpy as np

    if len(differences) == 0:
        return (-1.0, 1.0)
    x = to_unit(differences)
    threshold = math.log(2 / alpha)

    def kept(m: Any) -> Any:
        up, down = log_capitals(x[None, :], np.asarray(m, dtype=float).reshape(-1, 1))
        return (up.max(axis=1) < threshold) & (down.max(axis=1) < threshold)

    hull = kept_interval(kept, 0.0, 1.0, GRID)
    if hull is None:  # never at the true mean (probability <= alpha): the mean alone
        mean = float(np.mean(differences))
        return (mean, mean)
    low, high = hull
    return (max(-1.0, math.floor((2 * low - 1) * 1e9) / 1e9), min(1.0, math.ceil((2 * high - 1) * 1e9) / 1e9))


def decision_interval(differences: Sequence[float], alpha: float = 0.05) -> dict[str, Any]:
    """The progress rule's own interval, e-values and p-value at a stop (results.json ``decision_interval``)."""
    import numpy as np

    low, high = confidence_sequence(differences, alpha)
    if len(differences):
        e_b, e_a = evalues(differences)
        best = max(float(np.max(e_b)), float(np.max(e_a)))
    else:
        best = 1.0
    return {"mean_difference": [low, high], "level": 1 - alpha,
            "p_value": round(min(1.0, 2 / best), 6) if best > 0 else 1.0, "method": METHOD}


def simulate_stops(pairs: Any, alpha: float = 0.05) -> tuple[Any, Any]:
    """Pairs to a decision (steps + 1 if none) and whether it was "B better", per simulated stream of d.

    ``pairs`` is streams x steps; for the validity and power checks and benchmarks.
    """
    import numpy as np

    e_b, e_a = evalues(pairs)
    hit = (e_b >= 2 / alpha) | (e_a >= 2 / alpha)
    steps = hit.shape[-1]
    first = np.where(hit.any(axis=-1), hit.argmax(axis=-1), steps)
    rows = np.arange(len(first))
    b_better = np.zeros(len(first), bool)
    decided = first < steps
    b_better[decided] = e_b[rows[decided], first[decided]] >= 2 / alpha
    return first + 1, b_better


def progress_state(differences: Sequence[float], gained: int, lost: int, successes_a: int, alpha: float,
                   at_stop: bool, design: Any = None) -> dict[str, Any]:
    """The ``--metric progress`` rule's figures now: results.json ``stopping.versus`` (docs/results.md).

    ``e_value_*`` are each e-process's highest value so far (the decision is whether one ever reached 2/alpha).
    At a stop: the rule's own interval (``decision_interval``) and, beside it, the success rates of the same
    pairs with their exact paired interval, descriptive only: the rule decided about mean progress, not success.
    ``design`` (``progress_design.ProgressDesign``, from ``--effect``): the designed rule's decision, e-values
    and interval instead.
    """
    import numpy as np

    n = len(differences)
    if design is not None:
        return _designed_state(differences, gained, lost, successes_a, alpha, at_stop, design)
    verdict, _ = decision(differences, alpha)
    e_b, e_a = evalues(differences) if n else (np.ones(1), np.ones(1))
    state: dict[str, Any] = {
        "metric": "progress", "decided_about": "mean of max_progress(B) - max_progress(A) per pair",
        "decision": verdict or "undecided", "pairs": n, "gained": gained, "lost": lost,
        "e_value_b_better": round(float(np.max(e_b)), 6), "e_value_a_better": round(float(np.max(e_a)), 6),
        "mean_difference": round(float(np.mean(differences)), 6) if n else None}
    if at_stop:
        state["decision_interval"] = decision_interval(differences, alpha)
        state["success_descriptive"] = success_beside(gained, lost, successes_a, n, alpha)
    return state


def _designed_state(differences: Sequence[float], gained: int, lost: int, successes_a: int, alpha: float,
                    at_stop: bool, design: Any) -> dict[str, Any]:
    """``progress_state`` of the designed rule: its decision, its e-values (designed side, other side), interval."""
    import numpy as np

    from lerobench.stats.progress_design import decide, log_processes
    from lerobench.stats.progress_design import decision_interval as designed_interval

    n = len(differences)
    verdict = decide(differences, design) if n else None
    ahead = behind = 1.0
    if n:
        better, worse, _, _ = log_processes(np.asarray(differences, dtype=float)[None, :], design)
        ahead, behind = math.exp(float(better.max())), math.exp(float(worse.max()))
    e_b, e_a = (ahead, behind) if design.sign > 0 else (behind, ahead)
    state: dict[str, Any] = {
        "metric": "progress", "decided_about": "mean of max_progress(B) - max_progress(A) per pair",
        "decision": verdict or "undecided", "pairs": n, "gained": gained, "lost": lost,
        "e_value_b_better": round(e_b, 6), "e_value_a_better": round(e_a, 6),
        "mean_difference": round(float(np.mean(differences)), 6) if n else None}
    if at_stop:
        state["decision_interval"] = designed_interval(differences, design)
        state["success_descriptive"] = success_beside(gained, lost, successes_a, n, alpha)
    return state


def success_beside(gained: int, lost: int, successes_a: int, pairs: int, alpha: float) -> dict[str, Any]:
    """Success rates of the same pairs and the exact paired interval for their difference, marked descriptive."""
    from lerobench.stats.binomial import paired_difference_exact

    if pairs == 0:
        return {"rate_a": None, "rate_b": None, "ci95": None, "descriptive": True}
    interval, p = paired_difference_exact(gained, lost, pairs, alpha)
    return {"rate_a": round(successes_a / pairs, 6), "rate_b": round((successes_a + gained - lost) / pairs, 6),
            "difference_ci": [round(float(v), 6) for v in interval], "p_value": round(float(p), 6),
            "level": 1 - alpha, "descriptive": True,
            "note": "exact paired interval (fixed-n) of rate(B) - rate(A) on the pairs the rule ran; descriptive "
                    "only: the rule decided about mean progress, and it stopped on the data"}
