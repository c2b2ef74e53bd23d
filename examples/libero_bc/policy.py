"""A visuomotor behaviour-cloning policy for LIBERO: two cameras, the 8-D state and the task, to action chunks.

What it reads is what a learned LIBERO policy reads (openpi, OpenVLA, LeRobot's): the ``agentview`` and wrist
(``robot0_eye_in_hand``) images and the 8-D proprioceptive state (end-effector position, axis-angle, gripper
joints), plus a one-hot of the task (``observation["task"]``); never the simulator's state. Each camera goes through
a small convolutional encoder ending in a spatial softmax (the expected image position of each feature map: where
things are, which is what a pick-and-place needs; robomimic's visuomotor BC does the same), then an MLP predicts a
chunk of ``chunk`` actions, of which ``ObservationNeeds.replan_steps`` are executed before the policy looks again,
so an evaluation renders its cameras once per ``replan_steps`` steps (docs/policies.md).

Images are downscaled inside the policy to ``image_size`` (the training recordings' size), so it runs at any
protocol image size; the protocol's 180-degree turn is in both the recordings and the evaluation.

Run a checkpoint (from the repository root; README.md says how ``train.py`` makes them)::

    lerobench eval --suite libero_object --tasks 0 --policy examples.libero_bc.policy:final
    LIBERO_BC_CHECKPOINT=path/to/early.pt lerobench eval --suite libero_object --tasks 0 \
        --policy examples.libero_bc.policy:make_policy
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lerobench.policies import ObservationNeeds, PolicyContext, PolicyTraits

DEFAULT_DIR = "runs/libero_bc"
"""Where ``train.py --out`` writes by default, relative to the working directory (the repository root)."""
CAMERAS = ("agentview", "robot0_eye_in_hand")
"""The policy's cameras, in the order of its encoders (the recordings' ``agentview_rgb``, ``eye_in_hand_rgb``)."""


class SpatialSoftmax(nn.Module):
    """Feature maps ``(B, C, H, W)`` to the expected (x, y) of each map's softmax: ``(B, 2C)`` in [-1, 1]."""

    def forward(self, maps: torch.Tensor) -> torch.Tensor:
        """The keypoints: x of every map, then y of every map."""
        b, c, h, w = maps.shape
        weights = torch.softmax(maps.reshape(b, c, h * w), dim=-1).reshape(b, c, h, w)
        ys = torch.linspace(-1.0, 1.0, h, dtype=maps.dtype, device=maps.device)
        xs = torch.linspace(-1.0, 1.0, w, dtype=maps.dtype, device=maps.device)
        return torch.cat([(weights.sum(2) * xs).sum(-1), (weights.sum(3) * ys).sum(-1)], dim=1)


def encoder(channels: int) -> nn.Sequential:
    """One camera's encoder: three convolutions (to a quarter of the image's side), then the spatial softmax.

    Why this small: an update of a batch of 64 costs ~0.1 s on one CPU core at 64x64 (four times that with 32
    channels at half the image's side), and the example's whole budget is 30 minutes.
    """
    return nn.Sequential(
        nn.Conv2d(3, 16, 5, stride=2, padding=2), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(32, channels, 3, stride=1, padding=1),
        SpatialSoftmax(),
    )


def to_model_input(images: torch.Tensor) -> torch.Tensor:
    """uint8 ``(B, H, W, 3)`` (a recording's) -> float ``(B, 3, H, W)`` in [0, 1].

    As lerobench's ``TorchPolicy`` converts the images it hands a module (docs/policies.md): training sees what
    evaluation gives.
    """
    return images.permute(0, 3, 1, 2).float() / 255


class VisuomotorBC(nn.Module):
    """(two camera images, normalised 8-D state, task one-hot) -> a chunk of 7-D actions in [-1, 1]."""

    traits = PolicyTraits(replicable=True, batchable=True)
    """Each row depends only on its own observation; the run itself checks batch invariance."""
    state_mean: torch.Tensor
    state_std: torch.Tensor

    def __init__(self, tasks: list[str], image_size: int = 64, chunk: int = 8, replan_steps: int = 4,
                 hidden: int = 256, channels: int = 32, state_dim: int = 8, action_dim: int = 7):
        super().__init__()
        self.tasks, self.image_size, self.chunk, self.replan_steps = list(tasks), image_size, chunk, replan_steps
        self.hidden, self.channels, self.action_dim = hidden, channels, action_dim
        self.observation_needs = ObservationNeeds(cameras=CAMERAS, replan_steps=replan_steps)
        self.register_buffer("state_mean", torch.zeros(state_dim))
        self.register_buffer("state_std", torch.ones(state_dim))
        self.encoders = nn.ModuleList(encoder(channels) for _ in CAMERAS)
        self.head = nn.Sequential(
            nn.Linear(2 * channels * len(CAMERAS) + state_dim + len(tasks), hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, chunk * action_dim), nn.Tanh(),
        )

    def config(self) -> dict[str, Any]:
        """The constructor's arguments (a checkpoint rebuilds the same network from them)."""
        return {"tasks": self.tasks, "image_size": self.image_size, "chunk": self.chunk,
                "replan_steps": self.replan_steps, "hidden": self.hidden, "channels": self.channels}

    def forward(self, images: list[torch.Tensor], state: torch.Tensor, task_index: torch.Tensor) -> torch.Tensor:
        """Chunks ``(B, chunk, 7)`` from images, states ``(B, 8)`` and task indices ``(B,)``.

        Images per camera are float ``(B, 3, H, W)`` in [0, 1], as lerobench hands a module them (``to_model_input``).
        """
        features = [net(self.prepare(image)) for net, image in zip(self.encoders, images, strict=True)]
        x = (state - self.state_mean) / self.state_std
        one_hot = nn.functional.one_hot(task_index, len(self.tasks)).to(x.dtype)
        out = self.head(torch.cat([*features, x, one_hot], dim=1))
        return out.reshape(len(state), self.chunk, self.action_dim)

    def prepare(self, x: torch.Tensor) -> torch.Tensor:
        """Images ``(B, 3, H, W)`` in [0, 1] at the training size ``S``: ``(B, 3, S, S)``."""
        if x.shape[-1] != self.image_size or x.shape[-2] != self.image_size:
            x = nn.functional.interpolate(x, size=(self.image_size, self.image_size), mode="area")
        return x

    def task_indices(self, names: list[str]) -> torch.Tensor:
        """Each row's task as an index into ``self.tasks``; a task it was not trained on is an error naming it."""
        unknown = sorted(set(names) - set(self.tasks))
        if unknown:
            raise ValueError(f"this LIBERO BC policy was trained on {self.tasks}, not on {unknown}")
        return torch.tensor([self.tasks.index(n) for n in names], dtype=torch.long)

    def reset(self) -> None:
        """Stateless: each chunk is a function of the row's observation only."""

    def select_action(self, observation: dict[str, Any], task_descriptions: list[str]) -> torch.Tensor:
        """One chunk per row, from its cameras, state and the task named in ``observation["task"]``."""
        state = observation["state"]
        images = [observation["images"][camera] for camera in CAMERAS]
        return self(images, state, self.task_indices(list(observation["task"])).to(state.device))


def save(policy: VisuomotorBC, path: Path, **meta: Any) -> None:
    """Write the policy (weights, its configuration, ``meta``) atomically: never half a checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save({"state_dict": policy.state_dict(), "config": policy.config(), "meta": meta}, tmp)
    os.replace(tmp, path)


def load(path: str | Path) -> VisuomotorBC:
    """A policy from a checkpoint ``save`` wrote (plain tensors, strings and numbers: ``weights_only`` loading)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no LIBERO BC checkpoint at {path.resolve()}: train one with "
                                f"`python examples/libero_bc/train.py --demos RUN_DIR --out {path.parent}` (README.md)")
    blob = torch.load(path, map_location="cpu", weights_only=True)
    policy = VisuomotorBC(**blob["config"])
    policy.load_state_dict(blob["state_dict"])
    return policy.eval()


def _checkpoint_dir() -> Path:
    return Path(os.environ.get("LIBERO_BC_DIR", DEFAULT_DIR))


def make_policy(context: PolicyContext) -> VisuomotorBC:
    """``--policy examples.libero_bc.policy:make_policy``: the checkpoint ``$LIBERO_BC_CHECKPOINT`` names."""
    return load(os.environ.get("LIBERO_BC_CHECKPOINT", _checkpoint_dir() / "final.pt"))


def early(context: PolicyContext) -> VisuomotorBC:
    """``--policy examples.libero_bc.policy:early``: ``early.pt`` in ``$LIBERO_BC_DIR`` (the weaker one)."""
    return load(_checkpoint_dir() / "early.pt")


def final(context: PolicyContext) -> VisuomotorBC:
    """``--policy examples.libero_bc.policy:final``: ``final.pt`` in ``$LIBERO_BC_DIR``."""
    return load(_checkpoint_dir() / "final.pt")
