"""LeRobot's ACT shaped as LeRobot trains it on ALOHA, with random weights, saved by the installed LeRobot.

LeRobot's ALOHA layout (``lerobot/act_aloha_sim_transfer_cube_human``): ``observation.images.top`` 3x480x640,
``observation.state`` 14-D, 14-D actions, chunks of 100 all executed (``n_action_steps`` 100), a ResNet18 backbone
(no pretrained weights here: nothing is downloaded); the ``te`` variant has temporal ensembling on
(``temporal_ensemble_coeff`` 0.01, ``n_action_steps`` 1: asked at every step). ``size="test"`` shrinks the
transformer (dim 32, one layer each) so that the saved files are ~45 MB, nearly all ResNet18's 11 M weights, and a
480x640 call costs ~1 s on a 2-core CPU; ``size="default"`` is LeRobot's ACTConfig as its ALOHA policy has it
(dim 512, 4 encoder layers, 1 decoder layer, VAE; 52 M parameters). Normalisation is mean/std (LeRobot's ACT
default) around gym-aloha's start pose, so random actions stay near the arms' resting joints.

Never committed: tests save them into a temporary folder (session-scoped; under LeRobot 0.6.1 in
``scripts/test-lerobot-current.sh``, so 0.6.1 saves them there). ``python tests/lerobot_aloha_fixtures.py DIR``
saves ``act-aloha`` and ``act-aloha-te`` into DIR (by hand: one LeRobot's files for the other to load;
``benchmarks/aloha_side_by_side.py`` saves the default-size one the same way).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

START_POSE = (0.0, -0.96, 1.16, 0.0, -0.3, 0.0, 0.1, 0.0, -0.96, 1.16, 0.0, -0.3, 0.0, 0.1)
"""gym-aloha's ``agent_pos`` after a reset (both arms' six joints, then a normalised gripper each), rounded."""
TEST_SIZE = dict(dim_model=32, n_heads=2, dim_feedforward=64, n_encoder_layers=1, n_decoder_layers=1,
                 n_vae_encoder_layers=1)
SIZES: dict[str, dict[str, Any]] = {"default": {}, "test": TEST_SIZE}
TEMPORAL_ENSEMBLING = dict(temporal_ensemble_coeff=0.01, n_action_steps=1)
"""LeRobot's ACT with temporal ensembling, as its config documents it (0.01, the ACT paper's; one action a step)."""


def save_aloha_act(directory: Path | str, *, ensemble: bool = False, size: str = "test", **overrides: Any) -> Path:
    """Save a random-init ACT with LeRobot's ALOHA features into ``directory`` (also its pre/post-processors)."""
    from lerobench.policies.lerobot_policy import _import_lerobot

    _import_lerobot()  # torchvision as lerobench imports it (tolerates a CUDA build beside a CPU torch)
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    torch.manual_seed(0)
    inputs = {"observation.images.top": PolicyFeature(type=FeatureType.VISUAL, shape=(3, 480, 640)),
              "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(14,))}
    outputs = {"action": PolicyFeature(type=FeatureType.ACTION, shape=(14,))}
    joints = {"mean": torch.tensor(START_POSE), "std": torch.full((14,), 0.1),
              "min": torch.tensor(START_POSE) - 0.5, "max": torch.tensor(START_POSE) + 0.5}
    stats = {"observation.state": joints, "action": dict(joints),
             "observation.images.top": {"mean": torch.full((3, 1, 1), 0.5), "std": torch.full((3, 1, 1), 0.25),
                                        "min": torch.zeros((3, 1, 1)), "max": torch.ones((3, 1, 1))}}
    settings = {"chunk_size": 100, "n_action_steps": 100, "pretrained_backbone_weights": None, "device": "cpu",
                **SIZES[size], **(TEMPORAL_ENSEMBLING if ensemble else {}), **overrides}
    config = ACTConfig(input_features=inputs, output_features=outputs, **settings)
    policy = ACTPolicy(config)
    pre, post = make_pre_post_processors(config, dataset_stats=stats)
    directory = Path(directory)
    for part in (policy, pre, post):
        part.save_pretrained(str(directory))
    return directory


SAVERS = {"act-aloha": lambda d: save_aloha_act(d), "act-aloha-te": lambda d: save_aloha_act(d, ensemble=True)}
"""Folder name -> saver: chunks of 100; temporal ensembling."""


if __name__ == "__main__":
    root = Path(sys.argv[1])
    for name, save in SAVERS.items():
        print(save(root / name))
