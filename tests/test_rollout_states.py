"""The rollout's state machine on a deterministic fake vector env (``tests/fake_env.py``): no MuJoCo, fast.

What the real-simulator tests cannot pin down cheaply: a resetting slot is never stepped, trials of an
episode are reported together, a worker failure records its culprits and leaves the bystanders to be rerun,
every wrong slot transition raises at once, and every slot is idle at the end.
"""

import math
import threading
from itertools import product

import numpy as np
import pytest
from fake_env import ChunkPolicy, FakeVectorEnv, Script

from lerobench.core.task_run import ScheduleRules, TaskRun
from lerobench.errors import PolicyError
from lerobench.rollout.inference import EpisodeQueue
from lerobench.rollout.loop import Cancelled, Rollout, WorkerFailure, run_episodes
from lerobench.rollout.slots import TRANSITIONS, Slots, SlotState, SlotStateError
from lerobench.suite.config import TaskSpec

TASK = TaskSpec(name="fake-task", description="Do the fake thing.", index=0)


def task_run(chunk=3, trials=1, **extra):
    return TaskRun(suite="fake", task=TASK, seed=7, action_dim=4, replan_steps=chunk, trials=trials, **extra)


def rollout(n, episodes, script=None, policy=None, trials=1, **extra):
    """Run ``episodes`` on a fake env of ``n`` slots; (records, env, policy, the finished Rollout)."""
    policy = policy or ChunkPolicy()
    env, records = FakeVectorEnv(n, script), []
    roll = Rollout(env, policy, task_run(policy.chunk, trials, **extra), EpisodeQueue(episodes), records.append)
    roll.run()
    return records, env, policy, roll


# -- the state machine alone ------------------------------------------------------------------------------
def test_every_wrong_transition_raises():
    for before, after in product(SlotState, SlotState):
        slots = Slots(2)
        slots.state[:] = before
        if after in TRANSITIONS[before]:
            slots.move([0], after, expect=before)
            assert slots.state[0] == after and slots.state[1] == before
        else:
            with pytest.raises(SlotStateError, match=f"no transition {before.name} -> {after.name}"):
                slots.move([0], after, expect=before)
            assert (slots.state == before).all()  # nothing moved


def test_a_slot_not_in_the_expected_state_raises_naming_it():
    slots = Slots(3)
    slots.state[:] = [SlotState.DRY, SlotState.READY, SlotState.DRY]
    with pytest.raises(SlotStateError, match="slot 1 is READY, expected DRY to move to WAITING"):
        slots.move(np.array([True, True, False]), SlotState.WAITING, expect=SlotState.DRY)
    assert list(slots.state) == [SlotState.DRY, SlotState.READY, SlotState.DRY]
    with pytest.raises(SlotStateError, match="slot 0 is DRY, expected READY to step"):
        slots.pop(np.array([0]), np.zeros((3, 2)))
    with pytest.raises(SlotStateError, match="slot 0 is DRY, expected WAITING"):
        slots.fill(np.array([0]), np.zeros((1, 2, 2)), 2)


def test_fill_and_pop_walk_a_chunk_and_resetting_drops_the_queue():
    slots = Slots(2)
    slots.state[:] = SlotState.DRY
    slots.stamp_dry(1.0)
    assert slots.waited(np.array([0, 1]), 3.5) == 2.5
    slots.move([0, 1], SlotState.WAITING, expect=SlotState.DRY)
    assert np.isnan(slots.dry_since).all()
    chunk = np.arange(2 * 3 * 2, dtype=np.float32).reshape(2, 3, 2)
    slots.fill(np.array([0, 1]), chunk, steps=2)  # only the executed part of each chunk is queued
    out = np.zeros((2, 2), np.float32)
    assert not slots.pop(np.array([0, 1]), out).any() and (out == chunk[:, 0]).all()
    assert slots.pop(np.array([0]), out).tolist() == [True, False] and (out[0] == chunk[0, 1]).all()
    assert list(slots.state) == [SlotState.DRY, SlotState.READY] and slots.next_dry(np.array([1])) == 1
    slots.move([1], SlotState.RESETTING, expect=(SlotState.DRY, SlotState.READY))  # the episode ended mid-chunk
    assert not slots.queues[1] and slots.state[1] == SlotState.RESETTING


# -- the rollout on the fake env --------------------------------------------------------------------------
def test_every_episode_runs_once_with_its_own_actions_and_every_slot_ends_idle():
    records, env, policy, roll = rollout(3, list(range(8)))
    assert sorted(r.episode for r in records) == list(range(8))
    for r in records:
        assert r.error is None and r.steps == 5 + r.episode % 3 and r.success == (r.episode % 2 == 0)
    assert roll.slots.all_idle() and not roll.resets and not env.log.violations
    for episode in range(8):  # each step ran the episode's own chunks, in order, one action each
        actions = [a for (_, e, _, _, a) in env.log.steps if e == episode]
        assert [a[0] for a in actions] == [episode] * len(actions)
        assert [a[3] for a in actions] == [k % 3 for k in range(len(actions))]
        assert [a[2] for a in actions] == [k // 3 for k in range(len(actions))]
    rows = sum(len(c["state"]) for c in policy.calls)  # one row per chunk executed, none wasted
    assert rows == sum(math.ceil((5 + e % 3) / 3) for e in range(8))


def test_never_steps_a_resetting_slot():
    script = Script(reset_delay_s=lambda episode, trial: 0.03 if episode % 2 else 0.0,
                    length=lambda episode, trial: 12)
    records, env, _, roll = rollout(3, list(range(7)), script)
    assert sorted(r.episode for r in records) == list(range(7))
    assert not env.log.violations
    assert env.log.steps_beside_resets > 0, "the others kept stepping while a reset ran"
    assert roll.slots.all_idle()


def test_trials_of_an_episode_are_reported_together():
    script = Script(length=lambda episode, trial: 4 + trial + episode,
                    reset_error=lambda episode, trial: (episode, trial) == (2, 1))
    records, env, policy, _ = rollout(2, [0, 1, 2, 3], script, trials=3)
    order = [(r.episode, r.trial) for r in records]
    for episode in (0, 1, 3):  # whole, in trial order, nothing of another episode between them
        k = order.index((episode, 0))
        assert order[k:k + 3] == [(episode, 0), (episode, 1), (episode, 2)]
    k = order.index((2, 0))  # an error ends the episode early: its trials so far, together
    assert order[k:k + 2] == [(2, 0), (2, 1)] and (2, 2) not in order
    assert records[k + 1].error == "simulator reset failed: scripted" and not records[k + 1].success
    assert [r.steps for r in records if r.episode == 3] == [7, 8, 9]
    assert not env.log.violations
    starts = [(int(e), int(t), bool(es), bool(ts)) for c in policy.calls for e, t, es, ts in
              zip(c["episode"], c["trial"], c["episode_start"], c["trial_start"], strict=True) if ts]
    assert (0, 0, True, True) in starts and (0, 1, False, True) in starts and (0, 2, False, True) in starts


def test_a_worker_failure_records_the_culprits_and_reruns_the_bystanders():
    script = Script(fail_at_step=4, culprits=(1,), length=lambda episode, trial: 6)
    env, records = FakeVectorEnv(3, script), []
    with pytest.raises(WorkerFailure) as failure:
        run_episodes(env, ChunkPolicy(), task_run(), list(range(6)), records.append)
    assert failure.value.in_flight == [1]  # slot 1 ran episode 1
    assert [(r.episode, r.error) for r in records] == [(1, "worker failure: a simulator worker died (EOFError)")]
    # the executor reruns what was not recorded, on a fresh vector env: every episode ends up recorded once
    todo = [e for e in range(6) if e not in {r.episode for r in records}]
    run_episodes(FakeVectorEnv(3, Script(length=lambda episode, trial: 6)), ChunkPolicy(), task_run(), todo,
                 records.append)
    assert sorted(r.episode for r in records) == list(range(6))
    assert all(r.error is None for r in records if r.episode != 1)


def test_a_hung_worker_is_a_worker_failure_naming_the_timeout():
    script = Script(fail_at_step=2, culprits=(0,), hang=True)
    env, records = FakeVectorEnv(2, script), []
    with pytest.raises(WorkerFailure, match="longer than --episode-timeout 5.0 s") as failure:
        run_episodes(env, ChunkPolicy(), task_run(step_timeout_s=5.0), [0, 1, 2], records.append)
    assert failure.value.hung and env.log.failed_slots_hung is True
    assert [r.episode for r in records] == [0] and records[0].error.startswith("worker failure: a simulator step")


def test_a_policy_error_names_the_episode_and_leaves_no_call_running():
    with pytest.raises(PolicyError, match="task 'fake-task', episode 0: policy raised RuntimeError: scripted"):
        rollout(2, [0, 1], policy=ChunkPolicy(fail_on_call=1))
    with pytest.raises(PolicyError, match=r"episode \d: action contains NaN or infinity"):
        rollout(2, [0, 1, 2], policy=ChunkPolicy(bad="nan"))
    with pytest.raises(PolicyError, match=r"shape \(2, 4\) or a chunk \(2, T, 4\), got \(2, 3, 2\)"):
        rollout(2, [0, 1], policy=ChunkPolicy(bad="shape"))


def test_overlapping_calls_keep_the_states_consistent():
    policy = ChunkPolicy(latency_s=0.002, concurrent=2)
    out_of_phase = ScheduleRules(worth_spreading=lambda *a: True)  # out of phase for sure, passed in
    records, env, policy, roll = rollout(4, list(range(10)), policy=policy, schedule=out_of_phase)
    assert sorted((r.episode, r.steps, r.success) for r in records) == \
        [(e, 5 + e % 3, e % 2 == 0) for e in range(10)]
    assert not env.log.violations and roll.slots.all_idle()
    seen = [int(s) for c in policy.calls for s in c["slot"]]
    assert len(seen) == sum(math.ceil((5 + e % 3) / 3) for e in range(10))


def test_a_stop_cancels_at_the_next_tick():
    stop = threading.Event()
    stop.set()
    with pytest.raises(Cancelled, match="fake-task"):
        rollout(2, [0, 1], stop=stop)


def test_a_plain_list_and_an_episode_source_run_the_same():
    got = {}
    for name, episodes in (("list", [3, 1, 2]), ("source", EpisodeQueue([3, 1, 2]))):
        records = []
        run_episodes(FakeVectorEnv(2), ChunkPolicy(), task_run(), episodes, records.append)
        got[name] = sorted((r.episode, r.steps, r.success, r.seed) for r in records)
    assert got["list"] == got["source"] and [e for e, *_ in got["list"]] == [1, 2, 3]


class _Recording:
    def __init__(self, log, key):
        self.log, self.key = log, key

    def add(self, frame):
        self.log.append(("add", self.key))

    def finish(self, success):
        self.log.append(("finish", self.key))
        return f"videos/{self.key[0]}-{self.key[1]}.mp4"

    def abort(self):
        self.log.append(("abort", self.key))


class _Recorder:
    """Records every episode; logs what happened to each recording."""

    camera = None

    def __init__(self):
        self.log = []

    def wants(self, episode):
        return True

    def start(self, task, episode, trial=None):
        self.log.append(("start", (episode, trial)))
        return _Recording(self.log, (episode, trial))


def test_videos_are_finished_for_recorded_episodes_and_dropped_for_lost_ones():
    recorder, records = _Recorder(), []
    run_episodes(FakeVectorEnv(2), ChunkPolicy(), task_run(trials=2), [0, 1, 2], records.append, recorder=recorder)
    assert sorted(r.video for r in records) == sorted(f"videos/{e}-{t}.mp4" for e in range(3) for t in range(2))
    assert sorted(k for what, k in recorder.log if what == "finish") == [(e, t) for e in range(3) for t in range(2)]
    recorder, records = _Recorder(), []
    script = Script(fail_at_step=3, culprits=(0,))
    with pytest.raises(WorkerFailure):
        run_episodes(FakeVectorEnv(2, script), ChunkPolicy(), task_run(), [0, 1, 2], records.append,
                     recorder=recorder)
    assert [(r.episode, r.video) for r in records] == [(0, None)]  # the culprit: an error, no video
    assert sorted(k for what, k in recorder.log if what == "abort") == [(0, None), (1, None)]  # both dropped


def test_observation_digests_are_the_same_at_every_width_and_name_a_changed_read():
    """Each record's digest covers exactly the rows the policy read (one per chunk executed), is the same whichever
    slot and batch width ran the episode, and ``first_difference`` names the first read and part that differ."""
    from dataclasses import replace

    from lerobench.core.digest_compare import first_difference

    by_width = {}
    for n in (1, 3, 8):
        records, _, _, _ = rollout(n, list(range(8)))
        by_width[n] = {r.episode: r for r in records}
        for r in records:
            assert r.obs_reads == math.ceil(r.steps / 3) and r.obs_parts[0] == "state" and len(r.obs_digest) == 32
    for n in (3, 8):
        assert {e: r.obs_digest for e, r in by_width[n].items()} == {e: r.obs_digest for e, r in by_width[1].items()}
    a, b = by_width[1][4], by_width[1][5]
    assert first_difference(a, a) is None and first_difference(a, b).read == 0
    import base64

    short = bytearray(base64.b64decode(a.obs_read_digests))
    width = 4 * len(a.obs_parts)
    short[width + 4 * (len(a.obs_parts) - 1)] ^= 1  # read 1, last part
    changed = replace(a, obs_digest="0" * 32, obs_read_digests=base64.b64encode(bytes(short)).decode())
    assert first_difference(a, changed).describe() == f"call 1 ({a.obs_parts[-1]})"
