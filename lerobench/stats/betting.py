"""The betting primitives both paired progress tests share (``paired_progress`` and ``progress_design``).

A difference d in [-1, 1] maps to (d + 1) / 2 in [0, 1]; the capital of a bettor against "the mean is m" grows
by 1 + lambda (x - m) a pair (Waudby-Smith & Ramdas 2024, aGRAPA bets). Kept apart so the designed test can use
them without importing the test it is the designed variant of.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

TRUNCATION = 0.75
"""The bets' cap c: each bet at most c/m (above) or c/(1 - m) (below), so a factor never falls below 1 - c.

The paper suggests 1/2 to 3/4; 3/4 decides a B better on every pair by +0.35 after 14 pairs (1/2: 24), and the
type-I error is the same by construction (any cap below 1 keeps the capital a positive martingale)."""


def log_capitals(x: Any, m: Any) -> tuple[Any, Any]:
    """Log capitals log K+_t(m) and log K-_t(m) after each pair: arrays (..., t) for values ``x`` (..., t).

    ``m`` broadcasts against the leading axes (a column of candidates, or a scalar). The running mean and
    variance before pair t include one pseudo-pair (mean 1/2, variance 1/4), so the first bet is 0 at m = 1/2.
    """
    import numpy as np

    x = np.asarray(x, dtype=float)
    m = np.asarray(m, dtype=float)
    t = np.arange(1, x.shape[-1] + 1)
    mean = (0.5 + np.cumsum(x, axis=-1)) / (t + 1)
    var = (0.25 + np.cumsum((x - mean) ** 2, axis=-1)) / (t + 1)
    before_mean = np.concatenate([np.full(x.shape[:-1] + (1,), 0.5), mean[..., :-1]], axis=-1)
    before_var = np.concatenate([np.full(x.shape[:-1] + (1,), 0.25), var[..., :-1]], axis=-1)
    gap = before_mean - m
    raw = gap / (before_var + gap * gap)
    with np.errstate(divide="ignore"):
        up_cap = np.where(m > 0, TRUNCATION / np.maximum(m, 1e-300), np.inf)
        down_cap = np.where(m < 1, TRUNCATION / np.maximum(1 - m, 1e-300), np.inf)
    lam_up = np.clip(raw, 0, up_cap)
    lam_down = np.clip(-raw, 0, down_cap)
    with np.errstate(divide="ignore"):
        up = np.cumsum(np.log1p(lam_up * (x - m)), axis=-1)
        down = np.cumsum(np.log1p(-lam_down * (x - m)), axis=-1)
    return up, down


def to_unit(differences: Any) -> Any:
    """Map a difference d in [-1, 1] to (d + 1) / 2 in [0, 1]; a value outside [-1, 1] is an error, never clipped."""
    import numpy as np

    d = np.asarray(differences, dtype=float)
    if d.size and (not np.all(np.isfinite(d)) or d.min() < -1 - 1e-12 or d.max() > 1 + 1e-12):
        raise ValueError(f"progress differences must lie in [-1, 1], got min {d.min()} and max {d.max()}")
    return np.clip((d + 1) / 2, 0, 1)


def kept_interval(kept: Callable[[Any], Any], low: float, high: float, points: int,
                  bisections: int = 40) -> tuple[float, float] | None:
    """The hull of the values in [low, high] that ``kept`` keeps (None: none kept), as both progress tests need it.

    ``kept`` maps an array of candidates to a boolean array. The grid of ``points`` candidates finds the kept
    hull; each end not at a bound is then refined by bisection between the last rejected and the first kept grid
    point, reporting the kept side.
    """
    import numpy as np

    grid = np.linspace(low, high, points)
    idx = np.flatnonzero(kept(grid))
    if not idx.size:
        return None

    def edge(rejected: float, keep: float) -> float:
        for _ in range(bisections):
            mid = (rejected + keep) / 2
            if kept(mid)[0]:
                keep = mid
            else:
                rejected = mid
        return keep

    first = low if idx[0] == 0 else edge(grid[idx[0] - 1], grid[idx[0]])
    last = high if idx[-1] == points - 1 else edge(grid[idx[-1] + 1], grid[idx[-1]])
    return first, last
