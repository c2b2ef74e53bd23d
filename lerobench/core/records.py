"""One episode's record: a line of ``episodes.jsonl``.

Its own module so that every reader and writer (results, trials, rundir, executors) can import it without
importing each other.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class EpisodeRecord:
    """One finished episode (one line of ``episodes.jsonl``); frozen so the writer gets a snapshot."""

    task: str
    episode: int
    trial: int
    seed: int
    init_state: int
    success: bool
    success_at_end: bool
    steps: int
    return_: float
    elapsed_s: float
    error: str | None = None
    video: str | None = None
    renders: int = 0
    max_reward: float | None = None
    """Largest single-step reward (None for an episode with no step), for LeRobot's ``max_rewards``."""
    start_digest: str | None = None
    """Hash of the simulator state right after reset (``lerobench.envs.perturb.start_digest``): equal digests
    mean the same start, which ``compare`` and ``robustness`` require to pair two episodes."""
    policy_check: dict[str, Any] | None = None
    """The batch-invariance check of the policy's first call in the process that ran this episode
    (``lerobench.policies.invariance``), on the first record reported after it; None on every other record."""
    clipped: float | None = None
    """Fraction of the episode's action values outside the action space (the backend's ``action_bounds``: [-1, 1]
    for LIBERO and Meta-World), clipped by the simulator (an
    un-normalised policy looks weak, not broken); None for an episode with no step or written before this field."""
    call_delays: list[int] | None = None
    """``--delay-steps measured``: the control steps each policy call of the trial covered (⌈latency × control
    rate⌉; 0 for its first call, where the env waits); None in every other run (the line then omits it)."""
    obs_digest: str | None = None
    """Hash chain over every observation the policy read in this trial, in order (``rollout.observation_digest``):
    equal seeds and start digests with different ``obs_digest`` mean the policy was shown different inputs."""
    obs_reads: int | None = None
    """Observations (policy-call rows) the chain covers; None in files written before digests existed."""
    obs_read_digests: str | None = None
    """4 bytes per part (``obs_parts``) per read, base64: names the first read that differs between two runs."""
    obs_parts: list[str] | None = None
    """The parts of each read, in order: ``state`` then the cameras."""
    progress: float | None = None
    """The task's progress in [0, 1] after the last step, by the benchmark's own definition (PushT: coverage of the
    goal); None where the backend defines none (the line then omits it)."""
    max_progress: float | None = None
    """The highest progress at any step of the episode (LeRobot's ``max_reward`` is its analogue on PushT)."""

    def to_json(self) -> dict[str, Any]:
        """JSON form: ``return_`` is written as ``return``."""
        data = asdict(self)
        data["return"] = data.pop("return_")
        if data["policy_check"] is None:
            del data["policy_check"]  # only the record after a check carries one
        if data["call_delays"] is None:
            del data["call_delays"]  # only measured-delay runs carry them
        for key in ("progress", "max_progress"):
            if data[key] is None:
                del data[key]  # only backends that define progress write it
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EpisodeRecord:
        """Inverse of ``to_json``."""
        data = dict(data)
        data["return_"] = data.pop("return")
        return cls(**data)
