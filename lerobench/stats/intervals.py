"""Interval ends as text, rounded outward: the printed interval always contains the computed one.

Why: rounding each end to the nearest digit can shrink an interval ([82.78, 99.92] % became "83–100%"),
so a printed 95% interval claimed more precision than it has. The lower end is rounded down, the upper
end up, at every place an interval is shown (terminal tables, the HTML report, the stopping line).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

_SLACK = 1e-9
"""Float noise ignored before rounding (100 * 0.29 is 28.999999999999996, which must stay 29)."""


def outward(lo: float, hi: float, decimals: int = 0) -> tuple[float, float]:
    """``lo`` rounded down and ``hi`` rounded up to ``decimals`` decimal places."""
    scale = 10 ** decimals
    return math.floor(lo * scale + _SLACK) / scale, math.ceil(hi * scale - _SLACK) / scale


def percent_ends(ci: Sequence[float], decimals: int = 0, signed: bool = False) -> tuple[str, str]:
    """The ends of a rate interval (fractions) as percent numbers, outward: ``("82", "100")``."""
    lo, hi = outward(100 * float(ci[0]), 100 * float(ci[1]), decimals)
    form = f"{'+' if signed else ''}.{decimals}f"
    return format(lo + 0.0, form), format(hi + 0.0, form)  # + 0.0: never "-0"


def percent_interval(ci: Sequence[float], decimals: int = 0, sep: str = "–", signed: bool = False,
                     suffix: str = "%") -> str:
    """A rate interval as ``82–100%`` (``signed``: ``+3…+12`` for differences), rounded outward."""
    lo, hi = percent_ends(ci, decimals, signed)
    return f"{lo}{sep}{hi}{suffix}"


def points_interval(ci: Sequence[float], sep: str = "…", decimals: int = 0) -> str:
    """A difference of rates as signed percentage points, ``-1…+12``, rounded outward."""
    return percent_interval(ci, decimals, sep, signed=True, suffix="")


def unit_interval(ci: Sequence[float], decimals: int = 2, sep: str = "–") -> str:
    """An interval of a mean in [0, 1] (task progress) as ``0.85–0.97``, rounded outward."""
    lo, hi = outward(float(ci[0]), float(ci[1]), decimals)
    return f"{lo + 0.0:.{decimals}f}{sep}{hi + 0.0:.{decimals}f}"
