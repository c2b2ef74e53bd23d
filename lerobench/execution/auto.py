"""Picks the executor and its size from the plan, the policy and the machine, with a sentence saying why.

Rules, in order (``--executor`` and ``--batch-size`` override them):

1. ``--batch-size``, ``--record``, ``--rerun``, ``--parallel-tasks`` or ``--episode-timeout`` keep the shared policy
   (rule 3): trajectories go through the driver's writer; task threads and step timeouts are features of
   vector workers.
2. A policy that is cheap to replicate (it declares ``PolicyTraits(replicable=True)``: built-in baselines and
   experts, ``ws://`` clients) runs on process-parallel episode workers, one per usable core, capped
   by the todo episodes and by memory / (backend's per-worker memory): no per-step IPC at all. Unless the
   run is too short to pay for the workers' start: a local policy on a state-only run whose whole
   simulation (todo episodes x trials x max steps x the backend's unrendered step cost) would save less than
   ``WORKER_START_S`` by being split stays in this process (rule 3's inline).
3. Otherwise (a torch model: one copy, batched forward passes) the vector executor, whose batch comes
   from cores and memory; when a state-only step is cheaper than a round trip to a worker, that batch of
   envs is stepped in this process (inline) instead.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from lerobench.envs import worker_memory
from lerobench.errors import ConfigError, LerobenchError
from lerobench.execution.base import ExecutionChoice
from lerobench.plan.planner import RunPlan
from lerobench.policies.base import policy_traits
from lerobench.system import available_memory_mb, usable_cores

if TYPE_CHECKING:
    from lerobench.policies.base import Policy

IPC_STEP_MS = 1.0
"""Measured cost of one vector step through worker processes on a 2-core box (pipes + shared memory)."""

WORKER_START_S = 1.2
"""Measured: what episode worker processes add to a run's start-up over stepping in this process (forkserver,
imports, a Meta-World worker's first step: 1.4-1.6 s against 0.3 s inline on a 2-core box)."""


def too_short_for_workers(plan: RunPlan, policy: Policy, cameras: tuple[str, ...], todo: int, workers: int) -> bool:
    """Whether splitting the run over ``workers`` processes would save less time than starting them costs.

    Only judged where the cost is known: state-only steps of a backend that declares their cost, and a policy
    computing locally (``concurrent_calls`` 1; a remote one's latency is unknown and workers overlap it).
    """
    step_ms = plan.unrendered_step_ms
    if step_ms is None or plan.renders(cameras) or policy_traits(policy).concurrent_calls != 1 or workers < 2:
        return False
    s = plan.settings
    work_s = todo * s.trials_per_episode * plan.protocol.max_steps * step_ms / 1000
    return work_s * (1 - 1 / workers) < WORKER_START_S


def replicable(policy: Policy) -> bool:
    """Whether building one policy per worker is cheap and harmless (the policy declares it)."""
    return policy_traits(policy).replicable


def choose(plan: RunPlan, policy: Policy, cameras: tuple[str, ...], todo: int, *, cores: int | None = None,
           memory_mb: int | None = None, probe: bool = True, in_memory: bool = False) -> ExecutionChoice:
    """The executor for ``todo`` remaining episodes of ``plan`` on this machine.

    ``in_memory``: the policy is an object handed to ``lerobench.evaluate``, which worker processes cannot build
    from a spec: only the executors that run the policy in this process (inline, vector) are chosen.
    """
    s = plan.settings
    cores = cores if cores is not None else usable_cores(probe=probe)
    if memory_mb is None and probe:
        memory_mb = available_memory_mb()
    per_worker, left, _ = worker_budget(plan, cameras, memory_mb, shared=False)
    by_memory = None if left is None else 1 + left // max(1, per_worker)
    workers = min(cores, max(1, todo), by_memory or cores)
    executor = s.executor
    shared_only = (s.batch_size > 0 or s.record != "none" or s.rerun or s.parallel_tasks > 1
                   or s.episode_timeout is not None)
    if executor in ("processes", "ray") and in_memory:
        raise ConfigError(f"executor {executor!r} builds the policy from its spec in every worker; an in-memory "
                          "policy runs in this process: use executor 'auto', 'vector' or 'inline', or pass a spec")
    would_replicate = executor == "auto" and not shared_only and replicable(policy) and workers > 1 and not in_memory
    short = would_replicate and too_short_for_workers(plan, policy, cameras, todo, workers)
    if executor in ("processes", "ray") or (would_replicate and not short):
        n = min(s.workers or workers, max(1, todo)) if executor != "ray" else s.workers
        limits = f"{cores} usable cores, {todo} episodes to run"
        if memory_mb is not None:
            limits += f", {memory_mb} MB available / {per_worker} MB per worker"
        name = executor if executor != "auto" else "processes"
        if s.workers:
            how = "--workers"
        elif executor == "ray":
            how = "as many at once as the Ray cluster schedules, one CPU each"
        else:
            how = f"min of {limits}"
        why = "--executor" if s.executor != "auto" else (
            f"policy {s.policy!r} is cheap to replicate: each worker runs whole episodes with its own copy, "
            f"no per-step IPC")
        size = (f"{n} worker" + "s" * (n != 1)) if n else "Ray tasks"
        return ExecutionChoice(name, f"executor {name} ({why}): {size}, {how}", workers=n)
    chosen = _vector(plan, cameras, cores, memory_mb, forced=executor)
    if short:
        chosen = replace(chosen, reason=f"{chosen.reason}; not episode workers: this run is too short to pay for "
                                        f"starting them (~{WORKER_START_S} s)")
    return chosen


def batched_choice(plan: RunPlan, cameras: tuple[str, ...]) -> ExecutionChoice:
    """Rule 3's choice on this machine for a policy reading ``cameras`` (what ``choose`` gives a shared policy)."""
    return _vector(plan, cameras, usable_cores(), available_memory_mb(), forced=plan.settings.executor)


def rendered_cameras(plan: RunPlan, cameras: tuple[str, ...]) -> int:
    """How many cameras a worker renders: the policy's, and the video camera when videos are recorded."""
    video = plan.video_camera
    return len(set(cameras) | ({video} if video else set()))


def worker_budget(plan: RunPlan, cameras: tuple[str, ...], memory_mb: int | None,
                  shared: bool | None) -> tuple[int, int | None, str]:
    """(MB per worker, memory left after the first worker's extra, why), measured for this backend and cameras.

    ``shared`` None: whether this backend's vector workers fork from a task template (``envs/template.py``).
    A backend with no measurement budgets the suite's ``worker_memory_mb`` (``envs/worker_memory.py``).
    """
    shared = _shares(plan) if shared is None else shared
    return worker_memory.budget(plan.suite.backend, rendered_cameras(plan, cameras), memory_mb, shared,
                                plan.suite.worker_memory_mb)


def _shares(plan: RunPlan) -> bool:
    """Whether this backend's vector workers fork from a task template (``envs/template.py``)."""
    from lerobench.envs import template
    from lerobench.suite.registry import get_backend

    try:
        return get_backend(plan.suite.backend).task_template and template.sharing(plan.settings.share_task)
    except LerobenchError:
        return False


def _vector(plan: RunPlan, cameras: tuple[str, ...], cores: int, memory_mb: int | None,
            forced: str) -> ExecutionChoice:
    """Today's batch rule: cores and memory, but in-process when a state-only step is cheaper than IPC."""
    s = plan.settings
    n = plan.episodes_per_task
    parallel = min(s.parallel_tasks, len(s.suite.tasks))
    if forced == "inline":
        batch = min(max(1, s.batch_size), n)
        return ExecutionChoice("inline", f"executor inline: batch size {batch} in this process (--executor)",
                               batch_size=batch)
    if s.batch_size > 0:
        batch, how = min(s.batch_size, n), f"batch size {min(s.batch_size, n)} (--batch-size)"
    else:
        batch, how = worker_memory.auto_batch(n, s.suite.backend, rendered_cameras(plan, cameras), cores, memory_mb,
                                              _shares(plan), s.suite.worker_memory_mb)
        step_ms = plan.unrendered_step_ms
        if (forced == "auto" and parallel == 1 and s.episode_timeout is None and not plan.renders(cameras)
                and step_ms is not None and step_ms < IPC_STEP_MS):
            return ExecutionChoice("inline", (
                f"executor inline: {how}, stepped in this process: a state-only {s.suite.backend} step "
                f"({step_ms} ms) costs less than handing it to a worker process (~{IPC_STEP_MS} ms) "
                f"(--executor vector for worker processes)"), batch_size=batch)
    per_task = max(1, batch // parallel)
    name = "inline" if per_task == 1 and parallel == 1 and batch == 1 else "vector"
    extra = f", {parallel} tasks in parallel x {per_task} envs" if parallel > 1 else ""
    return ExecutionChoice(name, f"executor {name}: {how}{extra}", batch_size=per_task, parallel_tasks=parallel)
