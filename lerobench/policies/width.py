"""Fixed-width policy calls: every call to a batched model has the same tensor shape, whatever the rows.

Why: a torch model's output for one row depends on how many rows share the call. Matmul and convolution
kernels pick their blocking and reduction order by the batch shape, so a row computed in a call of 3 rows
differs from the same row in a call of 4 by ~1e-7..1e-5, and closed-loop contact dynamics amplify that
into another trajectory. With continuous batching the rows per call depend on timing and the auto batch
size on the machine's cores, so without a fixed shape the same command gives different per-episode
outcomes on a laptop, in CI and on a 16-core box.

What holds on the CPU (measured, ``benchmarks/call_shape.py``; 2-core x86, torch 2.13): no two call widths agree
with width 1. A row computed in a call of w rows differs from the same row computed alone at every w = 2..16 (the
MLP by up to 6.7e-8, ACT 1.2e-6; diffusion, w = 2..4 tried, 1.9e-6), and at w = 2, 3, 5..7 and 9..11 a row's bits
also depend on its position in the call. A row's bits also depended on the intra-op thread count (ACT: 9.8e-7
between 1 and 2 threads), so a count that follows the machine's cores broke "same numbers on every machine". A
set of equivalent widths therefore collapses to one width, and only width 1 needs no padding. So the CPU default
is **one-row calls**, spread over a pool of threads sharing the usable cores (``call_pool``): a lone row gets every
core for its intra-op threads, rows side by side one each. The kernels inside a call do not follow the thread
count (``kernels.py``), and a count is used only after it was checked on twins of the policy to give one
thread's bits (``call_threads.py``), so a row's bits depend on nothing but the row, whatever the batch, the
schedule or the machine's core count. ``--call-width W`` > 1 keeps
the padded shape: the rows are split into calls of exactly W rows, the last one padded with copies of its last row
(``slot`` -1, ``padding`` True; their outputs are discarded); those calls run on the pool too. On CUDA the default
stays 16 padded rows: there too no width equals width 1, and a call of 16 rows cost at most 1.4x a call of one
(H200, ``benchmarks/cuda_call_shape.py``), where 16 one-row calls cost 12x.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from lerobench.errors import ConfigError
from lerobench.policies.call_threads import Compute, ThreadPlan, check_counts, observation_signature, one_thread

DEFAULT_CALL_WIDTH = {"cpu": 1, "cuda": 16}
"""Call width per device kind when ``--call-width`` is not given (why these: docs/policies.md#call-width,
measured by ``benchmarks/call_shape.py``). Never a function of the core count: the same command gives the
same numbers on every machine with the same device kind."""

CALL_INTRA_OP_THREADS = 1
"""The intra-op thread count whose bits every CPU model call reproduces (others only where checked equal)."""

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


NO_TWIN = "the policy gave no twin to check other thread counts on: calls run on one thread"


class CallKey:
    """A model's identity for the call pool's thread checks; shared by a policy's shallow copies (one check)."""


class CallPool:
    """Threads that run CPU model calls, with a budget of cores; one pool per process.

    Why: a row is computed alone (one-row calls) and the cores are shared among the calls in flight. A call
    takes ``T`` cores from the budget for its intra-op threads: all of them when it is the only call (batch 1),
    one each when rows run side by side. ``T`` is always a count ``policies/call_threads.py`` checked on the
    model to give one thread's bits, so the budget moves only the speed. Shared by every policy (and every
    ``--parallel-tasks`` copy) in the process, so tasks never oversubscribe the cores; made again after a fork.
    """

    def __init__(self, threads: int):
        self.threads = threads
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="lerobench-call")
        self._budget = threading.Condition()
        self._free = threads
        self._demand = 0
        self._draining = False
        self._plans: weakref.WeakKeyDictionary[CallKey, dict[tuple[Any, ...], ThreadPlan]] = \
            weakref.WeakKeyDictionary()
        self._checking = threading.Lock()
        self.used: Counter[int] = Counter()
        """Model calls per intra-op thread count, this process."""

    def close(self) -> None:
        """Let the pool's threads end once idle (a pool replaced by one of another size)."""
        self._executor.shutdown(wait=False)

    def known(self, key: CallKey | None, observation: dict[str, Any]) -> ThreadPlan | None:
        """The plan already decided for ``key``'s calls of this shape (None: not checked yet)."""
        if key is None:
            return one_thread(NO_TWIN)
        with self._checking:
            return self._plans.get(key, {}).get(observation_signature(observation))

    def plan(self, key: CallKey | None, make_compute: Callable[[], Compute] | None, observation: dict[str, Any],
             texts: list[str], reference: np.ndarray | None = None) -> ThreadPlan:
        """The thread counts ``key``'s calls of this shape may use: checked once, on twins (``make_compute``).

        ``reference``: the real call's one-thread output for ``observation``, if it ran already (saves a call).
        """
        if key is None:
            return one_thread(NO_TWIN)
        signature = observation_signature(observation)
        with self._checking:
            plans = self._plans.setdefault(key, {})
            if signature not in plans:
                if make_compute is None:
                    return one_thread(NO_TWIN)
                from lerobench.policies.kernels import mkl_mode

                mkl = mkl_mode()
                plans[signature] = self._executor.submit(self._alone, lambda: check_counts(
                    make_compute, observation, texts, self.threads, _inference, mkl, reference)).result()
            return plans[signature]

    def _alone(self, job: Callable[[], ThreadPlan]) -> ThreadPlan:
        """``job`` holding every core (the check's counts must not share them with other calls)."""
        with self._budget:
            self._draining = True
            while self._free < self.threads:
                self._budget.wait()
            self._free = 0
        try:
            return job()
        finally:
            with self._budget:
                self._free, self._draining = self.threads, False
                self._budget.notify_all()

    def _take(self, plan: ThreadPlan) -> int:
        with self._budget:
            while self._free == 0 or self._draining:
                self._budget.wait()
            threads = plan.best(min(self._free, max(1, self.threads // max(1, self._demand))))
            self._free -= threads
            self.used[threads] += 1
            return threads

    def _give(self, threads: int, done: int) -> None:
        with self._budget:
            self._free += threads
            self._demand -= done
            self._budget.notify_all()

    def _call(self, compute: Compute, observation: dict[str, Any], texts: list[str], plan: ThreadPlan,
              done: int) -> np.ndarray:
        threads = self._take(plan)
        try:
            return _inference(compute, observation, texts, threads)
        finally:
            self._give(threads, done)

    def _in_turn(self, compute: Compute, calls: list[tuple[dict[str, Any], list[str]]],
                 plan: ThreadPlan) -> list[np.ndarray]:
        try:
            return [self._call(compute, obs, texts, plan, 0) for obs, texts in calls]
        finally:
            self._give(0, 1)

    def run(self, compute: Compute, calls: list[tuple[dict[str, Any], list[str]]], parallel: bool,
            plan: ThreadPlan | None = None) -> list[np.ndarray]:
        """``compute`` on each call (in parallel if ``parallel``, else one after another on one pool thread)."""
        plan = plan or one_thread("no plan")
        if parallel and len(calls) > 1:
            with self._budget:
                self._demand += len(calls)
            futures = [self._executor.submit(self._call, compute, obs, texts, plan, 1) for obs, texts in calls]
            return [f.result() for f in futures]
        with self._budget:
            self._demand += 1
        return self._executor.submit(self._in_turn, compute, calls, plan).result()


def _inference(compute: Compute, observation: dict[str, Any], texts: list[str], threads: int) -> np.ndarray:
    import torch

    from lerobench.policies.kernels import pinned_kernels

    # OpenMP's and MKL's counts are per OS thread here, but set on every call: another count may have run last
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    with torch.inference_mode(), pinned_kernels():  # both thread-local: the caller's do not reach a pool thread
        return np.asarray(compute(observation, texts))


_POOL: tuple[int, CallPool] | None = None
_POOL_LOCK = threading.Lock()
_CORES: tuple[int, int] | None = None
"""(pid, cores) the run's compute budget gave this process's pool (``use_call_cores``); None: ``call_cores()``."""


def call_cores() -> int:
    """The call pool's cores: the run's budget (``use_call_cores``), else ``LEROBENCH_CALL_CORES``, else every core."""
    from lerobench import environment
    from lerobench.system import usable_cores

    if _CORES is not None and _CORES[0] == os.getpid():
        return _CORES[1]
    given = environment.call_cores()
    return given if given is not None else usable_cores()


def use_call_cores(cores: int | None) -> int | None:
    """Size this process's call pool to ``cores`` (None: back to the default); returns the previous setting.

    Set by the run's compute budget (``execution/compute.py``): in the driver for the run (put back after it),
    in an episode worker at its start. The pool is made again only when its size changes, so the thread
    checks it keeps are not lost between runs of one size.
    """
    global _CORES
    with _POOL_LOCK:
        previous = _CORES[1] if _CORES is not None and _CORES[0] == os.getpid() else None
        _CORES = (os.getpid(), cores) if cores is not None else None
        return previous


@contextlib.contextmanager
def call_cores_for_run(cores: int | None) -> Iterator[None]:
    """``use_call_cores(cores)`` for a block, then the previous setting (a run inside a user's process)."""
    previous = use_call_cores(cores)
    try:
        yield
    finally:
        use_call_cores(previous)


def call_pool() -> CallPool:
    """This process's ``CallPool`` (made on first use, again after a fork or when its budget changes)."""
    global _POOL
    cores = call_cores()
    with _POOL_LOCK:
        if _POOL is None or _POOL[0] != os.getpid() or _POOL[1].threads != cores:
            if _POOL is not None and _POOL[0] == os.getpid():
                _POOL[1].close()  # resized between runs: its idle threads go
            _POOL = (os.getpid(), CallPool(cores))
        return _POOL[1]


def call_at_width(compute: Compute, observation: dict[str, Any], descriptions: list[str], width: int,
                  pool: CallPool | None = None, parallel: bool = False, key: CallKey | None = None,
                  twin: Callable[[], Compute] | None = None) -> np.ndarray:
    """``compute`` over calls of exactly ``width`` rows (0: one call as given); the real rows' outputs, in order.

    With ``pool`` (CPU devices) the calls run on its threads, side by side when ``parallel`` (the policy's
    calls on disjoint rows may overlap: per-row state only) and otherwise one after another, each with the
    intra-op threads the pool's budget gives it among those checked for ``key`` on twins (``twin()`` returns
    a fresh twin's ``compute``; without one, one thread). Without a pool (CUDA) in the calling thread.
    Unpadded calls (width 0) always run in the calling thread, at the process's thread count, as before
    there was a call width.
    """
    n = len(observation["state"])
    if width <= 0 or n == 0:  # ``padding`` is always there (none of these rows pads): a policy may read it
        return compute({**observation, "padding": np.zeros(n, dtype=bool)}, list(descriptions))
    if n > width and "slot" not in observation:  # rows keep their key (``row_ids``: the position) when split
        observation = {**observation, "slot": np.arange(n)}
    calls: list[tuple[dict[str, Any], list[str]]] = []
    sizes: list[int] = []
    for start in range(0, n, width):
        index = np.arange(start, min(start + width, n))
        part = take_rows(observation, index) if (start, len(index)) != (0, n) else observation
        calls.append(pad_rows(part, [descriptions[i] for i in index.tolist()], width))
        sizes.append(len(index))
    if pool is not None:
        plan = pool.known(key, calls[0][0])
        if plan is None and twin is not None:  # the first call runs on one thread: the check's reference
            outs = pool.run(compute, calls, parallel, one_thread("checking"))
            pool.plan(key, twin, *calls[0], reference=outs[0])
        else:
            outs = pool.run(compute, calls, parallel, plan)
    else:
        outs = [np.asarray(compute(obs, texts)) for obs, texts in calls]
    parts = [out[:size] for out, size in zip(outs, sizes, strict=True)]
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def thread_plan(key: CallKey | None) -> dict[str, Any] | None:
    """What this process's call pool decided for ``key``'s calls (the first shape checked), for ``results.json``."""
    if key is None or _POOL is None or _POOL[0] != os.getpid():
        return None
    plans = _POOL[1]._plans.get(key)
    return next(iter(plans.values())).record() if plans else None


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
                f"or {8 if DEFAULT_CALL_WIDTH['cpu'] == 1 else 1}")
    return (f"rows differ even at the fixed --call-width {width}: the policy computes some rows outside the padded "
            "call (another batched path?); compute each row from its own inputs")
