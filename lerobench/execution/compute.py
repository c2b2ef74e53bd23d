"""The compute budget: the share of the machine a run uses, decided once and handed down (issue 47).

Why one object: the cores a run's processes may use were decided in four places (an environment variable set
here, a process-global pool sized from another there), and what a run used was written nowhere. Now the runner
builds one ``ComputeBudget`` from the executor it chose, the machine and the variables the user set; the
executors hand its numbers to where they act, each in its own process:

- the driver's policy call pool is sized for the run and put back after it (``policies/width.py``);
- an episode worker (processes, Ray) sets its render threads and its call pool at its own start
  (``enter_worker``), never by changing the driver's environment;
- a vector env's worker sets its render threads at its start (``envs/vector.py``).

MKL's reproducible mode is read, not set, here: the ``lerobench`` command asks for it at its start
(``system.strict_mkl_default``), ``lerobench.evaluate`` leaves the caller's process as it is. ``record`` is
results.json's ``compute`` block (docs/results.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lerobench import environment


@dataclass(frozen=True)
class ComputeBudget:
    """What a run's processes may use; built by ``budget_for``, recorded in results.json as ``compute``."""

    usable_cores: int
    """Cores this process may run on (CPU affinity and cgroup quota)."""
    executor: str
    """The executor that runs the episodes (inline, vector, processes, ray)."""
    env_processes: int
    """Simulator processes per task running at once (0: the envs step in the driver)."""
    render_threads: int | None
    """Mesa llvmpipe threads each simulator process renders with (``LP_NUM_THREADS``); None: Mesa's default."""
    driver_call_cores: int | None
    """Cores of the driver's policy call pool (None: the driver runs no policy; each worker has its own)."""
    worker_call_cores: int | None
    """Cores of each episode worker's call pool (processes, Ray; None: no worker runs a policy)."""
    mkl_cbwr: str | None
    """``MKL_CBWR`` in the driver's environment (workers start from it): MKL's reproducibility mode."""
    user_set: dict[str, str]
    """The budget's variables the user set, which win over the shares above."""

    def enter_worker(self) -> None:
        """At an episode worker's start: its render threads and its call pool, from this budget (its process)."""
        from lerobench.policies.width import use_call_cores

        if self.render_threads is not None:
            environment.set_default(environment.RENDER_THREADS, str(self.render_threads))
        use_call_cores(self.worker_call_cores)

    def record(self) -> dict[str, Any]:
        """results.json's ``compute`` block."""
        return {"usable_cores": self.usable_cores, "executor": self.executor, "env_processes": self.env_processes,
                "render_threads": self.render_threads, "driver_call_cores": self.driver_call_cores,
                "worker_call_cores": self.worker_call_cores, "mkl_cbwr": self.mkl_cbwr,
                "user_set": dict(self.user_set)}


def _user_int(name: str) -> int | None:
    value = environment.get(name)
    return int(value) if value is not None and value.isdigit() and int(value) > 0 else None


def budget_for(executor: str, batch_size: int, workers: int, own_policy: bool, cores: int) -> ComputeBudget:
    """The budget of a run on ``executor`` with ``batch_size`` envs per task or ``workers`` episode workers.

    The shares, on ``cores`` usable cores: episode workers split them evenly (render threads and call cores
    alike: two workers that each believed they owned the box would run four intra-op threads on two cores);
    Ray workers hold one CPU each (``num_cpus=1``); a vector env's worker processes split them for rendering
    while the driver's call pool keeps every core (the workers wait for its actions). A value the user set
    (``LP_NUM_THREADS``, ``LEROBENCH_CALL_CORES``) wins.
    """
    user = {name: value for name in (environment.RENDER_THREADS, environment.CALL_CORES)
            if (value := environment.get(name)) is not None}
    user_render, user_call = _user_int(environment.RENDER_THREADS), _user_int(environment.CALL_CORES)
    if own_policy:  # processes, ray: each worker runs its episodes and its own policy
        share = 1 if executor == "ray" else max(1, cores // max(1, workers))
        env_processes = workers
        render = user_render or (None if executor == "ray" else share)
        driver_call, worker_call = None, user_call or share
    else:  # inline, vector: the driver runs the policy for every env
        env_processes = 0 if executor == "inline" or batch_size == 1 else batch_size
        render = user_render or (max(1, cores // batch_size) if env_processes else None)
        driver_call, worker_call = user_call or cores, None
    return ComputeBudget(usable_cores=cores, executor=executor, env_processes=env_processes, render_threads=render,
                         driver_call_cores=driver_call, worker_call_cores=worker_call,
                         mkl_cbwr=environment.get(environment.MKL_CBWR), user_set=user)


def standalone_budget(executor: str, workers: int) -> ComputeBudget:
    """The budget of an episode-worker executor built outside a run (a test, a script): this machine's cores."""
    from lerobench.system import usable_cores

    return budget_for(executor, 1, workers, True, usable_cores())
