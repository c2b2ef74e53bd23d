"""Continuous batching: the policy sees only the rows that need an action, and episodes never depend on the schedule.

On the real Meta-World simulator with a stochastic chunk policy (expert + per-row noise, as diffusion / flow
policies draw noise): per-episode outcomes are identical at batch 1, 3 (worker processes or in this process), under
the processes executor, with two task threads and with slow calls that may overlap (envs run out of phase), and
the policy receives exactly one row per chunk executed.
"""

import json
import math
import threading

import numpy as np
import pytest
from fixture_policies import NoisyExpertChunk
from typer.testing import CliRunner

from lerobench.cli import app
from lerobench.policies.base import ObservationNeeds, PolicyTraits, policy_traits, row_generators
from lerobench.rollout.inference import EpisodeQueue, should_call

pytestmark = pytest.mark.sim  # every test here drives a real simulator

pytest.importorskip("metaworld")
runner = CliRunner()


POLICY = "fixture_policies:make_noisy_expert_chunk"


def evaluate(out, *extra, policy=POLICY, schedule=None):
    """The CLI's run; with ``schedule`` (rules no flag sets) the same settings through ``Evaluation``."""
    if schedule is None:
        args = ["eval", "--suite", "metaworld_mt10", "--tasks", "reach-v3,push-v3", "--policy",
                policy, "--episodes", "4", "--max-steps", "60", "--videos", "0",
                "--seed", "3", "--output", str(out), *extra]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
    else:
        from lerobench.execution.runner import Evaluation
        from lerobench.plan.planner import RunSettings
        from lerobench.suite.registry import load_suite

        flags = dict(zip(extra[::2], extra[1::2], strict=True))
        Evaluation(RunSettings(suite=load_suite("metaworld_mt10").select_tasks(["reach-v3", "push-v3"]),
                               policy=policy, output=out, episodes=4, max_steps=60, videos=0, seed=3,
                               executor=flags["--executor"], batch_size=int(flags["--batch-size"]),
                               schedule=schedule)).run()
    lines = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    return sorted((e["task"], e["episode"], e["success"], e["steps"], round(e["return"], 6)) for e in lines), \
        json.loads((out / "results.json").read_text())


@pytest.mark.slow
def test_stochastic_chunk_policy_same_episodes_at_any_batch_and_executor(tmp_path):
    from lerobench.core.task_run import ScheduleRules
    from lerobench.policies.serve import PolicyServer, suite_context
    from lerobench.rollout.inference import worth_spreading

    server = PolicyServer(POLICY, suite_context("metaworld_mt10"), port=0, max_batch=8, max_wait_ms=2)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    reference = None
    spread = []
    out_of_phase = ScheduleRules(worth_spreading=lambda *a: spread.append(worth_spreading(*a)) or True)
    overlapping = "fixture_policies:make_slow_overlapping_noisy_chunk"
    try:
        for name, extra, in_process in (("b1", ("--executor", "inline"), True),
                                        ("b3", ("--executor", "vector", "--batch-size", "3"), True),
                                        ("inline3", ("--executor", "inline", "--batch-size", "3"), True),
                                        ("processes", ("--executor", "processes", "--workers", "2"), False),
                                        ("tasks2", ("--executor", "vector", "--batch-size", "2",
                                                    "--parallel-tasks", "2"), True),
                                        ("served", ("--executor", "vector", "--batch-size", "3"), True),
                                        ("overlapping", ("--executor", "vector", "--batch-size", "3"), True),
                                        ("overlapping-inline", ("--executor", "inline", "--batch-size", "3"), True)):
            NoisyExpertChunk.rows_seen = NoisyExpertChunk.calls = 0
            policy = {"served": server.url, "overlapping": overlapping, "overlapping-inline": overlapping}
            # overlapping: out of phase for sure, whatever this machine's timings (rules passed in, not patched)
            got, results = evaluate(tmp_path / name, *extra, policy=policy.get(name, POLICY),
                                    schedule=out_of_phase if name.startswith("overlapping") else None)
            reference = _check(name, got, results, reference, in_process)
        assert spread, "the overlapping runs asked whether to spread phases"
    finally:
        server.shutdown()


def test_run_dry_first_steps_the_rows_nearest_to_running_dry():
    from collections import deque

    from lerobench.rollout.loop import run_dry_first

    queues = [deque(range(k)) for k in (4, 0, 2, 9, 2, 1)]
    ready = np.array([True, False, True, True, True, False])  # slot 5 is waiting for its chunk
    np.testing.assert_array_equal(run_dry_first(ready, queues, 2), [False, False, True, False, True, False])
    np.testing.assert_array_equal(run_dry_first(ready, queues, 1), [False, False, True, False, False, False])
    np.testing.assert_array_equal(run_dry_first(ready, queues, 9), ready)


def test_spreading_pays_only_where_a_call_costs_about_a_round_of_simulation():
    from lerobench.rollout.inference import MIN_SPREAD_GAIN, worth_spreading

    wave, replan, waves = 0.0003, 10, 6  # a round of simulation: 18 ms
    assert not worth_spreading(0.0, wave, waves, replan)  # a free call: nothing to overlap
    assert worth_spreading(0.018, wave, waves, replan)  # (18 + 18) / (18 + 3) = 1.7x
    assert not worth_spreading(0.1, wave, waves, replan)  # policy-bound: (100 + 18) / 103 = 1.15x, keep calls full
    assert not worth_spreading(None, wave, waves, replan) and not worth_spreading(0.018, None, waves, replan)
    assert not worth_spreading(0.018, wave, 1, replan)  # one wave: every env already steps at once

    # the rule is the model's gain against MIN_SPREAD_GAIN, checked by brute force over call times
    for call in np.linspace(0.0, 0.2, 401):
        t_one, t_all = replan * wave, waves * replan * wave
        gain = (call + t_all) / max(call + t_one, t_all)
        assert worth_spreading(float(call), wave, waves, replan) == (gain >= MIN_SPREAD_GAIN)


def test_inline_steps_only_the_envs_not_held(tmp_path):
    """``InProcessVectorEnv.step_within`` (a batch in this process) moves only the stepped envs."""
    from lerobench.envs.base import env_action
    from lerobench.envs.vector import make_vector_env
    from lerobench.plan.planner import RunSettings, make_plan
    from lerobench.suite.registry import load_suite

    plan = make_plan(RunSettings(suite=load_suite("smoke"), policy="zero", output=tmp_path, videos=0))
    venv = make_vector_env(plan.env_spec(plan.suite.tasks[0], ObservationNeeds(), None), 3, in_process=True)
    try:
        assert venv.concurrent_steps == 1
        obs, _ = venv.reset(seed=[0, 1, 2], options={"episodes": [0, 1, 2], "trials": [0, 0, 0],
                                                     "record": [False] * 3})
        before = obs["state"].copy()
        push = np.ones((3, venv.single_action_space["action"].shape[0]), dtype=np.float32)
        hold = np.array([False, True, False])
        moved, rewards, *_ = venv.step_within(env_action(push, np.ones(3, bool), hold=hold), None)
        np.testing.assert_array_equal(moved["state"][1], before[1])
        assert not np.array_equal(moved["state"][0], before[0]) and not np.array_equal(moved["state"][2], before[2])
        assert rewards[1] == 0.0
    finally:
        venv.close()


def _check(name, got, results, reference, in_process):
    assert len(got) == 8
    if reference is None:
        reference = got
        assert len({r[4] for r in got}) > 4, "the noise must make episodes differ"
    assert got == reference, name
    config, overall = results["config"], results["overall"]
    assert config["replan_steps_executed"] == 10
    assert config["batch_invariant"] == "verified"  # checked on the first call, also through a server
    assert config["batch_invariance"]["declared"] is True  # a server passes its policy's declaration on
    if in_process:  # one row per chunk executed: ceil(steps / 10) per episode (also through the server)
        chunks = sum(math.ceil(steps / 10) for _, _, _, steps, _ in got)
        assert NoisyExpertChunk.rows_seen == chunks, name
        assert overall["rows_per_call"] == round(chunks / overall["policy_calls"], 3)
        assert 0 < overall["policy_busy_fraction"] < (1 if name != "overlapping" else 3)  # overlapping calls add up
        if name != "served":
            assert overall["policy_calls"] == NoisyExpertChunk.calls
    else:
        assert overall["policy_calls"] is None  # counted inside the workers, not here
    return reference


def test_row_generators_depend_on_episode_trial_and_call_only():
    def batch(seeds, trials, calls):
        n = len(seeds)
        return {"state": np.zeros((n, 2)), "episode_seed": np.array(seeds), "trial": np.array(trials),
                "call": np.array(calls)}

    alone = row_generators(batch([11], [0], [2]))[0].random(3)
    among = row_generators(batch([5, 11, 7], [0, 0, 1], [0, 2, 2]))[1].random(3)
    np.testing.assert_array_equal(alone, among)
    for other in (batch([11], [1], [2]), batch([11], [0], [3]), batch([12], [0], [2])):
        assert not np.array_equal(alone, row_generators(other)[0].random(3))


def test_scheduler_gathers_when_policy_bound_and_never_holds_for_a_late_row():
    assert should_call(None, 0.01, 0.1)  # nothing else can step
    assert not should_call(3, 0.005, 0.1)  # next row dry in 15 ms, a call takes 100 ms: gather
    assert should_call(8, 0.05, 0.1)  # next row dry in 400 ms: do not hold the dry rows for it
    assert should_call(3, None, 0.1) and should_call(3, 0.01, None)  # not measured yet


def test_episode_queue_and_declared_traits():
    source = EpisodeQueue([4, 5])
    assert [source.next(), source.next(), source.next()] == [4, 5, None]

    class Legacy:
        copy_safe = False
        batchable = True

    class Nothing:
        pass

    assert policy_traits(Legacy()) == PolicyTraits(copy_safe=False, batchable=True)
    assert policy_traits(Nothing()) == PolicyTraits()


def test_a_held_env_does_not_move_and_reports_nothing():
    """``env_action(..., hold=True)``: simulated time stands still while an env waits for its chunk."""
    from lerobench.envs.base import EnvSpec, LazyTaskEnv, env_action
    from lerobench.suite.registry import get_backend, load_suite

    suite = load_suite("smoke")
    backend = get_backend(suite.backend)
    spec = EnvSpec(suite=suite.name, backend=suite.backend, task=suite.tasks[0], protocol=suite.protocol(), seed=0,
                   state_dim=backend.state_dim, action_dim=backend.action_dim)
    env = LazyTaskEnv(spec, backend)
    try:
        obs, _ = env.reset(options={"episodes": [0]})
        push = np.ones(backend.action_dim, dtype=np.float32)
        held, reward, terminated, truncated, info = env.step(env_action(push, True, hold=True))
        np.testing.assert_array_equal(held["state"], obs["state"])
        assert (reward, terminated, truncated, info) == (0.0, False, False, {})
        moved, *_ = env.step(env_action(push, True))
        assert not np.array_equal(moved["state"], obs["state"])
        assert env._steps == 1  # the held step was not counted
    finally:
        env.close()


def test_a_later_call_may_finish_first():
    """Overlapping calls of equal row counts: collecting the one that finished first must not compare row arrays."""
    from lerobench.rollout.inference import PolicyCaller

    release = threading.Event()

    class Policy:
        def select_action(self, batch, descriptions):
            if batch["state"][0, 0] == 0:
                release.wait(5)
            return np.zeros((len(batch["state"]), 1, 2), dtype=np.float32)

    caller = PolicyCaller(Policy(), concurrency=2)
    answered = []
    try:
        caller.submit(np.array([0, 1]), {"state": np.zeros((2, 3))}, ["a", "a"])
        caller.submit(np.array([2, 3]), {"state": np.ones((2, 3))}, ["a", "a"])
        caller.collect(lambda rows, out, exc: answered.append((rows.tolist(), exc)), block=True)
        assert answered == [([2, 3], None)] and caller.busy
        release.set()
        caller.collect(lambda rows, out, exc: answered.append((rows.tolist(), exc)), block=True)
        assert answered[-1] == ([0, 1], None) and not caller.busy
    finally:
        release.set()
        caller.close()


def test_a_worker_resets_one_env_while_the_others_step(tmp_path):
    """``WorkerVectorEnv.reset_one``: env 1 starts its next episode in its worker while env 0 keeps stepping."""
    from lerobench.envs.base import env_action
    from lerobench.envs.vector import make_vector_env
    from lerobench.plan.planner import RunSettings, make_plan
    from lerobench.suite.registry import load_suite

    plan = make_plan(RunSettings(suite=load_suite("smoke"), policy="zero", output=tmp_path, videos=0))
    spec = plan.env_spec(plan.suite.tasks[0], ObservationNeeds(), None)
    options = {"episodes": [0, 1], "trials": [0, 0], "record": [False, False]}
    venv = make_vector_env(spec, 2, in_process=False)
    reference = make_vector_env(spec, 1, in_process=True)
    try:
        obs, _ = venv.reset(seed=[5, 6], options=options)
        pending = venv.reset_one(1, 7, {**options, "episodes": [0, 3]})
        push = np.ones((2, venv.single_action_space["action"].shape[0]), dtype=np.float32)
        steps = 0
        while not pending.done() and steps < 50:  # env 0 steps, env 1 (busy resetting) is held
            venv.step_within(env_action(push, np.ones(2, bool), hold=np.array([False, True])), 10.0)
            steps += 1
        obs, infos = venv.reset_landed(1, pending.result(timeout=30))
        first, _ = reference.reset(seed=[7], options={"episodes": [3], "trials": [0], "record": [False]})
        np.testing.assert_array_equal(obs["state"][1], first["state"][0])  # episode 3's start, bit for bit
        assert infos == {} or "episode_end" not in infos
        moved, *_ = venv.step_within(env_action(push, np.ones(2, bool)), 10.0)  # both step again
        assert not np.array_equal(moved["state"][1], first["state"][0])
    finally:
        venv.close()
        reference.close()
