"""A reference policy that adapts within an episode: Meta-World reach with the goal hidden.

Why it exists: ``--trials`` measures whether a policy does better on a second attempt at the same
start. A test of that machinery needs a policy that genuinely learns from its own experience inside
an episode, using only what any policy receives: the observation (hand position ``state[0:3]``) and
the previous step's dense ``reward`` (``observation["reward"]``). The goal slots ``state[36:39]`` are
zero in the ML suites, so the goal cannot be read, only found.

Trial 0 explores: the hand follows a fixed search pattern through Meta-World's reach goal box while
remembering where the reward was highest; when the pattern is done it returns there and holds.
Later trials exploit: go straight to the remembered best point, then refine it by pattern search on
the reward (probe +/- each axis; keep any improvement; halve the probe when none helps). The memory
(best point and reward) lives per env slot and is forgotten only at ``episode_start``; a
``trial_start`` only restarts the plan. A memoryless policy would repeat trial 0 and gain nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lerobench.errors import ConfigError
from lerobench.policies.base import ObservationNeeds, PolicyContext, PolicyTraits, row_ids
from lerobench.policies.batch import PolicyBatch

GOAL_LOW = np.array([-0.1, 0.8, 0.05])
GOAL_HIGH = np.array([0.1, 0.9, 0.3])
"""Meta-World reach-v3's goal box (``goal_low``/``goal_high`` of ``SawyerReachEnvV3``)."""

GAIN = 25.0
"""Position error (m) to action; an action of 1 moves the hand's mocap 1 cm per step."""
ARRIVED = 0.01
"""Distance (m) at which a waypoint or probe counts as reached."""
PROBE = 0.04
"""First probe distance (m) of the pattern search; halved (down to ``MIN_PROBE``) when no probe helps."""
MIN_PROBE = 0.005
MAX_LEG_STEPS = 60
"""A waypoint not reached in this many steps (e.g. outside the arm's reach) is skipped."""


def search_pattern() -> list[np.ndarray]:
    """Trial 0's fixed exploration: the goal box's outline at its bottom and top heights.

    It passes near some goals (a success in trial 0) and far from most; the reward along the way
    still says which point of the outline is nearest the goal, which is what later trials start from.
    """
    (x0, y0, z0), (x1, y1, z1) = GOAL_LOW, GOAL_HIGH
    pattern = []
    for z in (z0, z1):
        pattern += [np.array(p) for p in ((x0, y0, z), (x1, y0, z), (x1, y1, z), (x0, y1, z), (x0, y0, z))]
    return pattern


_DIRECTIONS = [np.array(d, dtype=float) for d in
               ((0, 0, 1), (0, 0, -1), (1, 0, 0), (-1, 0, 0), (0, 1, 0), (0, -1, 0))]


@dataclass
class _Memory:
    """One env slot's episode memory (kept across trials) and current plan (restarted each trial)."""

    best_reward: float = -np.inf
    best_pos: np.ndarray | None = None
    waypoints: list[np.ndarray] = field(default_factory=list)
    leg_steps: int = 0
    probe: float = PROBE
    direction: int = 0
    improved: bool = False

    def remember(self, pos: np.ndarray, reward: float) -> None:
        if reward > self.best_reward:
            self.best_reward, self.best_pos = reward, pos.copy()
            self.improved = True

    def start_trial(self, trial: int, pos: np.ndarray) -> None:
        self.leg_steps, self.direction, self.improved = 0, 0, False
        if trial == 0 or self.best_pos is None:
            self.waypoints = search_pattern()
        else:
            self.waypoints = [self.best_pos.copy()]
            self.probe = PROBE

    def target(self, trial: int, pos: np.ndarray) -> np.ndarray:
        if self.waypoints:
            if np.linalg.norm(self.waypoints[0] - pos) < ARRIVED or self.leg_steps >= MAX_LEG_STEPS:
                self.waypoints.pop(0)
                self.leg_steps = 0
            if self.waypoints:
                self.leg_steps += 1
                return self.waypoints[0]
            self.improved = False
        best = self.best_pos if self.best_pos is not None else pos
        if trial == 0:
            return best  # exploration trial: return to the best point seen, no refinement
        return self._refine(best, pos)

    def _refine(self, best: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """Pattern search: move to best + probe * direction; rotate directions, shrink when none helped."""
        probe_point = np.clip(best + self.probe * _DIRECTIONS[self.direction], GOAL_LOW - 0.05, GOAL_HIGH + 0.05)
        if np.linalg.norm(probe_point - pos) < ARRIVED or self.leg_steps >= MAX_LEG_STEPS // 2:
            self.leg_steps = 0
            if self.improved:
                self.improved = False
            else:
                self.direction = (self.direction + 1) % len(_DIRECTIONS)
                if self.direction == 0:
                    self.probe = max(MIN_PROBE, self.probe / 2)
            probe_point = np.clip(best + self.probe * _DIRECTIONS[self.direction], GOAL_LOW - 0.05, GOAL_HIGH + 0.05)
        self.leg_steps += 1
        return probe_point


class AdaptiveReachPolicy:
    """Explores in trial 0, exploits what it learned in later trials (see the module docstring)."""

    observation_needs = ObservationNeeds()
    traits = PolicyTraits(batchable=True, batch_invariant=True)
    """Memory keyed by ``row_ids``: rows of any calls, any batch, the same episodes."""

    def __init__(self, action_dim: int = 4):
        self.action_dim = action_dim
        self._memory: dict[int, _Memory] = {}

    def reset(self) -> None:
        """Forget every slot's memory."""
        self._memory = {}

    def select_action(self, observation: PolicyBatch, task_descriptions: list[str]) -> np.ndarray:
        """Move each env's hand toward its current target; learn from the reward of the previous step."""
        states = np.asarray(observation["state"], dtype=np.float64)
        n = len(states)
        rewards = np.asarray(observation.get("reward", np.zeros(n)), dtype=np.float64)
        actions = np.zeros((n, self.action_dim), dtype=np.float32)
        for i, key in enumerate(row_ids(observation).tolist()):
            pos = states[i, :3]
            trial = int(observation["trial"][i])
            if observation["episode_start"][i] or key not in self._memory:
                self._memory[key] = _Memory()
            memory = self._memory[key]
            if observation["trial_start"][i]:
                memory.start_trial(trial, pos)
            else:
                memory.remember(pos, float(rewards[i]))
            actions[i, :3] = np.clip(GAIN * (memory.target(trial, pos) - pos), -1.0, 1.0)
            actions[i, 3] = -1.0  # keep the gripper open
        return actions


def make_adaptive_reach(context: PolicyContext) -> AdaptiveReachPolicy:
    """Factory for ``--policy metaworld-adaptive-reach``: Meta-World reach-v3 tasks only."""
    other = [t.name for t in context.tasks if t.name != "reach-v3"]
    if context.backend != "metaworld" or other:
        raise ConfigError(
            f"policy 'metaworld-adaptive-reach' only solves Meta-World reach-v3 (suite {context.suite!r} has "
            f"backend {context.backend!r}{f' and tasks {other}' if other else ''}); try --suite metaworld_ml1_reach"
        )
    return AdaptiveReachPolicy(context.action_dim)
