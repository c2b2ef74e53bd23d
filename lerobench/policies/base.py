"""The policy boundary: two methods, plus typed declarations of what the policy consumes and what it is.

Observation batch passed to ``select_action``. B is the number of rows **that need an action now**: the
envs whose queue of actions ran dry. Envs still executing a chunk, waiting for another call, or idle
are never passed, so a policy never sees (or advances state for) a row it should not act on, and each
row is in exactly one call per chunk executed. Rows of one call may come from any envs in any order:

- ``slot``: int64 (B,) the row's stable id: its env index in a local run, or a per-(client, env) id
  under ``lerobench serve --max-batch``. Key per-env state by ``row_ids(observation)``, never by position.
- ``state``: float32 (B, state_dim) — always present, never costs a render.
- ``images``: {camera: uint8 (B, H, W, 3)} — only the cameras in ``observation_needs.cameras``; (H, W) is the size
  the policy declares (``observation_needs.image_sizes``), else the protocol's ``image_size``.
- ``privileged``: float64 (B, P) — only with ``observation_needs.privileged``: the simulator's state that no robot
  sees (a scripted expert's input; LIBERO's layout: ``lerobench.envs.libero_state``).
- ``task``: list[str] of task names; ``episode``: int64 (B,) episode index; ``episode_seed``: int64 (B,);
  ``episode_start``: bool (B,) True on an episode's first observation (reset per-env state there);
  ``active``: bool (B,) all True (kept for policies written against the old whole-batch contract).
- ``trial``: int64 (B,) index of the current attempt at the episode (``--trials``; always 0 with one
  trial); ``trial_start``: bool (B,) True on each trial's first observation, where the env is back at
  the episode's start. Keep per-episode memory across trials (that is what is measured); drop only
  what belongs to the old attempt (e.g. queued actions). See docs/trials.md.
- ``call``: int64 (B,) index of this call within the current trial (0 at its first observation): with
  ``episode_seed`` and ``trial`` it keys the row's random stream (``row_generators``).
- ``padding``: bool (B,) (torch policies, ``lerobench.policies.width``): True on rows that only pad the call to
  its fixed width (``slot`` -1); their outputs are discarded.
- ``probe``: bool (B,) True on every row of a batch-invariance check call (``lerobench.policies.invariance``):
  the first call's rows again, reordered, beside made-up rows with negative slots; outputs discarded.
- ``delay_steps``: int64 (B,), ``committed_actions``: float32 (B, d, A), ``committed_from_previous``: bool (B, d):
  only with ``--delay-steps`` (``lerobench.rollout.delay``): the action of the returned chunk that execution starts
  at, the actions committed for the steps the call covers, and which come from the previous chunk (docs/latency.md).
- ``reward``: float32 (B,) and ``success``: bool (B,) of the step that produced this observation
  (0.0 and False on a trial's first observation): what a policy that adapts within an episode learns
  from. Returning to the same start is the policy's only other signal.

``select_action`` returns float actions (B, action_dim), or an action chunk (B, T, action_dim) of
which lerobench executes ``replan_steps`` before asking again (``--replan-steps``, or the policy's own
``ObservationNeeds.replan_steps``). Each env keeps its own queue; an env whose queue runs dry waits
(simulated time stands still) while the others keep stepping, and joins the next call: the cameras of an
env are rendered only at the steps where its queue runs dry, once per chunk (``ObservationNeeds.every_frame``
renders them at every step instead). Calls run on a helper thread, overlapped with simulation.

Batch invariance: if a row's action depends only on that row (its observation, its state keyed by
``row_ids``, its random stream from ``row_generators``), every episode's outcome is the same at any
``--batch-size``, executor or schedule. A policy may declare it (``PolicyTraits.batch_invariant``); each run
checks it on its first call and records what it found (``results.json`` ``config.batch_invariant``).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from lerobench.errors import ConfigError
from lerobench.policies.batch import PolicyBatch
from lerobench.suite.config import TaskSpec


@dataclass(frozen=True)
class ObservationNeeds:
    """What a policy consumes and when; envs render only these cameras, only when they are read."""

    cameras: tuple[str, ...] = ()
    """Cameras the policy reads (none for a state-only policy)."""
    replan_steps: int | None = None
    """Actions of each returned chunk executed before the policy is asked again, when the policy fixes it
    (LeRobot's ``n_action_steps``); None leaves it to ``--replan-steps``."""
    every_frame: bool = False
    """Render the cameras at every step, also at steps whose observation the policy is not asked about.
    A policy that keeps an observation history must be asked at every step anyway: it returns single
    actions (B, A), and then every observation is read and rendered without this flag."""

    chunk_length: int | None = None
    """Actions per returned chunk, when the policy fixes it: ``--delay-steps d`` then checks before the run that a
    chunk covers the delay plus the executed actions (otherwise at the first chunk returned)."""

    privileged: bool = False
    """The policy reads the simulator's privileged state (``observation['privileged']``: object poses, joints,
    goal conditions; a backend that offers it documents its layout, LIBERO's is ``lerobench.envs.libero_state``).
    Workers send it only when declared; a privileged policy is an expert, never a learned one, and results say so."""

    image_sizes: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """(height, width) each camera is declared at, where the policy declares it (a LeRobot policy: the shapes in
    its ``config.json``, the size it was trained on). The run renders the policy's cameras at it, unless a protocol
    picked with ``--protocol`` fixes its own size (``RunPlan.image_size_for``); cameras not named here, and every
    camera without a declaration, get the protocol's ``image_size``."""

    exact_image_sizes: bool = False
    """The policy fails on any other size than ``image_sizes`` (a layer sized for it: the spatial softmax of a
    LeRobot diffusion policy without ``crop_shape``): a run that cannot render its size is refused before it starts,
    naming both sizes."""

    def executed_steps(self, requested: int) -> int:
        """Actions executed per chunk given ``--replan-steps requested`` (1 = the CLI default)."""
        if self.replan_steps is None:
            return requested
        if requested not in (1, self.replan_steps):
            raise ConfigError(f"--replan-steps {requested} conflicts with the policy, which executes "
                              f"{self.replan_steps} actions of each chunk (drop --replan-steps)")
        return self.replan_steps


@dataclass(frozen=True)
class PolicyContext:
    """What a policy factory is told about the suite it will be evaluated on."""

    suite: str
    backend: str
    tasks: tuple[TaskSpec, ...]
    action_dim: int
    state_dim: int
    cameras: tuple[str, ...]
    """Cameras the suite offers (a policy may consume any subset)."""
    image_size: tuple[int, int]
    seed: int = 0
    device: str = "cpu"
    options: dict[str, Any] = field(default_factory=dict)
    call_width: int | None = None
    """``--call-width``: rows per call of a batched torch policy (padded; 0 unpadded); None = the device's default
    (``lerobench.policies.width``)."""
    backend_options: dict[str, Any] = field(default_factory=dict)
    """The suite's ``backend_options`` (which LIBERO suite its tasks are in: where a task's BDDL file is)."""
    replan_steps: int = 1
    """``--replan-steps`` as asked (1: not asked): a chunk policy with its own horizon may need to return more."""
    delay_steps: int | str = 0
    """``--delay-steps``: d, or ``"measured"``; a chunk must then cover the delay plus the executed actions."""
    action_bounds: tuple[float, float] = (-1.0, 1.0)
    """(low, high) of each action dimension in the simulator's units (PushT: target positions in [0, 512])."""
    camera_aliases: Mapping[str, str] = field(default_factory=dict)
    """The backend's ``camera_aliases``: other tools' names for its cameras (``image``: the main one)."""
    partial_states: tuple[int, ...] = ()
    """The backend's ``partial_states``: prefixes of the state other tools hand their policies (Meta-World's 4)."""


@dataclass(frozen=True)
class PolicyTraits:
    """What a policy is, declared once as ``traits = PolicyTraits(...)``; read only through ``policy_traits``.

    Executors, ``lerobench serve`` and ``results.json`` decide from these instead of probing attributes.
    A policy that declares nothing gets these defaults (the safe choices).
    """

    copy_safe: bool = True
    """``copy.copy(policy)`` plus ``reset()`` gives an independent copy for another task thread
    (``--parallel-tasks``, one served connection each). False: one task / one client at a time."""
    replicable: bool = False
    """Building one instance per worker process is cheap and harmless (no big weights): ``--executor auto``
    may then choose the processes executor."""
    batchable: bool = False
    """A row's action depends only on that row and state keyed by ``row_ids``: ``lerobench serve --max-batch``
    may stack rows of several clients into one call."""
    stochastic: bool = False
    """The policy draws random numbers (noise of diffusion / flow matching, sampling)."""
    concurrent_calls: int = 1
    """Calls that may be in flight at once, from helper threads, on disjoint rows. 1 for a model computing
    locally (its calls would only queue up); more for a policy whose latency is not local compute (a remote
    server that batches, a model waiting on I/O): envs then keep several calls' rows in flight."""
    batch_invariant: bool | None = None
    """Every episode's outcome is independent of which other rows share its calls (``--batch-size``, executor,
    schedule): state keyed by ``row_ids``, randomness from ``row_generators``. None: not declared (unknown).
    A declaration only: ``results.json`` ``config.batch_invariant`` records what the run's own check found
    (``lerobench.policies.invariance``), recorded as ``config.batch_invariance.declared``."""
    checkable: bool = True
    """Extra calls on copies of the first call's rows (reordered, beside made-up rows with negative slot ids)
    leave no trace in the episodes: the run checks batch invariance on them. False (a remote server that is
    not lerobench's own): the run records ``unchecked``."""


def policy_traits(policy: Any) -> PolicyTraits:
    """The policy's declared ``traits``, or defaults; the one place traits are looked up.

    Backwards compatible: a policy written before ``PolicyTraits`` that sets the class attributes
    ``copy_safe``, ``replicable`` or ``batchable`` has them honoured here.
    """
    declared = getattr(policy, "traits", None)
    if isinstance(declared, PolicyTraits):
        return declared
    legacy = {name: value for name in ("copy_safe", "replicable", "batchable")
              if isinstance(value := getattr(policy, name, None), bool)}
    return PolicyTraits(**legacy)


def observation_needs(policy: Any) -> ObservationNeeds:
    """A policy's declared needs; policies that declare nothing are state-only."""
    needs = getattr(policy, "observation_needs", None)
    return needs if isinstance(needs, ObservationNeeds) else ObservationNeeds()


def policy_numerics(policy: Any) -> dict[str, Any] | None:
    """A torch policy's numerics (torch version, device, dtype, call width, determinism flags), else None."""
    numerics = getattr(policy, "numerics", None)
    return dict(numerics) if isinstance(numerics, dict) else None


def close_policy(policy: Any) -> None:
    """Call the policy's optional ``close()`` (connections, GPU memory); policies without one need nothing."""
    close = getattr(policy, "close", None)
    if callable(close):
        close()


def row_ids(observation: dict[str, Any]) -> np.ndarray:
    """The key of each row's per-env state: ``observation['slot']`` (env index, or serving slot), else its position."""
    slots = observation.get("slot")
    return np.asarray(slots) if slots is not None else np.arange(len(observation["state"]))


def row_seeds(observation: dict[str, Any]) -> list[int]:
    """One seed per row, a pure function of (run seed, task, episode, trial, call index within the trial).

    Never of the batch, the row's position or the executor: the basis of batch-invariant randomness.
    """
    n = len(observation["state"])
    zeros = np.zeros(n, dtype=np.int64)
    episode_seed = np.asarray(observation.get("episode_seed", zeros), dtype=np.int64)
    trial = np.asarray(observation.get("trial", zeros), dtype=np.int64)
    call = np.asarray(observation.get("call", zeros), dtype=np.int64)
    return [int(np.random.SeedSequence([int(e) & 0xFFFFFFFF, int(t), int(c), 0x5EED]).generate_state(1)[0])
            for e, t, c in zip(episode_seed, trial, call, strict=True)]


def row_generators(observation: dict[str, Any]) -> list[np.random.Generator]:
    """One ``numpy.random.Generator`` per row, keyed on (run seed, task, episode, trial, call index).

    Draw a row's noise (action sampling, a diffusion / flow-matching initial noise) from its own generator
    and the policy stays batch-invariant: the same episode sees the same numbers at any batch size.
    """
    return [np.random.default_rng(seed) for seed in row_seeds(observation)]


def row_noise(observation: dict[str, Any], shape: tuple[int, ...]) -> np.ndarray:
    """Standard-normal noise (B, *shape) float32, row i from ``row_generators(observation)[i]``.

    What a diffusion / flow-matching policy passes as its initial noise tensor (``torch.from_numpy``).
    """
    return np.stack([g.standard_normal(shape, dtype=np.float32) for g in row_generators(observation)]) \
        if len(observation["state"]) else np.zeros((0, *shape), np.float32)


@runtime_checkable
class Policy(Protocol):
    """A policy evaluated by lerobench."""

    observation_needs: ObservationNeeds

    def reset(self) -> None:
        """Forget all state; called once before the first episode of a run (and on each thread's copy).

        Per-episode state must be reset where ``observation['episode_start']`` is True (not at
        ``trial_start``: memory across an episode's trials is what ``--trials`` measures). With
        ``--parallel-tasks`` this runs on a shallow copy: rebind state attributes, never mutate shared ones.
        """

    def select_action(self, observation: PolicyBatch, task_descriptions: list[str]) -> np.ndarray:
        """Return actions (B, A) or an action chunk (B, T, A) for the batch of observations.

        ``observation`` is a ``PolicyBatch`` (``policies/batch.py``): a dict of every key, with the typed views
        ``observation.observation`` (what was seen) and ``observation.rows`` (what each row is).
        """
