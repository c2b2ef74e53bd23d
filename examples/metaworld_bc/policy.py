"""A behaviour-cloning MLP for Meta-World MT10: the 39-D state plus a one-hot of the task, to a 4-D action.

Why a one-hot of the task: MT10's observation does not say which task is running (a drawer and a window look alike
to the state), but every observation batch names it (``observation["task"]``), so one network serves all ten tasks
(the multi-task BC baseline of the Meta-World paper). Why state only: it trains in minutes on two CPU cores and
needs no rendering, so an evaluation costs simulation only.

Run a checkpoint (from the repository root; see README.md for the checkpoints ``train.py`` writes)::

    lerobench eval --suite metaworld_mt10 --policy examples.metaworld_bc.policy:final
    lerobench eval --suite metaworld_mt10 --policy examples.metaworld_bc.policy:early
    METAWORLD_BC_CHECKPOINT=path/to/step_1000.pt lerobench eval --suite metaworld_mt10 \
        --policy examples.metaworld_bc.policy:make_policy

``early`` and ``final`` load ``early.pt`` / ``final.pt`` from ``$METAWORLD_BC_DIR`` (default ``runs/metaworld_bc``),
so the policy name in ``results.json`` says which checkpoint ran; ``make_policy`` loads the file named by
``$METAWORLD_BC_CHECKPOINT`` (default: the final one). ``PolicyContext.options`` is empty for ``lerobench eval``,
hence environment variables rather than a factory argument.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lerobench.policies import ObservationNeeds, PolicyContext, PolicyTraits

DEFAULT_DIR = "runs/metaworld_bc"
"""Where ``train.py --out`` writes by default, relative to the working directory (the repository root)."""


class BCPolicy(nn.Module):
    """An MLP from (normalised state, task one-hot) to actions in [-1, 1]; no per-episode state.

    The state's mean and standard deviation (from the demonstrations) are buffers, so a checkpoint is the whole
    policy: nothing to compute again at load time, nothing to get out of step with the weights.
    """

    observation_needs = ObservationNeeds()  # state only: nothing is rendered
    traits = PolicyTraits(replicable=True, batchable=True)
    """Each row depends only on its own state and task; the run itself checks batch invariance."""
    state_mean: torch.Tensor
    state_std: torch.Tensor

    def __init__(self, tasks: list[str], state_dim: int = 39, action_dim: int = 4, hidden: int = 256):
        super().__init__()
        self.tasks = list(tasks)
        self.hidden = hidden
        self.register_buffer("state_mean", torch.zeros(state_dim))
        self.register_buffer("state_std", torch.ones(state_dim))
        self.net = nn.Sequential(
            nn.Linear(state_dim + len(tasks), hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, action_dim), nn.Tanh(),
        )

    def forward(self, state: torch.Tensor, task_index: torch.Tensor) -> torch.Tensor:
        """Actions ``(B, action_dim)`` for states ``(B, state_dim)`` and task indices ``(B,)``."""
        x = (state - self.state_mean) / self.state_std
        one_hot = nn.functional.one_hot(task_index, len(self.tasks)).to(x.dtype)
        return self.net(torch.cat([x, one_hot], dim=1))

    def task_indices(self, names: list[str]) -> torch.Tensor:
        """Each row's task as an index into ``self.tasks``; a task it was not trained on is an error naming it."""
        unknown = sorted(set(names) - set(self.tasks))
        if unknown:
            raise ValueError(f"this BC policy was trained on {self.tasks}, not on {unknown}")
        return torch.tensor([self.tasks.index(n) for n in names], dtype=torch.long)

    def reset(self) -> None:
        """Stateless: each action is a function of the row's observation only."""

    def select_action(self, observation: dict[str, Any], task_descriptions: list[str]) -> torch.Tensor:
        """One action per row, from its state and the task named in ``observation["task"]``."""
        state = observation["state"]
        return self(state, self.task_indices(list(observation["task"])).to(state.device))


def save(policy: BCPolicy, path: Path, **meta: Any) -> None:
    """Write the policy (weights, tasks, width, ``meta``) atomically: a crash never leaves half a checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save({"state_dict": policy.state_dict(), "tasks": policy.tasks, "hidden": policy.hidden, "meta": meta},
               tmp)
    os.replace(tmp, path)


def load(path: str | Path) -> BCPolicy:
    """A policy from a checkpoint ``save`` wrote (plain tensors, strings and numbers: ``weights_only`` loading)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no BC checkpoint at {path.resolve()}: train one with "
                                f"`python examples/metaworld_bc/train.py --out {path.parent}`")
    blob = torch.load(path, map_location="cpu", weights_only=True)
    policy = BCPolicy(blob["tasks"], hidden=blob["hidden"])
    policy.load_state_dict(blob["state_dict"])
    return policy.eval()


def _checkpoint_dir() -> Path:
    return Path(os.environ.get("METAWORLD_BC_DIR", DEFAULT_DIR))


def make_policy(context: PolicyContext) -> BCPolicy:
    """``--policy examples.metaworld_bc.policy:make_policy``: the checkpoint ``$METAWORLD_BC_CHECKPOINT`` names."""
    return load(os.environ.get("METAWORLD_BC_CHECKPOINT", _checkpoint_dir() / "final.pt"))


def early(context: PolicyContext) -> BCPolicy:
    """``--policy examples.metaworld_bc.policy:early``: ``early.pt`` in ``$METAWORLD_BC_DIR`` (the weaker one)."""
    return load(_checkpoint_dir() / "early.pt")


def final(context: PolicyContext) -> BCPolicy:
    """``--policy examples.metaworld_bc.policy:final``: ``final.pt`` in ``$METAWORLD_BC_DIR``."""
    return load(_checkpoint_dir() / "final.pt")
