"""Multi-trial episodes (--trials): identical starts on both simulators, rollout semantics, aggregation, ML suites."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from lerobench.envs.base import EnvSpec, LazyTaskEnv
from lerobench.registry import load_suite
from lerobench.results import EpisodeRecord, summarize
from lerobench.runner import Evaluation, RunSettings
from lerobench.stats import compare_paired
from lerobench.trials import outcomes, trial_summary, whole_episodes

os.environ.setdefault("MUJOCO_GL", "egl")


def _spec(suite_name: str, backend_name: str, cameras: tuple[str, ...], max_steps: int) -> tuple[EnvSpec, object]:
    from lerobench.registry import get_backend

    suite = load_suite(suite_name)
    backend = get_backend(suite.backend)
    protocol = replace(suite.protocol(), max_steps=max_steps, image_size=(64, 64))
    spec = EnvSpec(suite=suite.name, backend=suite.backend, task=suite.tasks[0], protocol=protocol, seed=3,
                   state_dim=backend.state_dim, action_dim=backend.action_dim, cameras=cameras,
                   backend_options=suite.backend_options)
    return spec, backend


def _trials_start_identically(spec: EnvSpec, backend: object, episode: int) -> None:
    """Reset to (episode, trial 0), act, reset to (episode, trial 1): the first observations match bit for bit."""
    env = LazyTaskEnv(spec, backend)
    try:
        rng = np.random.default_rng(0)
        first = None
        for trial in range(3):
            obs, info = env.reset(options={"episodes": [episode], "trials": [trial]})
            assert "episode_end" not in info
            snapshot = {"state": obs["state"].copy(), **{c: im.copy() for c, im in obs.get("images", {}).items()}}
            if first is None:
                first = snapshot
            else:
                assert snapshot.keys() == first.keys()
                for key, value in snapshot.items():
                    assert value.dtype == first[key].dtype
                    assert np.array_equal(value, first[key]), f"trial {trial}: {key} differs from trial 0"
            moved = obs["state"].copy()
            for _ in range(spec.protocol.max_steps):  # a different attempt each trial, then back to the start
                obs, _, terminated, truncated, info = env.step(rng.uniform(-1, 1, spec.action_dim))
                if terminated or truncated:
                    assert info["episode_end"]["trial"] == trial
                    break
            assert not np.array_equal(obs["state"], moved), "the trial did not move the robot"
    finally:
        env.close()


def test_metaworld_trials_start_identically_state_and_images():
    pytest.importorskip("metaworld")
    spec, backend = _spec("metaworld_ml1_reach", "metaworld", ("corner2", "topview"), max_steps=15)
    _trials_start_identically(spec, backend, episode=4)


def test_libero_trials_start_identically_state_and_images():
    pytest.importorskip("libero.libero")
    spec, backend = _spec("smoke_libero", "libero", ("agentview", "robot0_eye_in_hand"), max_steps=5)
    _trials_start_identically(spec, backend, episode=2)
