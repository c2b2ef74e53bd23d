"""Test policies loaded through ``--policy fixture_policies:<factory>`` (tests/ is on sys.path)."""

from __future__ import annotations

import threading

import numpy as np

from lerobench.policies.base import ObservationNeeds


class _Base:
    observation_needs = ObservationNeeds()

    def __init__(self, context):
        self.context = context

    def reset(self):
        pass


class WrongShape(_Base):
    def select_action(self, observation, task_descriptions):
        return np.zeros((len(observation["state"]), self.context.action_dim + 1))


class NaNAfter(_Base):
    """Valid actions on the first task, NaN on the second: results of the first must survive."""

    def select_action(self, observation, task_descriptions):
        actions = np.zeros((len(observation["state"]), self.context.action_dim))
        if observation["task"][0] != self.context.tasks[0].name:
            actions[:] = np.nan
        return actions


class Raises(_Base):
    def select_action(self, observation, task_descriptions):
        raise RuntimeError("boom")


class CameraConsumer(_Base):
    """Consumes the suite's first camera and remembers the image shapes it saw."""

    seen_shapes: list = []

    def __init__(self, context):
        super().__init__(context)
        self.observation_needs = ObservationNeeds(cameras=context.cameras[:1])

    def select_action(self, observation, task_descriptions):
        img = observation["images"][self.context.cameras[0]]
        assert img.dtype == np.uint8 and img.ndim == 4
        return np.zeros((len(observation["state"]), self.context.action_dim))


def make_wrong_shape(context):
    return WrongShape(context)


def make_nan_after(context):
    return NaNAfter(context)


def make_raises(context):
    return Raises(context)


def make_camera(context):
    return CameraConsumer(context)


def make_queue_policy(context):
    """A torch policy with per-episode state (an action queue per env), like ACT/diffusion policies."""
    import torch

    class QueuePolicy(torch.nn.Module):
        observation_needs = ObservationNeeds()

        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.chunk = 6
            self.head = torch.nn.Linear(context.state_dim, context.action_dim * self.chunk)
            self._queues = {}

        def reset(self):
            self._queues = {}  # rebind: a shallow copy must not share its state with the original

        def select_action(self, observation, task_descriptions):
            from lerobench.policies.base import row_ids

            state = observation["state"]
            actions = []
            for i, key in enumerate(row_ids(observation).tolist()):
                if observation["episode_start"][i] or not self._queues.get(key):
                    chunk = torch.tanh(self.head(state[i])).reshape(self.chunk, -1)
                    self._queues[key] = list(chunk)
                actions.append(self._queues[key].pop(0))
            return torch.stack(actions)

    return QueuePolicy()


def make_unsafe_copy(context):
    policy = make_queue_policy(context)
    policy.copy_safe = False
    return policy


def make_camera_expert(context):
    """Meta-World's expert, but declaring a camera: episodes of different lengths in one batch, with images."""
    from lerobench.policies.experts.metaworld import make_metaworld_expert

    expert = make_metaworld_expert(context)
    expert.observation_needs = ObservationNeeds(cameras=context.cameras[:1])
    return expert


def make_late_expert(context):
    """Meta-World's expert from trial 1 on; trial 0 holds still (fails): every episode succeeds within 2 trials."""
    from lerobench.policies.experts.metaworld import make_metaworld_expert

    expert = make_metaworld_expert(context)
    act = expert.select_action

    def select_action(observation, task_descriptions):
        actions = np.asarray(act(observation, task_descriptions), dtype=np.float32)
        return np.where(np.asarray(observation["trial"])[:, None] > 0, actions, 0.0).astype(np.float32)

    expert.select_action = select_action
    return expert


def make_slot_queue_policy(context):
    """A batchable torch policy with per-env action queues keyed by ``row_ids`` (slots when served batched)."""
    import torch

    from lerobench.policies.base import row_ids

    class SlotQueuePolicy(torch.nn.Module):
        observation_needs = ObservationNeeds()
        batchable = True

        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.chunk = 4
            self.head = torch.nn.Sequential(torch.nn.Linear(context.state_dim, 32), torch.nn.Tanh(),
                                            torch.nn.Linear(32, context.action_dim * self.chunk))
            self._queues = {}

        def reset(self):
            self._queues = {}

        def select_action(self, observation, task_descriptions):
            chunks = torch.tanh(self.head(observation["state"])).reshape(len(observation["state"]), self.chunk, -1)
            actions = []
            for i, key in enumerate(row_ids(observation).tolist()):
                if observation["episode_start"][i] or not self._queues.get(key):
                    self._queues[key] = list(chunks[i])
                actions.append(self._queues[key].pop(0))
            return torch.stack(actions)

    return SlotQueuePolicy()


class RaisesOnLargeState(_Base):
    """Batchable; raises when any row's first state entry exceeds 100 (a poisoned request), else zeros."""

    batchable = True

    def select_action(self, observation, task_descriptions):
        if (observation["state"][:, 0] > 100).any():
            raise RuntimeError("poisoned row")
        return np.zeros((len(observation["state"]), self.context.action_dim))


def make_raises_on_large_state(context):
    return RaisesOnLargeState(context)


class ImageChunkPolicy(_Base):
    """Returns (B, ``chunk``, A) chunks that depend on every byte of the images it reads and on the state.

    Any difference in an image the policy reads changes the episode's actions and so its return: two runs
    with equal returns saw equal images.
    """

    def __init__(self, context, chunk=10, every_frame=False, cameras=None):
        super().__init__(context)
        self.chunk = chunk
        self.observation_needs = ObservationNeeds(cameras=tuple(cameras or context.cameras[:1]),
                                                  every_frame=every_frame)
        self.digests = {}
        """(episode, trial, call) -> a checksum of the images read for that row (compare two runs' reads)."""

    def select_action(self, observation, task_descriptions):
        n = len(observation["state"])
        digest = np.zeros(n)
        for cam in self.observation_needs.cameras:
            img = observation["images"][cam].reshape(n, -1).astype(np.float64)
            digest += (img * np.arange(1, img.shape[1] + 1) % 997).sum(axis=1)
        for i in range(n):
            key = (int(observation["episode"][i]), int(observation["trial"][i]), int(observation["call"][i]))
            self.digests[key] = float(digest[i])
        phase = digest[:, None, None] * 1e-3 + np.arange(self.chunk)[None, :, None] * 0.7
        dims = np.arange(self.context.action_dim)[None, None, :]
        state = observation["state"][:, None, :1]
        return (0.8 * np.sin(phase + dims + state)).astype(np.float32)


def make_image_chunk(context):
    return ImageChunkPolicy(context)


class FixedChunk(_Base):
    """State-only; returns 5-action chunks and declares that all 5 are executed."""

    observation_needs = ObservationNeeds(replan_steps=5)

    def select_action(self, observation, task_descriptions):
        return np.zeros((len(observation["state"]), 5, self.context.action_dim), dtype=np.float32)


def make_fixed_chunk(context):
    return FixedChunk(context)


def make_declared_image_chunk(context):
    """``ImageChunkPolicy`` that declares its chunking (10 actions executed per chunk), as LeRobot policies do."""
    policy = ImageChunkPolicy(context)
    policy.observation_needs = ObservationNeeds(cameras=policy.observation_needs.cameras, replan_steps=10)
    return policy


class NoisyExpertChunk:
    """Meta-World's expert action repeated ``chunk`` times plus Gaussian noise (sigma) from each row's stream.

    As diffusion / flow policies draw their noise; batch-invariant through ``row_generators``. Counts the
    rows it is given (class-wide, so copies of ``--parallel-tasks`` add up) to check one row per chunk.
    """

    rows_seen = 0
    calls = 0

    def __init__(self, context, chunk=10, sigma=0.3):
        from lerobench.policies.base import PolicyTraits
        from lerobench.policies.experts.metaworld import make_metaworld_expert

        self.expert = make_metaworld_expert(context)
        self.chunk, self.sigma = chunk, sigma
        self.observation_needs = ObservationNeeds(replan_steps=chunk)
        self.traits = PolicyTraits(stochastic=True, batch_invariant=True, replicable=True, batchable=True)

    def reset(self):
        pass

    def select_action(self, observation, task_descriptions):
        from lerobench.policies.base import row_generators

        assert observation["active"].all()
        probe = np.asarray(observation.get("probe", np.zeros(len(observation["state"]), bool)))
        NoisyExpertChunk.rows_seen += int((~probe).sum())  # class-wide, subclasses included; not check calls
        NoisyExpertChunk.calls += int(not probe.all())
        base = self.expert.select_action(observation, task_descriptions)
        noise = np.stack([g.normal(0.0, self.sigma, (self.chunk, base.shape[1]))
                          for g in row_generators(observation)])
        return (base[:, None, :] + noise).astype(np.float32)


def make_noisy_expert_chunk(context):
    return NoisyExpertChunk(context)


class SlowOverlappingNoisyChunk(NoisyExpertChunk):
    """``NoisyExpertChunk`` whose calls take 30 ms and may overlap (a remote server): envs may run out of phase."""

    def __init__(self, context):
        from dataclasses import replace

        super().__init__(context)
        self.traits = replace(self.traits, concurrent_calls=3)

    def select_action(self, observation, task_descriptions):
        import time

        time.sleep(0.03)
        return super().select_action(observation, task_descriptions)


def make_slow_overlapping_noisy_chunk(context):
    return SlowOverlappingNoisyChunk(context)


def make_mlp(context):
    """A deterministic random-init torch MLP (seed 0): state -> tanh action, like a small BC policy."""
    import torch

    from lerobench.policies.base import PolicyTraits

    class MLP(torch.nn.Module):
        observation_needs = ObservationNeeds()
        traits = PolicyTraits(batchable=True)

        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = torch.nn.Sequential(torch.nn.Linear(context.state_dim, 256), torch.nn.ReLU(),
                                           torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                           torch.nn.Linear(256, context.action_dim), torch.nn.Tanh())

        def reset(self):
            pass

        def select_action(self, observation, task_descriptions):
            return self.net(observation["state"])

    return MLP()


def make_position_dependent(context):
    """make_mlp whose rows move by 1e-7 x their position in calls of a width that is not 1 or a multiple of 8: what
    CPU kernels were measured to do (policies/width.py), made deterministic so a test can rely on it."""
    import torch

    mlp = make_mlp(context)
    plain = mlp.select_action

    def select_action(observation, task_descriptions):
        out = plain(observation, task_descriptions)
        n = out.shape[0]
        if n == 1 or n % 8 == 0:
            return out
        return out + 1e-7 * torch.arange(n, dtype=out.dtype, device=out.device)[:, None]

    mlp.select_action = select_action
    return mlp


def make_mkl_mode_dependent(context):
    """make_mlp whose actions move by 1e-6 outside MKL's strict mode: what this MLP's MKL products were measured to do
    on an x86 CPU (returns 182.60254 strict vs 182.60232 default, issue 61), made certain on any CPU with MKL."""
    from lerobench.policies.kernels import mkl_mode

    mlp = make_mlp(context)
    plain, nudge = mlp.select_action, 1e-6 * (mkl_mode() != "strict")

    def select_action(observation, task_descriptions):
        return plain(observation, task_descriptions) * (1 - nudge)

    mlp.select_action = select_action
    return mlp


def make_position_keyed_smoother(context):
    """docs/policies.md's SmoothedMLP as of 41dfc68: the last action kept by the row's position in the call, against
    the page's own rule (key per-env state by ``row_ids``)."""
    import torch
    from torch import nn

    class SmoothedMLP(nn.Module):
        observation_needs = ObservationNeeds()

        def __init__(self, state_dim, action_dim):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(state_dim, 64), nn.ReLU(), nn.Linear(64, action_dim))
            self._last = None

        def reset(self):
            self._last = None

        def select_action(self, observation, task_descriptions):
            state = observation["state"]
            action = torch.tanh(self.net(state))
            start = torch.as_tensor(observation["episode_start"], device=state.device)
            if self._last is not None and self._last.shape == action.shape:
                action = torch.where(start[:, None], action, 0.5 * action + 0.5 * self._last)
            self._last = action
            return action

    torch.manual_seed(context.seed)
    return SmoothedMLP(context.state_dim, context.action_dim)


def make_batch_norm(context):
    """An MLP that normalises over the batch (BatchNorm statistics of the call): a row depends on its neighbours."""
    import torch

    class BatchNormalising(torch.nn.Module):
        observation_needs = ObservationNeeds()

        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.inp = torch.nn.Linear(context.state_dim, 64)
            self.out = torch.nn.Linear(64, context.action_dim)

        def reset(self):
            pass

        def select_action(self, observation, task_descriptions):
            h = self.inp(observation["state"])
            h = torch.nn.functional.batch_norm(h, None, None, training=True)  # statistics of this call
            return torch.tanh(self.out(torch.relu(h)))

    return BatchNormalising()


class _SlowChunks:
    """Meta-World's expert as 16-step chunks, each call 50 ms late: a latency for ``--delay-steps measured``."""

    latency_s = 0.05

    def __init__(self, context):
        from lerobench.policies.experts.metaworld import make_metaworld_expert_chunks

        self.inner = make_metaworld_expert_chunks(context)
        self.observation_needs = self.inner.observation_needs
        self.traits = self.inner.traits

    def reset(self):
        self.inner.reset()

    def select_action(self, observation, task_descriptions):
        threading.Event().wait(self.latency_s)
        return self.inner.select_action(observation, task_descriptions)


def make_slow_chunks(context):
    return _SlowChunks(context)


class CountingNoisyChunk(_Base):
    """A stochastic chunk policy as a user writes one: noise keyed on (episode seed, trial, its own count of calls
    for that trial), per-row state keyed by ``row_ids``; it never reads ``probe``.

    Issue 33: the invariance check's probe calls reached this object and advanced its counters, so episodes changed
    with the batch size. ``rows_seen`` counts every row this object was handed (a copy counts its own): for the
    object a run loaded (``made[-1]``, in-process) it must equal the chunks the episodes executed.
    """

    made: list = []
    """Objects built by ``make_counting_noisy_chunk`` (copies are not): the recording policies."""

    def __init__(self, context, chunk=5, sigma=0.3):
        from lerobench.policies.base import PolicyTraits

        super().__init__(context)
        self.chunk, self.sigma = chunk, sigma
        self.counts = {}
        self.rows_seen = 0
        self.observation_needs = ObservationNeeds(replan_steps=chunk)
        self.traits = PolicyTraits(stochastic=True, batch_invariant=True)

    def reset(self):
        self.counts = {}

    def select_action(self, observation, task_descriptions):
        from lerobench.policies.base import row_ids

        n = len(observation["state"])
        self.rows_seen += n  # an int: a copy rebinds its own
        out = np.empty((n, self.chunk, self.context.action_dim), dtype=np.float32)
        for k, slot in enumerate(row_ids(observation).tolist()):
            if observation["trial_start"][k]:
                self.counts[slot] = 0
            count = self.counts.get(slot, 0)
            self.counts[slot] = count + 1
            rng = np.random.default_rng([int(observation["episode_seed"][k]) & 0xFFFFFFFF,
                                         int(observation["trial"][k]), count])
            base = np.tanh(observation["state"][k, : self.context.action_dim])
            out[k] = np.clip(base + rng.normal(0.0, self.sigma, (self.chunk, self.context.action_dim)), -1, 1)
        return out


def make_counting_noisy_chunk(context):
    CountingNoisyChunk.made.append(CountingNoisyChunk(context))
    return CountingNoisyChunk.made[-1]


def make_policy_needing_env(context):
    """A factory that reads a variable the caller set just before the run (a checkpoint path, a token)."""
    import os

    if os.environ.get("LEROBENCH_TEST_FACTORY_ENV") != "set":
        raise RuntimeError("LEROBENCH_TEST_FACTORY_ENV is not set in this process")
    from lerobench.policies.builtin import make_zero

    return make_zero(context)


def make_batch_centred(context):
    """An MLP that centres its hidden layer on the call's mean: a row depends on its neighbours, yet one row per call
    (the CPU default) runs fine and gives the same bits every time, so only other call shapes show it."""

    mlp = make_mlp(context)

    def select_action(observation, task_descriptions):
        h = mlp.net[1](mlp.net[0](observation["state"]))
        h = h - h.mean(dim=0, keepdim=True)  # statistics of this call
        return mlp.net[5](mlp.net[4](mlp.net[3](mlp.net[2](h))))

    mlp.select_action = select_action
    return mlp


def make_budget_reporter(context):
    """Meta-World's expert that writes, in the process it runs in, the call cores and render threads it was given.

    Where: ``$BUDGET_PROBE_DIR/<pid>.json`` at its first action (tests/test_compute_budget.py).
    """
    import json
    import os
    from pathlib import Path

    from lerobench.policies.experts.metaworld import make_metaworld_expert
    from lerobench.policies.width import call_cores

    expert = make_metaworld_expert(context)
    act = expert.select_action

    def select_action(observation, task_descriptions):
        probe = Path(os.environ["BUDGET_PROBE_DIR"]) / f"{os.getpid()}.json"
        if not probe.exists():
            probe.write_text(json.dumps({"call_cores": call_cores(), "render": os.environ.get("LP_NUM_THREADS")}))
        return act(observation, task_descriptions)

    expert.select_action = select_action
    return expert


def make_key_auditor(context):
    """Meta-World's expert in chunks, with a camera, that writes every batch key it is handed and how it was typed.

    Where: ``$KEY_AUDIT_DIR/<pid>.json`` (tests/test_policy_batch.py): the keys, the typed views' keys, the type.
    """
    import json
    import os
    from pathlib import Path

    from lerobench.policies.experts.metaworld import make_metaworld_expert_chunks

    policy = make_metaworld_expert_chunks(context)
    policy.observation_needs = ObservationNeeds(cameras=context.cameras[:1])
    act = policy.select_action
    seen = {"keys": set(), "observation": set(), "rows": set(), "types": set(), "row_slots": []}

    def select_action(observation, task_descriptions):
        seen["keys"] |= set(observation)
        seen["observation"] |= set(observation.observation)
        seen["rows"] |= set(observation.rows)
        seen["types"].add(type(observation).__name__)
        seen["row_slots"].append(bool((observation.rows["slot"] == observation["slot"]).all()))
        out = Path(os.environ["KEY_AUDIT_DIR"]) / f"{os.getpid()}.json"
        out.write_text(json.dumps({k: sorted(v) if isinstance(v, set) else v for k, v in seen.items()}))
        return act(observation, task_descriptions)

    policy.select_action = select_action
    return policy


HANG_RELEASE = threading.Event()
"""Set by a test to let a ``HangsOnCall`` policy's hung call return (so no thread outlives the test for long)."""


class HangsOnCall(_Base):
    """Zero actions, except that call number ``LEROBENCH_TEST_HANG_CALL`` (counted per process) never returns.

    Unset, the policy never hangs: the same spec resumes the run to its end.
    """

    calls = 0
    lock = threading.Lock()

    def select_action(self, observation, task_descriptions):
        import os

        with HangsOnCall.lock:
            HangsOnCall.calls += 1
            number = HangsOnCall.calls
        if str(number) == os.environ.get("LEROBENCH_TEST_HANG_CALL"):
            HANG_RELEASE.wait(3600)
        return np.zeros((len(observation["state"]), self.context.action_dim))


def make_hangs_on_call(context):
    return HangsOnCall(context)
