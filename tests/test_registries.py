"""Executors and backends are declared, not probed: one registry entry each, checked when loaded."""

from __future__ import annotations

import sys
import types

import pytest

from lerobench.core.executors import CHOICES, EXECUTORS
from lerobench.errors import ConfigError
from lerobench.plan.planner import EXECUTORS as PLAN_CHOICES
from lerobench.suite.registry import get_backend


def test_every_executor_entry_loads_a_class_with_its_name_a_factory_and_run():
    assert PLAN_CHOICES == CHOICES == ("auto", "inline", "vector", "processes", "ray")
    for name, entry in EXECUTORS.items():
        cls = entry.load()
        assert cls.name == name == entry.name and callable(cls.create) and callable(cls.run)
    assert [n for n, e in EXECUTORS.items() if e.own_policy] == ["processes", "ray"]
    assert [n for n, e in EXECUTORS.items() if e.batched] == ["inline", "vector"]
    assert [n for n, e in EXECUTORS.items() if e.task_threads] == ["vector"]
    assert [n for n, e in EXECUTORS.items() if not e.step_timeouts] == ["inline"]


def test_a_backend_that_does_not_declare_its_facts_is_refused_naming_them(monkeypatch):
    module = types.ModuleType("half_backend")

    class Half:  # the protocol's required members, without the optional facts of BackendDefaults
        name, extra, state_dim, action_dim = "half", "half", 1, 1

        def check_installed(self): ...

        def make_simulator(self, spec): ...

    module.BACKEND = Half()
    monkeypatch.setitem(sys.modules, "half_backend", module)
    with pytest.raises(ConfigError, match="does not declare n_init_states, max_episode_steps, unrendered_step_ms, "
                                          "control_fps, preload_modules, packages, missing_assets, check_suite, "
                                          "task_template, make_template, from_template, dataset_layout, "
                                          "dataset_attrs, action_bounds, perturbations, experts, camera_aliases, "
                                              "partial_states: "
                                          "subclass "
                                          "lerobench.envs.base.BackendDefaults"):
        get_backend("half_backend:BACKEND")
    assert get_backend("metaworld").packages == ("mujoco", "metaworld", "gymnasium")
