"""The vector envs' worker methods (envs/vector.py), the one place gymnasium's worker internals are read."""

from __future__ import annotations

import multiprocessing

import numpy as np
import pytest

from lerobench.envs.base import EnvSpec, env_action
from lerobench.envs.vector import InProcessVectorEnv, WorkerVectorEnv, make_vector_env
from lerobench.suite.registry import load_suite


def _spec() -> EnvSpec:
    suite = load_suite("smoke")
    from dataclasses import replace

    return EnvSpec(suite=suite.name, backend=suite.backend, task=suite.tasks[0],
                   protocol=replace(suite.protocol(), max_steps=5), seed=0, state_dim=39, action_dim=4)


def test_a_dead_worker_is_found_by_slot_and_the_rest_shut_down():
    pytest.importorskip("metaworld")
    venv = make_vector_env(_spec(), 2)
    assert isinstance(venv, WorkerVectorEnv)
    try:
        venv.reset(options={"episodes": [0, 1]})
        step = env_action(np.zeros((2, 4), np.float32), np.ones(2))
        venv.step_within(step, timeout=60)
        assert venv.failed_slots([0, 1], hung=False) == [0, 1]  # none dead: the culprit is unclear, so all
        victim = venv.processes[1]
        victim.kill()
        victim.join(5)
        assert venv.failed_slots([0, 1], hung=False) == [1]
    finally:
        venv.close_after_failure()
    assert not any(p.is_alive() for p in multiprocessing.active_children() if p.name.startswith("Worker"))


def test_in_process_envs_have_the_same_methods():
    pytest.importorskip("metaworld")
    venv = make_vector_env(_spec(), 1)
    assert isinstance(venv, InProcessVectorEnv)
    venv.reset(options={"episodes": [0]})
    obs, *_ = venv.step_within(env_action(np.zeros((1, 4), np.float32), np.ones(1)), timeout=1)
    assert obs["state"].shape == (1, 39) and venv.failed_slots([0], hung=True) == [0]
    venv.close_after_failure()
