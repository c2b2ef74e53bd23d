"""``--delay-steps``: RTC's inference-delay protocol on the fake vector env (no MuJoCo, about a second).

What a real simulator cannot show cheaply: the committed actions a policy is told are exactly those the env
then executes, step by step; the returned chunk runs from its action d; an episode that ends while its call is
in flight drops that call's answer; and outcomes do not depend on the batch size or the call timing.
"""

import threading
from typing import Any

import numpy as np
import pytest
from fake_env import FakeVectorEnv, Script

from lerobench.core.delay import MEASURED, Delay, check_horizon, measured_steps, parse_delay
from lerobench.core.task_run import TaskRun
from lerobench.errors import ConfigError, PolicyError
from lerobench.policies.base import ObservationNeeds, PolicyTraits
from lerobench.rollout.inference import EpisodeQueue
from lerobench.rollout.loop import Rollout
from lerobench.rollout.slots import SlotState
from lerobench.suite.config import TaskSpec

TASK = TaskSpec(name="fake-task", description="Do the fake thing.", index=0)


class RecordingChunkPolicy:
    """Chunks of ``length`` actions, action[t] = (episode, trial, call, t); keeps every batch it was given."""

    def __init__(self, execute: int = 4, length: int = 10, latency_s: float = 0.0, concurrent: int = 1):
        self.observation_needs = ObservationNeeds(replan_steps=execute, chunk_length=length)
        self.traits = PolicyTraits(concurrent_calls=concurrent, checkable=False)
        self.length, self.latency_s = length, latency_s
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def reset(self) -> None:
        """Nothing to forget."""

    def select_action(self, observation: dict[str, Any], task_descriptions: list[str]) -> np.ndarray:
        with self._lock:
            self.calls.append({k: np.array(v, copy=True) for k, v in observation.items()})
        if self.latency_s:
            threading.Event().wait(self.latency_s)
        n = len(observation["state"])
        out = np.zeros((n, self.length, 4), np.float32)
        out[:, :, 0] = np.asarray(observation["episode"])[:, None]
        out[:, :, 1] = np.asarray(observation["trial"])[:, None]
        out[:, :, 2] = np.asarray(observation["call"])[:, None]
        out[:, :, 3] = np.arange(self.length)[None, :]
        return out


def run(n, episodes, delay, policy=None, script=None, trials=1):
    policy = policy or RecordingChunkPolicy()
    env, records = FakeVectorEnv(n, script or Script(length=lambda e, t: 20 + 3 * e)), []
    task_run = TaskRun(suite="fake", task=TASK, seed=7, action_dim=4, trials=trials, delay=delay,
                       replan_steps=policy.observation_needs.replan_steps)
    roll = Rollout(env, policy, task_run, EpisodeQueue(episodes), records.append)
    roll.run()
    assert not env.log.violations and roll.slots.all_idle()
    return records, env, policy


def executed(env):
    """Per (episode, trial): the actions its env executed, in step order."""
    out: dict[tuple[int, int], list[np.ndarray]] = {}
    for _, episode, trial, _, action in env.log.steps:
        out.setdefault((episode, trial), []).append(action)
    return out


def test_the_committed_actions_a_policy_is_told_are_those_the_env_then_executes():
    d, s = 3, 4
    _, env, policy = run(3, list(range(5)), Delay(steps=d), RecordingChunkPolicy(execute=s, length=10,
                                                                                   latency_s=0.001))
    done = executed(env)
    checked = 0
    for call in policy.calls:
        for k, episode in enumerate(call["episode"].tolist()):
            trial, observed_at = int(call["trial"][k]), int(call["state"][k, 2])  # the step the observation is of
            actions = done[(episode, trial)]
            delay = int(call["delay_steps"][k])
            assert delay == (0 if call["call"][k] == 0 else d)  # a trial's first call: nothing committed, env waits
            committed = call["committed_actions"][k]
            assert committed.shape == (d, 4)
            assert call["committed_from_previous"][k].tolist() == [True] * delay + [False] * (d - delay)
            for j in range(delay):  # step by step: what the env executed right after the observation
                if observed_at + j < len(actions):
                    np.testing.assert_array_equal(actions[observed_at + j], committed[j])
                    checked += 1
            first_new = observed_at + delay  # the returned chunk runs from its action d
            if first_new < len(actions):
                assert actions[first_new].tolist() == [episode, trial, int(call["call"][k]), delay]
    assert checked > 20


def test_a_new_chunk_every_s_steps_executing_its_actions_d_to_d_plus_s():
    d, s = 2, 5
    _, env, _ = run(1, [1], Delay(steps=d), RecordingChunkPolicy(execute=s, length=8))
    actions = executed(env)[(1, 0)]
    calls_and_indices = [(int(a[2]), int(a[3])) for a in actions]
    expected = [(0, t) for t in range(s)]  # first call: from action 0
    call = 1
    while len(expected) < len(actions):
        expected += [(call, t) for t in range(d, d + s)]
        call += 1
    assert calls_and_indices == expected[:len(actions)]


@pytest.mark.parametrize("latency_s", [0.0, 0.003])
def test_outcomes_and_actions_do_not_depend_on_batch_size_or_call_timing(latency_s):
    episodes = list(range(7))
    runs = [run(n, episodes, Delay(steps=3), RecordingChunkPolicy(latency_s=latency_s, concurrent=c))
            for n, c in ((1, 1), (3, 1), (8, 2))]
    baseline = executed(runs[0][1])
    for records, env, _ in runs[1:]:
        assert executed(env).keys() == baseline.keys()
        for key, actions in executed(env).items():
            np.testing.assert_array_equal(np.stack(actions), np.stack(baseline[key]))
        assert sorted((r.episode, r.steps, r.success) for r in records) == \
            sorted((r.episode, r.steps, r.success) for r in runs[0][0])


def test_zero_delay_is_the_rollout_without_one():
    plain = run(3, list(range(6)), Delay(), RecordingChunkPolicy(execute=4, length=4))
    assert all("delay_steps" not in call for call in plain[2].calls)  # d = 0: the batch is today's, key for key
    assert Delay(steps=0).due == 0 and not Delay(steps=0).on


def test_an_episode_ending_while_its_call_is_in_flight_drops_the_answer():
    # episodes of 6 steps, chunks executed 4 at a time with d = 3: every second call is in flight at the end
    policy = RecordingChunkPolicy(execute=4, length=8, latency_s=0.01)
    records, env, _ = run(2, list(range(6)), Delay(steps=3), policy, Script(length=lambda e, t: 6), trials=2)
    assert sorted((r.episode, r.trial) for r in records) == [(e, t) for e in range(6) for t in range(2)]
    for actions in executed(env).values():  # each trial starts with its own first chunk, never a stale one
        assert int(actions[0][2]) == 0 and int(actions[0][3]) == 0


def test_measured_delay_is_the_latency_in_control_steps():
    policy = RecordingChunkPolicy(execute=4, length=16, latency_s=0.05)
    records, env, _ = run(1, [0], Delay(measured=True, control_fps=80.0), policy)
    delays = records[0].call_delays
    assert delays[0] == 0 and len(delays) == len(policy.calls)
    assert all(4 <= d <= 6 for d in delays[1:]), delays  # 50 ms at 80 Hz: 4 steps, plus the rollout's own lag
    actions = executed(env)[(0, 0)]
    assert actions[4][2] == 0 and actions[4][3] == 4  # the first chunk's rest covered the delay


def test_invalid_delays_are_refused_with_a_reason():
    assert parse_delay("4") == 4 and parse_delay(0) == 0 and parse_delay(" Measured ") == MEASURED
    with pytest.raises(ConfigError, match="robustness --families delay_steps=2,delay_steps=4$"):
        parse_delay("0,2,4")
    for bad in ("-1", "two", -2, 1.5):
        with pytest.raises(ConfigError, match="--delay-steps must be a whole number"):
            parse_delay(bad)
    with pytest.raises(ConfigError, match="needs an execute horizon of at least 4"):
        check_horizon(4, 2, 10, "my-policy")
    with pytest.raises(ConfigError, match="needs chunks of at least 9 actions; policy 'my-policy' returns 8"):
        check_horizon(4, 5, 8, "my-policy")
    check_horizon(4, 4, 8, "my-policy")
    check_horizon(0, 1, None, "my-policy")
    assert measured_steps(0.15, 20.0) == 3 and measured_steps(0.151, 20.0) == 4 and measured_steps(0.0, 20) == 0


def test_a_chunk_too_short_for_the_delay_names_the_numbers():
    policy = RecordingChunkPolicy(execute=4, length=6)
    with pytest.raises(PolicyError, match="chunks of 6 actions; --delay-steps 3 with 4 executed per chunk needs 7"):
        run(1, [0], Delay(steps=3), policy)


def test_a_coasting_slot_steps_and_goes_waiting_when_its_committed_actions_run_out():
    from lerobench.rollout.slots import Slots

    slots = Slots(1, due=2)
    slots.state[:] = SlotState.WAITING
    slots.fill(np.array([0]), np.arange(8, dtype=np.float32).reshape(1, 8, 1), 3)
    out = np.zeros((1, 1))
    assert slots.pop(np.array([0]), out).tolist() == [True] and slots.state[0] == SlotState.DRY  # 2 left: ask
    slots.move([0], SlotState.COASTING, expect=SlotState.DRY)
    slots.pop(np.array([0]), out)
    slots.pop(np.array([0]), out)
    assert slots.state[0] == SlotState.WAITING and out[0, 0] == 2


def test_the_delay_is_part_of_the_treatment_so_resume_merge_and_versus_refuse_a_mix():
    from lerobench.core.identity import diff

    older = {"policy": "p", "replan_steps": 8}  # written before --delay-steps: no delay
    assert diff(older, {**older, "delay_steps": 0}) == []
    assert diff(older, {**older, "delay_steps": 4}) == ["treatment.delay_steps: 0 vs 4"]
    assert diff({**older, "delay_steps": 4}, {**older, "delay_steps": "measured"}, parts=("treatment",)) == \
        ["treatment.delay_steps: 4 vs 'measured'"]
