"""Workers forked from a task's template process (issue 30) run the same episodes, pixel for pixel."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest

os.environ.setdefault("MUJOCO_GL", "egl")

from lerobench import environment  # noqa: E402
from lerobench.envs import template  # noqa: E402
from lerobench.envs.base import EnvSpec, env_action  # noqa: E402
from lerobench.envs.vector import make_vector_env  # noqa: E402
from lerobench.suite.registry import get_backend, load_suite  # noqa: E402

STEPS = 6

pytestmark = pytest.mark.sim  # every test here builds a simulator


def _spec(cameras: tuple[str, ...], suite_name: str = "libero_spatial") -> EnvSpec:
    suite = load_suite(suite_name)
    backend = get_backend(suite.backend)
    protocol = replace(suite.protocol(), image_size=(64, 64), max_steps=STEPS)
    return EnvSpec(suite=suite.name, backend=suite.backend, task=suite.tasks[0], protocol=protocol, seed=3,
                   state_dim=backend.state_dim, action_dim=backend.action_dim, cameras=cameras,
                   backend_options=suite.backend_options)


def _episodes(spec: EnvSpec, share: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list, list]:
    """Two workers, episodes 1 and 0, a few random steps reading the cameras at every other step.

    One render thread each, so that LIBERO's workers forked from the template render with its GL context
    (``template.shares_renderer``), which the other run's workers make for themselves.
    """
    monkeypatch.delenv(template.ENV_OVERRIDE, raising=False)
    env = make_vector_env(spec, 2, in_process=False, share_task=share, render_threads=1)
    try:
        assert (env._template is not None) == share
        obs, _ = env.reset(options={"episodes": [1, 0]})
        seen = [_copy(obs)]
        rng = np.random.default_rng(0)
        ends: list = [None, None]
        for k in range(STEPS):
            action = rng.uniform(-1, 1, (2, spec.action_dim)).astype(np.float32)
            obs, _, _, _, info = env.step(env_action(action, np.full(2, k % 2 == 0)))
            seen.append(_copy(obs))
            for i in np.flatnonzero(info.get("_episode_end", [])):
                ends[i] = {key: v[i] for key, v in info["episode_end"].items() if not key.startswith(("elapsed", "_"))}
    finally:
        env.close()
    return seen, ends


def _copy(obs):
    return {k: _copy(v) for k, v in obs.items()} if isinstance(obs, dict) else np.array(obs, copy=True)


CASES = {"libero": ("libero.libero", "libero_spatial", ("agentview", "robot0_eye_in_hand")),
         "metaworld": ("metaworld", "metaworld_mt10", ("corner2",))}


@pytest.mark.parametrize("case", sorted(CASES))
def test_workers_forked_from_the_template_see_what_workers_that_built_the_task_see(case, monkeypatch):
    module, suite, cameras = CASES[case]
    pytest.importorskip(module)
    spec = _spec(cameras, suite)
    before, before_ends = _episodes(spec, False, monkeypatch)
    after, after_ends = _episodes(spec, True, monkeypatch)
    assert before_ends == after_ends and all(e and e["start_digest"] for e in after_ends)
    for k, (a, b) in enumerate(zip(before, after, strict=True)):
        np.testing.assert_array_equal(a["state"], b["state"], err_msg=f"state after step {k}")
        for cam in spec.cameras:
            assert a["images"][cam].any(), "the cameras must have drawn something"
            np.testing.assert_array_equal(a["images"][cam], b["images"][cam], err_msg=f"{cam} after step {k}")
    assert not template._servers, "closing the vector env stops its template process"


def _private_mb(pid: int) -> float:
    """What a process wrote to its own pages (copy-on-write copies included), in MB."""
    rollup = open(f"/proc/{pid}/smaps_rollup").read().split("\n")
    return sum(int(line.split()[1]) for line in rollup if line.startswith("Private_Dirty:")) / 1024


def _gl_run(spec: EnvSpec, render_threads: int) -> tuple[list, bool, bool, float]:
    """Images of a reset and two steps; whether the template and a worker loaded Mesa's driver; a worker's own MB."""
    env = make_vector_env(spec, 2, in_process=False, share_task=True, render_threads=render_threads)
    try:
        obs, _ = env.reset(options={"episodes": [0, 1]})
        images = [_copy(obs["images"])]
        for _ in range(2):
            obs, *_ = env.step(env_action(np.full((2, spec.action_dim), 0.3, np.float32), np.ones(2, bool)))
            images.append(_copy(obs["images"]))
        template_maps = open(f"/proc/{env._template.server._forkserver_pid}/maps").read()
        worker_maps = open(f"/proc/{env.processes[0].pid}/maps").read()
        private = _private_mb(env.processes[0].pid)
    finally:
        env.close()
    return images, "swrast_dri" in template_maps, "swrast_dri" in worker_maps, private


@pytest.mark.may_skip("GL here may be a GPU's", "not Mesa's software GL")  # the machine's GL decides
def test_the_template_makes_the_gl_context_only_for_workers_that_share_it(monkeypatch):
    """Mesa's driver (swrast_dri.so) is loaded when a GL context is made. Workers rendering with several threads
    make their own (the template never loads it); with one thread each they draw with the template's, the same
    pixels, and write far less memory of their own (Mesa's texture copies and shaders stay shared)."""
    pytest.importorskip("libero.libero")
    monkeypatch.delenv(template.ENV_OVERRIDE, raising=False)
    monkeypatch.delenv(environment.SHARE_RENDERER, raising=False)
    if not template.software_gl_only():
        pytest.skip("GL here may be a GPU's (or MUJOCO_GL is not egl/osmesa): workers never share the renderer")
    spec = _spec(("agentview",))
    own, own_template_gl, worker_gl, own_private = _gl_run(spec, render_threads=2)
    if not worker_gl:
        pytest.skip("not Mesa's software GL: its driver's file name is unknown here")
    shared, shared_template_gl, _, shared_private = _gl_run(spec, render_threads=1)
    assert not own_template_gl and shared_template_gl
    for k, (a, b) in enumerate(zip(own, shared, strict=True)):
        assert a["agentview"].any()
        np.testing.assert_array_equal(a["agentview"], b["agentview"], err_msg=f"after step {k}")
    assert shared_private < 0.5 * own_private, (shared_private, own_private)
    monkeypatch.setenv(environment.SHARE_RENDERER, "0")
    assert not template.shares_renderer(1) and not _gl_run(spec, render_threads=1)[1]


def test_the_environment_variable_overrides_the_setting_both_ways(monkeypatch):
    spec = _spec((), "metaworld_mt10")
    for value, requested, expected in (("0", True, False), ("1", False, True), ("", False, False)):
        monkeypatch.setenv(template.ENV_OVERRIDE, value)
        assert template.sharing(requested) is expected
        env = make_vector_env(spec, 2, in_process=False, share_task=requested)
        try:
            assert (env._template is not None) is expected, (value, requested)
        finally:
            env.close()


def test_an_unknown_interpreter_builds_each_workers_task_with_a_notice(monkeypatch):
    """The forkserver internals are used only on interpreters they were read in; elsewhere workers build their own."""
    import sys
    from collections import namedtuple

    monkeypatch.delenv(template.ENV_OVERRIDE, raising=False)
    assert template.unknown_interpreter_notice(True) is None
    fake = namedtuple("version_info", "major minor micro releaselevel serial")(3, 99, 0, "final", 0)
    monkeypatch.setattr(sys, "version_info", fake)
    assert not template.internals_known() and not template.sharing(True)
    notice = template.unknown_interpreter_notice(True)
    assert notice and "3.99" in notice and "builds its own task" in notice and "\n" not in notice
    assert template.unknown_interpreter_notice(False) is None  # nothing asked for, nothing to say
    spec = _spec((), "metaworld_mt10")
    env = make_vector_env(spec, 2, in_process=False, share_task=True)
    try:
        assert env._template is None
        obs, _ = env.reset(options={"episodes": [0, 1]})
        assert obs["state"].shape[0] == 2 and np.isfinite(obs["state"]).all()
    finally:
        env.close()
