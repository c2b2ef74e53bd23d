"""Generic perturbations (``--perturb``) as a wrapper around any backend's simulator, and start digests.

Why a simulator wrapper and not a gymnasium wrapper: ``LazyTaskEnv`` owns the protocol (settle steps, step
limits, rendering only the cameras read), and a perturbation must change what the *policy* experiences without
changing where an episode starts. Wrapping the simulator inside the env keeps both: the settle steps run on the
unwrapped simulator, the start digest is taken from the unwrapped physics, and every step the policy takes goes
through the wrapper.

Why noise is keyed by the episode seed: episode *i* of a task is a pure function of (run seed, task, i). The
wrapper draws its noise from a generator seeded with the episode seed ``reset_to`` receives (itself a pure
function of those three) and advanced once per step of that episode, so the noise of step *t* of episode *i* is
the same at any batch size, executor or finish order, and a perturbed run and its unperturbed control start from
the same states with the same seeds (exact pairing). Every trial of an episode replays the same noise.

Perturbations (values are floats; ``action_delay`` an integer):

- ``obs_noise=σ``: Gaussian noise of std σ added to the proprioceptive state the policy reads (not to images).
- ``action_noise=σ``: Gaussian noise of std σ times the action space's half-width (1 on [-1, 1], 256 on PushT's
  [0, 512]) added to each action, then clipped to the action space.
- ``action_delay=k``: each action is executed k steps late (for the first k steps the simulator's ``idle_action()``,
  the action that holds the robot where it is, where it has one; else zeros).
- ``camera_shift=m``: every camera moved by m metres in a random direction, one per episode.
- ``light=s``: every light's diffuse and specular intensity scaled by s.

The last two edit the MuJoCo model, so they need a simulator with ``mujoco_model()`` (both built-in backends).
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from lerobench.errors import ConfigError, unknown

PERTURBATIONS = {
    "obs_noise": "Gaussian noise (std) on the proprioceptive state the policy reads",
    "action_noise": "Gaussian noise (std, in half-widths of the action space) on every action, clipped to it",
    "action_delay": "actions executed this many steps late",
    "camera_shift": "cameras moved by this many metres in a random direction per episode",
    "light": "light intensity scale",
}
"""Names accepted by ``--perturb NAME=VALUE`` and what each changes."""

_NEUTRAL = {"obs_noise": 0.0, "action_noise": 0.0, "action_delay": 0.0, "camera_shift": 0.0, "light": 1.0}
_SALT = 0x5E7B
"""Mixed into the episode seed so perturbation noise never reuses the numbers a policy draws from the same seed."""

Perturbation = tuple[tuple[str, float], ...]
"""Sorted (name, value) pairs: hashable, picklable, and the same whatever order the user wrote them in."""


def parse_perturbations(items: str | Iterable[str]) -> Perturbation:
    """Parse ``NAME=VALUE[,NAME=VALUE]`` (one string or several) into sorted pairs; errors name the bad item."""
    parts = [items] if isinstance(items, str) else list(items)
    found: dict[str, float] = {}
    for item in (p.strip() for part in parts for p in part.split(",")):
        if not item:
            continue
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep:
            raise ConfigError(f"--perturb {item!r}: expected NAME=VALUE, e.g. action_noise=0.1")
        if name not in PERTURBATIONS:
            raise unknown("perturbation", name, PERTURBATIONS)
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(f"--perturb {name}: {raw!r} is not a number") from None
        if not np.isfinite(value) or value < 0 or (name == "light" and value == 0):
            raise ConfigError(f"--perturb {name} must be a finite number {'> 0' if name == 'light' else '>= 0'}, "
                              f"got {raw}")
        if name == "action_delay" and value != int(value):
            raise ConfigError(f"--perturb action_delay counts steps: an integer, got {raw}")
        if name in found:
            raise ConfigError(f"--perturb {name} given twice")
        found[name] = value
    return tuple(sorted((k, v) for k, v in found.items() if v != _NEUTRAL[k]))


def describe(perturbation: Perturbation) -> str:
    """``name=value,...`` (the form ``parse_perturbations`` reads back), or ``none``."""
    return ",".join(f"{k}={v:g}" for k, v in perturbation) or "none"


def start_digest(sim: Any) -> str:
    """A 16-hex-digit hash of the simulator's state right after ``reset_to`` (before settle steps).

    Hashes ``sim.physics_state()`` when the simulator has it (the exact MuJoCo state), else its ``state()``:
    two episodes with equal digests started from bit-identical states, which is what a paired comparison of a
    perturbed run against its control arm relies on.
    """
    physics = getattr(sim, "physics_state", None)
    values = physics() if physics is not None else sim.state()
    data = np.ascontiguousarray(np.asarray(values, dtype=np.float64))
    return hashlib.blake2b(data.tobytes(), digest_size=8).hexdigest()


class PerturbedSimulator:
    """A ``Simulator`` whose steps, state and model are perturbed; its start is the wrapped simulator's."""

    def __init__(self, inner: Any, perturbation: Perturbation, bounds: tuple[float, float] = (-1.0, 1.0)):
        self.inner = inner
        self.bounds = bounds
        self.settings = dict(perturbation)
        self._rng = np.random.default_rng(0)
        self._obs_noise: np.ndarray | None = None
        self._delayed: deque[np.ndarray | None] = deque()
        self._model: Any = None
        self._cam_pos: np.ndarray | None = None
        self._light: tuple[np.ndarray, np.ndarray] | None = None
        if self.settings.get("camera_shift") or "light" in self.settings:
            model_of = getattr(inner, "mujoco_model", None)
            if model_of is None:
                raise ConfigError(f"--perturb camera_shift/light need a MuJoCo simulator exposing mujoco_model(); "
                                  f"{type(inner).__name__} does not")
            self._model = model_of()
            self._cam_pos = np.array(self._model.cam_pos, copy=True)
            self._light = (np.array(self._model.light_diffuse, copy=True),
                           np.array(self._model.light_specular, copy=True))
            if "light" in self.settings:
                scale = self.settings["light"]
                self._model.light_diffuse[:] = self._light[0] * scale
                self._model.light_specular[:] = self._light[1] * scale

    def __getattr__(self, name: str) -> Any:
        # Optional Simulator methods (will_read, physics_state, mujoco_model) are the wrapped simulator's.
        return getattr(self.inner, name)

    def reset_to(self, episode: int, seed: int) -> None:
        """Reset the wrapped simulator, then restart this episode's noise stream and delay line."""
        self.inner.reset_to(episode, seed)
        self._rng = np.random.default_rng(np.random.SeedSequence([int(seed), _SALT]))
        if self._model is not None and self._cam_pos is not None:
            shift = self.settings.get("camera_shift", 0.0)
            direction = self._rng.normal(size=3)
            direction /= max(float(np.linalg.norm(direction)), 1e-12)
            self._model.cam_pos[:] = self._cam_pos + shift * direction
        self._delayed = deque([None] * int(self.settings.get("action_delay", 0)))
        self._draw_obs_noise()

    def step(self, action: np.ndarray) -> tuple[float, bool]:
        """Delay and noise the action, step, draw the next state noise."""
        action = np.asarray(action, dtype=np.float32)
        if self._delayed:
            self._delayed.append(action)
            late = self._delayed.popleft()
            action = self._idle_action(action) if late is None else late
        sigma = self.settings.get("action_noise", 0.0)
        noise = self._rng.normal(0.0, 1.0, size=action.shape) if sigma else None
        if noise is not None:
            low, high = self.bounds
            action = np.clip(action + sigma * (high - low) / 2 * noise, low, high).astype(np.float32)
        result = self.inner.step(action)
        self._draw_obs_noise()
        return result

    def _idle_action(self, like: np.ndarray) -> np.ndarray:
        """What a delayed step executes before any action arrived: the simulator's ``idle_action()``, else zeros.

        Zeros hold LIBERO's and Meta-World's arms (delta actions); PushT's action is a target position, where zeros
        would send the agent to a corner, so it says where it stands instead.
        """
        idle = getattr(self.inner, "idle_action", None)
        return np.zeros_like(like) if idle is None else np.asarray(idle(), dtype=np.float32)

    def _draw_obs_noise(self) -> None:
        sigma = self.settings.get("obs_noise", 0.0)
        self._obs_noise = None
        if sigma:
            shape = np.shape(self.inner.state())
            self._obs_noise = (sigma * self._rng.normal(0.0, 1.0, size=shape)).astype(np.float32)

    def state(self) -> np.ndarray:
        """The wrapped state plus this step's noise (drawn once per step: reading twice gives the same)."""
        state = np.asarray(self.inner.state(), dtype=np.float32)
        return state if self._obs_noise is None else state + self._obs_noise

    def render(self, camera: str, height: int, width: int) -> np.ndarray:
        """The wrapped simulator's image (cameras and lights are changed in its model)."""
        return self.inner.render(camera, height, width)

    def close(self) -> None:
        """Close the wrapped simulator (idempotent as it is)."""
        self.inner.close()


def perturb(sim: Any, perturbation: Perturbation | Mapping[str, float],
            bounds: tuple[float, float] = (-1.0, 1.0)) -> Any:
    """``sim`` wrapped with ``perturbation`` (actions within ``bounds``), or ``sim`` itself when there is none."""
    pairs = tuple(sorted(dict(perturbation).items()))
    return PerturbedSimulator(sim, pairs, bounds) if pairs else sim
