"""The batched forms a vector env hands the rollout: observation rows and per-slot infos (issue 47).

Why here and not gymnasium's: lerobench's vector envs (``envs/vector.py``, ``envs/workers.py``) are its own,
built on gymnasium's public space helpers only, so the layout they return is written down once:

- observations: the batched observation space's arrays (a dict of arrays, ``images`` a dict per camera), row
  ``i`` being slot ``i``'s last observation;
- infos: for each key a slot reported, an array over the slots (numbers keep their type, anything else is an
  object array, a nested dict is batched the same way) and ``"_" + key``, a bool mask of the slots that reported
  it. It is gymnasium's vector info layout, so code written against gymnasium reads it unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def slot_seeds(seed: Any, n: int) -> list[Any]:
    """A whole-batch reset's seed per slot: None for all, an int for slot 0 counting up, or one per slot."""
    if seed is None:
        return [None] * n
    return [seed + i for i in range(n)] if isinstance(seed, int) else list(seed)


def write_row(batch: Any, single: Any, i: int) -> None:
    """Write one env's observation into row ``i`` of the batched observation (nested dicts of arrays)."""
    if isinstance(batch, dict):
        for key, value in single.items():
            write_row(batch[key], value, i)
    else:
        batch[i] = single


def _column(value: Any, n: int) -> np.ndarray:
    """An empty column over ``n`` slots for values like ``value``."""
    if type(value) in (bool, int, float) or isinstance(value, np.number):
        return np.zeros(n, dtype=type(value))
    if isinstance(value, np.ndarray):
        return np.zeros((n, *value.shape), dtype=value.dtype)
    return np.full(n, None, dtype=object)


def add_info(infos: dict[str, Any], info: dict[str, Any], i: int, n: int) -> dict[str, Any]:
    """``infos`` with slot ``i``'s ``info`` added (of ``n`` slots): values in columns, ``_key`` masks beside them."""
    for key, value in info.items():
        if isinstance(value, dict):
            column: Any = add_info(infos.get(key, {}), value, i, n)
        else:
            column = infos.get(key)
            if column is None:
                column = _column(value, n)
            column[i] = value
        mask = infos.get(f"_{key}")
        if mask is None:
            mask = np.zeros(n, dtype=bool)
        mask[i] = True
        infos[key], infos[f"_{key}"] = column, mask
    return infos
