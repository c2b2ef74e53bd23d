"""``--seeds 0-99,120``: the seed lists the expert tables take (benchmarks/aloha_expert.py, pusht_expert.py)."""

from __future__ import annotations


def parse_seeds(text: str) -> list[int]:
    """Comma-separated seeds and inclusive ranges ``lo-hi``, in the order given."""
    seeds: list[int] = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            seeds.extend(range(int(lo), int(hi) + 1))
        elif part:
            seeds.append(int(part))
    return seeds
