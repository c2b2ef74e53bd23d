"""One reading of a policy's output, shared by the rollout, the policy server and the batch-invariance check.

Why one function: the rollout and ``lerobench serve`` each had their own copy of "torch tensor to NumPy, (B, A)
or (B, T, A), right action size", and the copies had drifted (only the rollout refused an empty chunk). Callers
wrap ``ActionError`` in their own error: the rollout names the suite, task and episode (``PolicyError``), the
server answers the client (``RequestError``).
"""

from __future__ import annotations

from typing import Any

import numpy as np


class ActionError(ValueError):
    """A policy's output is not a valid action batch; ``row`` is the first bad row where one row is to blame."""

    def __init__(self, message: str, row: int | None = None):
        super().__init__(message)
        self.row = row


def to_numpy(raw: Any, dtype: Any = np.float32) -> np.ndarray:
    """``raw`` as a NumPy array of ``dtype``; a torch tensor is detached and moved to the CPU first.

    Duck-typed on ``detach`` so that this module never imports torch (most runs have none).
    """
    if hasattr(raw, "detach"):
        raw = raw.detach().cpu().numpy()
    return np.asarray(raw, dtype=dtype)


def action_chunk(raw: Any, n: int, action_dim: int, *, finite: bool = True) -> np.ndarray:
    """The policy's output for ``n`` rows as a float32 chunk (n, T, A), T >= 1; a (n, A) output is T = 1.

    ``finite``: refuse NaN or infinity (the rollout does; the server hands them on, and the client's rollout
    refuses them there, naming the episode). Raises ``ActionError`` with an expected-versus-got message.
    """
    try:
        actions = to_numpy(raw)
    except (TypeError, ValueError) as exc:
        raise ActionError(f"action is not numeric ({exc})") from exc
    if actions.ndim == 2:
        actions = actions[:, None, :]
    if actions.ndim != 3 or actions.shape[0] != n or actions.shape[2] != action_dim or actions.shape[1] < 1:
        raise ActionError(f"expected actions of shape ({n}, {action_dim}) or a chunk ({n}, T, {action_dim}), "
                          f"got {tuple(np.shape(raw))}")
    if finite:
        bad = ~np.isfinite(actions).all(axis=(1, 2))
        if bad.any():
            raise ActionError("action contains NaN or infinity", row=int(np.flatnonzero(bad)[0]))
    return actions
