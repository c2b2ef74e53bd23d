"""The designed test's own interval and p-value: the stagewise ordering of its sequential sample space.

Why: after a sequential stop a fixed-n interval is biased, and the anytime-valid confidence sequence belongs to
another test (the e-process), which may not have rejected when the design did. The interval printed beside a
designed decision must come from inverting *that* test (Jennison & Turnbull 2000, ch. 8.4), so that it excludes
"no difference" exactly when the test decided.

Sample space. The run walks the discordant pairs: after m of them, b went the effect's way ("ahead", a B win
for a positive effect). At each (m, b) the run applies its table (``run_table``): *worse* when the other
direction's e-process has reached 2/alpha (checked first), else the design's *better* (it rejects), *accept*
(not better by the effect) or continue. A run can also end while the table says continue: at the design's pair
cap or the per-task episode cap, *undecided*. Both caps depend on how many pairs were discordant, never on which
way they went, so given them the outcome is the walk truncated there; an interval with coverage for every cap
has it overall.

Ordering (stagewise, with the exits): worse < accept < undecided < better. Among *better* exits an earlier one is
more extreme (higher), ties by b; among *worse* and *accept* exits an earlier one is lower; undecided ones by b.
Each tail probability is an exact sum over a forward walk at theta (the ahead side's chance per discordant pair).

Interval for theta: {theta : P_theta(>= obs) > alpha/2 and P_theta(<= obs) > alpha/2}, ends by bisection and
rounded outward; then widened to contain 1/2 on each side whose rule did not decide. The design's exact
type-I (<= alpha/2) already puts P_1/2(>= obs) at or below alpha/2 for every *better* exit, and the e-process's
Ville bound does the same for *worse*, so the interval excludes 1/2 exactly when the run decided; widening only
adds coverage. For an *accept* exit the run never reached its cap, and whether *worse* could have come between
the stop and the cap depends on it: the tails use the bound that widens the interval for every cap.

The p-value is the same ordering's, two-sided (2 x the decided side's tail, capped at 1): it is <= alpha exactly
for the runs that decided, and ``None`` for a run that did not (the design never rejects undecided).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lerobench.stats.design import ACCEPT, B_BETTER, CONTINUE

WORSE = 2
"""Action of the run's table where the other direction's e-process decides (before the design is asked)."""

KINDS = {B_BETTER: "better", WORSE: "worse", ACCEPT: "accept", CONTINUE: "undecided"}

_BISECTIONS = 48

METHOD = ("stagewise ordering of the designed test's sample space (Jennison & Turnbull 2000, 8.4): exits "
          "ordered worse < accept < undecided < better, an earlier better (worse/accept) exit more (less) extreme; "
          "theta = P(B wins | discordant) where both tails exceed alpha/2, widened to 1/2 on a side whose rule "
          "did not decide; exact tail sums over the discordant walk, conditional on the caps")


@dataclass(frozen=True)
class Outcome:
    """Where a designed run ended on the discordant walk."""

    discordant: int
    """m: discordant pairs at the stop."""
    ahead: int
    """b: of those, the pairs that went the effect's way."""
    kind: str
    """``better``, ``worse``, ``accept`` (the table decided) or ``undecided`` (a cap, the table said continue)."""


def run_table(actions: Any, alpha: float) -> Any:
    """The design's table as the run applies it: the other direction's e-process stop (``WORSE``) folded in."""
    import numpy as np

    from lerobench.stats.sequential import paired_evalues

    M = actions.shape[0] - 1
    m, b = np.meshgrid(np.arange(M + 1), np.arange(M + 1), indexing="ij")
    inside = b <= m
    _, e_behind = paired_evalues(np.where(inside, b, 0), np.where(inside, m - b, 0))
    table = np.array(actions, dtype=np.int8, copy=True)
    table[inside & (e_behind >= 2 / alpha)] = WORSE
    return table


def outcome_at(table: Any, ahead: int, behind: int) -> Outcome:
    """The outcome of a run stopped at ``ahead`` + ``behind`` discordant pairs (undecided if the table continues)."""
    m = ahead + behind
    M = table.shape[0] - 1
    if m > M:
        raise ValueError(f"{m} discordant pairs is past the design's truncation at {M}")
    return Outcome(m, ahead, KINDS[int(table[m, ahead])])


def tails(table: Any, thetas: Any, outcomes: list[Outcome]) -> tuple[Any, Any, Any]:
    """P_theta(>= outcome), P_theta(<= outcome) and P_theta(outcome), stream i at ``thetas[i]``, ``outcomes[i]``.

    One forward walk serves every stream (the support of the walk does not depend on theta). An undecided
    outcome's space is the walk truncated at its m; an accept outcome's tails take the bound that widens the
    interval for any cap at or after its stop (module docstring).
    """
    import numpy as np

    thetas = np.asarray(thetas, dtype=float)
    n = len(thetas)
    M = table.shape[0] - 1
    m0 = np.array([o.discordant for o in outcomes])
    b0 = np.array([o.ahead for o in outcomes])
    kind = np.array([{v: k for k, v in KINDS.items()}[o.kind] for o in outcomes])
    before = {k: np.zeros(n) for k in (B_BETTER, WORSE, ACCEPT)}  # exits at stages < m0
    at_stop = {k: np.zeros(n) for k in (B_BETTER, WORSE, ACCEPT)}  # exits at stage m0 (all b)
    worse_all = np.zeros(n)
    row_ge, row_le, here = np.zeros(n), np.zeros(n), np.zeros(n)  # at stage m0, of the outcome's own kind
    lo, p = 0, np.ones((n, 1))
    for m in range(M + 1):
        b = np.arange(lo, lo + p.shape[1])
        act = table[m, b]
        for k in before:
            mass = (p * (act == k)).sum(axis=1)
            before[k] += np.where(m < m0, mass, 0.0)
            at_stop[k] += np.where(m == m0, mass, 0.0)
        worse_all += (p * (act == WORSE)).sum(axis=1)
        rows = np.flatnonzero(m == m0)
        if len(rows):
            mine = (act[None, :] == kind[rows, None]) * p[rows]
            row_ge[rows] = (mine * (b[None, :] >= b0[rows, None])).sum(axis=1)
            row_le[rows] = (mine * (b[None, :] <= b0[rows, None])).sum(axis=1)
            here[rows] = (mine * (b[None, :] == b0[rows, None])).sum(axis=1)
        p = np.where(act == CONTINUE, p, 0.0)
        alive = np.flatnonzero(p.any(axis=0))
        if m == M or len(alive) == 0:
            break
        lo, p = lo + alive[0], p[:, alive[0]: alive[-1] + 1]
        step = np.zeros((n, p.shape[1] + 1))
        step[:, :-1] += p * (1 - thetas)[:, None]
        step[:, 1:] += p * thetas[:, None]
        p = step
    upto = {k: before[k] + at_stop[k] for k in before}
    ge, le = np.zeros(n), np.zeros(n)
    for k, name in KINDS.items():
        s = kind == k
        if name == "better":
            ge[s] = (before[B_BETTER] + row_ge)[s]
            le[s] = (1 - ge + here)[s]
        elif name == "worse":
            le[s] = (before[WORSE] + row_le)[s]
            ge[s] = (1 - le + here)[s]
        elif name == "accept":
            ge[s] = (1 - (upto[WORSE] + before[ACCEPT] + row_le - here))[s]
            le[s] = (worse_all + before[ACCEPT] + row_le)[s]
        else:  # undecided: the walk truncated at m0, every exit up to m0 counted
            ge[s] = (upto[B_BETTER] + row_ge)[s]
            le[s] = (upto[WORSE] + upto[ACCEPT] + row_le)[s]
    return np.clip(ge, 0, 1), np.clip(le, 0, 1), here


def theta_intervals(table: Any, outcomes: list[Outcome], alpha: float = 0.05) -> Any:
    """The (len(outcomes), 2) array of intervals for theta (the ahead side's chance per discordant pair).

    Both ends of every outcome bisect in one walk per step. P_theta(>= obs) rises with theta and P_theta(<= obs)
    falls (checked on a grid in the tests), so each end is one crossing; ends are rounded outward to 1e-6.
    """
    import numpy as np

    n = len(outcomes)
    both = outcomes + outcomes
    lo, hi = np.zeros(2 * n), np.ones(2 * n)
    # Lower end: inf {theta: ge > alpha/2}. Upper end: sup {theta: le > alpha/2}.
    for _ in range(_BISECTIONS):
        mid = (lo + hi) / 2
        ge, le, _ = tails(table, mid, both)
        inside = np.concatenate([ge[:n] > alpha / 2, le[n:] > alpha / 2])
        # lower: inside -> the end is at or below mid; upper: inside -> at or above mid
        hi = np.where(np.arange(2 * n) < n, np.where(inside, mid, hi), np.where(inside, hi, mid))
        lo = np.where(np.arange(2 * n) < n, np.where(inside, lo, mid), np.where(inside, mid, lo))
    ge0, _, _ = tails(table, np.zeros(n), outcomes)
    _, le1, _ = tails(table, np.ones(n), outcomes)
    low = np.where(ge0 > alpha / 2, 0.0, lo[:n])
    high = np.where(le1 > alpha / 2, 1.0, hi[n:])
    low = np.floor(low * 1e6) / 1e6
    high = np.ceil(high * 1e6) / 1e6
    kinds = np.array([o.kind for o in outcomes])
    low = np.where(kinds != "better", np.minimum(low, 0.5), low)
    high = np.where(kinds != "worse", np.maximum(high, 0.5), high)
    return np.stack([low, high], axis=1)


def p_value(table: Any, outcome: Outcome) -> float | None:
    """Two-sided stagewise p-value of no difference for a decided run (None when the run did not decide)."""
    if outcome.kind not in ("better", "worse"):
        return None
    ge, le, _ = tails(table, [0.5], [outcome])
    side = ge[0] if outcome.kind == "better" else le[0]
    return min(1.0, 2 * float(side))


def decision_interval(actions: Any, alpha: float, gained: int, lost: int, pairs: int,
                      positive: bool) -> dict[str, Any]:
    """The designed run's interval and p-value at its stop, in B's terms (results.json ``decision_interval``).

    ``theta_b`` is P(B wins | discordant); the mapping to rate(B) - rate(A) = discordance x (2 theta_b - 1)
    is taken at the observed discordance (gained + lost) / pairs and labelled so.
    """
    from lerobench.stats.sequential import theta_reading

    table = run_table(actions, alpha)
    ahead, behind = (gained, lost) if positive else (lost, gained)
    outcome = outcome_at(table, ahead, behind)
    low, high = (float(x) for x in theta_intervals(table, [outcome], alpha)[0])
    theta_b = [low, high] if positive else [round(1 - high, 6), round(1 - low, 6)]
    return {"outcome": outcome.kind, **theta_reading(theta_b, gained, lost, pairs), "level": 1 - alpha,
            "p_value": p_value(table, outcome), "method": METHOD}


def outcome_space(table: Any, cap: int | None = None) -> tuple[list[Outcome], Any]:
    """Every outcome of the walk truncated at ``cap`` discordant pairs (the design's own end if None).

    Also returns ``probabilities(theta)``: each outcome's exact chance (they sum to 1). For the coverage tests.
    """
    import numpy as np

    M = table.shape[0] - 1
    cap = M if cap is None else min(cap, M)
    outcomes: list[Outcome] = []
    reach = np.zeros((M + 1, M + 1), bool)
    reach[0, 0] = True
    for m in range(cap + 1):
        for b in np.flatnonzero(reach[m, : m + 1]):
            act = int(table[m, b])
            if act != CONTINUE:
                outcomes.append(Outcome(m, int(b), KINDS[act]))
            elif m == cap:
                outcomes.append(Outcome(m, int(b), "undecided"))
            else:
                reach[m + 1, b] = reach[m + 1, b + 1] = True

    def probabilities(theta: float) -> Any:
        prob = np.zeros((M + 1, M + 1))
        prob[0, 0] = 1.0
        for m in range(cap):
            moving = np.where(table[m, : m + 1] == CONTINUE, prob[m, : m + 1], 0.0)
            prob[m + 1, : m + 1] += moving * (1 - theta)
            prob[m + 1, 1: m + 2] += moving * theta
        return np.array([prob[o.discordant, o.ahead] for o in outcomes])

    return outcomes, probabilities


def coverage(table: Any, thetas: list[float], alpha: float = 0.05, cap: int | None = None) -> list[float]:
    """Exact chance that the interval covers each true theta (the ahead side's chance), given the walk's cap."""
    outcomes, probabilities = outcome_space(table, cap)
    intervals = theta_intervals(table, outcomes, alpha)
    return [float(probabilities(theta) @ ((intervals[:, 0] <= theta) & (theta <= intervals[:, 1])))
            for theta in thetas]


def rows(actions: Any) -> list[list[list[int]]]:
    """The design's table as run-length rows (results.json ``design.table``): per m, [[action, count], ...]."""
    out = []
    for m in range(actions.shape[0]):
        row = actions[m, : m + 1]
        runs: list[list[int]] = []
        for a in row:
            if runs and runs[-1][0] == int(a):
                runs[-1][1] += 1
            else:
                runs.append([int(a), 1])
        out.append(runs)
    return out


def from_rows(encoded: list[list[list[int]]]) -> Any:
    """The table back from ``rows`` (compare and report recompute the interval from results.json)."""
    import numpy as np

    M = len(encoded) - 1
    actions = np.full((M + 1, M + 1), ACCEPT, dtype=np.int8)
    for m, runs in enumerate(encoded):
        at = 0
        for action, count in runs:
            actions[m, at: at + count] = action
            at += count
        if at != m + 1:
            raise ValueError(f"design table row {m} covers {at} cells, expected {m + 1}")
    return actions

