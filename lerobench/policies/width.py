"""Fixed-width policy calls: every call to a batched model has the same tensor shape, whatever the rows.

Why: a torch model's output for one row depends on how many rows share the call. Matmul and convolution
kernels pick their blocking and reduction order by the batch shape, so a row computed in a call of 3 rows
differs from the same row in a call of 4 by ~1e-7..1e-5, and closed-loop contact dynamics amplify that
into another trajectory. With continuous batching the rows per call depend on timing and the auto batch
size on the machine's cores, so without a fixed shape the same command gives different per-episode
outcomes on a laptop, in CI and on a 16-core box.

What holds (measured, ``benchmarks/call_width.py`` and ``tests/test_batch_invariance.py``): at one fixed
call shape a row's bits depend neither on the other rows nor on their number nor on the thread count; on the
CPU they depend on the row's *position* unless the width is 1 or a multiple of 8 (AVX2's 8 float lanes: an
MLP, ACT and a diffusion UNet gave up to 1.4e-6 at widths 2-5 between positions, 0 at 1, 8 and 16). So the
rows that need an action are split into calls of exactly ``width`` rows,
the last one padded with copies of its last row. Padding rows carry ``slot`` -1 and ``padding`` True;
their outputs are discarded (a policy keeping per-row state may skip them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from lerobench.errors import ConfigError

DEFAULT_CALL_WIDTH = {"cpu": 8, "cuda": 16}
"""Call width per device kind when ``--call-width`` is not given (why these: docs/policies.md#call-width,
measured by ``benchmarks/call_width.py``). Never a function of the core count: the same command gives the
same numbers on every machine with the same device kind."""

PADDING_SLOT = -1
"""``observation["slot"]`` of a padding row."""


def resolve_call_width(requested: int | None, device: str) -> int:
    """The call width a torch policy uses: ``--call-width`` if given (0 = unpadded), else the device's default."""
    if requested is not None:
        if requested < 0:
            raise ConfigError(f"--call-width must be >= 1 (or 0 for unpadded calls), got {requested}")
        return requested
    return DEFAULT_CALL_WIDTH["cuda" if device.startswith("cuda") else "cpu"]


def _rows_of(value: Any, n: int) -> bool:
    """Whether ``value`` holds one entry per row of an ``n``-row observation."""
    if isinstance(value, np.ndarray):
        return value.ndim >= 1 and value.shape[0] == n
    return isinstance(value, list | tuple) and len(value) == n


def take_rows(observation: dict[str, Any], index: np.ndarray) -> dict[str, Any]:
    """The observation restricted to rows ``index`` (in that order, repeats allowed); other keys as they are."""
    n = len(observation["state"])
    out: dict[str, Any] = {}
    for key, value in observation.items():
        if isinstance(value, dict):
            out[key] = {k: v[index] if _rows_of(v, n) else v for k, v in value.items()}
        elif isinstance(value, np.ndarray) and _rows_of(value, n):
            out[key] = value[index]
        elif isinstance(value, list | tuple) and _rows_of(value, n):
            out[key] = [value[i] for i in index.tolist()]
        else:
            out[key] = value
    return out


def pad_rows(observation: dict[str, Any], descriptions: list[str], width: int) -> tuple[dict[str, Any], list[str]]:
    """``observation`` padded to ``width`` rows with copies of its last row, marked ``padding`` / slot -1."""
    n = len(observation["state"])
    if n >= width:
        out = dict(observation)
        out["padding"] = np.zeros(n, dtype=bool)
        return out, list(descriptions)
    index = np.concatenate([np.arange(n), np.full(width - n, n - 1)])
    out = take_rows(observation, index)
    padding = np.arange(width) >= n
    out["padding"] = padding
    if "slot" in out:
        out["slot"] = np.where(padding, PADDING_SLOT, np.asarray(out["slot"]))
    return out, [descriptions[i] for i in index.tolist()]


def call_at_width(compute: Callable[[dict[str, Any], list[str]], np.ndarray], observation: dict[str, Any],
                  descriptions: list[str], width: int) -> np.ndarray:
    """``compute`` over calls of exactly ``width`` rows (0: one call as given); the real rows' outputs, in order."""
    n = len(observation["state"])
    if width <= 0 or n == 0:
        return compute(observation, list(descriptions))
    parts = []
    for start in range(0, n, width):
        index = np.arange(start, min(start + width, n))
        part = take_rows(observation, index) if (start, len(index)) != (0, n) else observation
        padded, texts = pad_rows(part, [descriptions[i] for i in index.tolist()], width)
        parts.append(np.asarray(compute(padded, texts))[: len(index)])
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def keeps_positions(width: int) -> bool:
    """Whether a row keeps its bits at every position of a ``width``-row CPU call: 1 or a multiple of 8.

    As measured (module docstring). For messages only: it picks advice, never a width.
    """
    return width == 1 or (width > 0 and width % 8 == 0)


def width_advice(width: int | None) -> str:
    """What to do when rows at call width ``width`` (None: not a torch policy's padded calls) differ between calls.

    Why one function: ``check-policy`` and ``eval``'s warning used to advise "--call-width >= 1, the default" and
    "--call-width 0?" to a run at width 3, which is >= 1 and not 0; the cause there is the row's position.
    """
    if width is None:
        return ("pad calls to a fixed width of 1 or a multiple of 8 (lerobench.policies.width.call_at_width) or "
                "compute rows one at a time")
    if width == 0:
        return ("calls are unpadded (--call-width 0), so a row's bits follow the call's shape: drop --call-width 0 "
                f"(default {DEFAULT_CALL_WIDTH['cpu']} on cpu, {DEFAULT_CALL_WIDTH['cuda']} on cuda)")
    if not keeps_positions(width):
        return (f"at --call-width {width} a row's bits depend on its position in the call (on the CPU, widths that "
                f"are not 1 or a multiple of 8 do): use --call-width {DEFAULT_CALL_WIDTH['cpu']} (the cpu default) "
                "or 1")
    return (f"rows differ even at the fixed --call-width {width}: the policy computes some rows outside the padded "
            "call (another batched path?); compute each row from its own inputs")
