"""Random-weight LeRobot ACT and diffusion checkpoints, saved as ``lerobot:DIR`` loads them (benchmark fixtures).

One builder for every benchmark that times or compares LeRobot policies (``call_shape.py``, ``call_width.py``,
``call_shape_runs.py``): a ResNet18 backbone without pretrained weights, seed 0, mean/std normalisation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def save_random_lerobot(kind: str, directory: Path, *, cameras: tuple[str, ...], image: int, state_dim: int = 39,
                        action_dim: int = 4, action_std: float = 1.0, diffusion_steps: int = 10) -> Path:
    """Save a random ``kind`` ("act": chunk 10; "diffusion": DDPM with ``diffusion_steps``) reading ``cameras``."""
    import torch

    from lerobench.policies.lerobot_policy import _import_lerobot

    _import_lerobot()
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.factory import make_pre_post_processors

    torch.manual_seed(0)
    inputs = {"observation.state": PolicyFeature(type=FeatureType.STATE, shape=(state_dim,))}
    stats = {"observation.state": {"mean": torch.zeros(state_dim), "std": torch.ones(state_dim),
                                   "min": -torch.ones(state_dim), "max": torch.ones(state_dim)},
             "action": {"mean": torch.zeros(action_dim), "std": torch.full((action_dim,), action_std),
                        "min": -torch.ones(action_dim), "max": torch.ones(action_dim)}}
    for cam in cameras:
        inputs[cam] = PolicyFeature(type=FeatureType.VISUAL, shape=(3, image, image))
        stats[cam] = {"mean": torch.full((3, 1, 1), 0.5), "std": torch.full((3, 1, 1), 0.25),
                      "min": torch.zeros((3, 1, 1)), "max": torch.ones((3, 1, 1))}
    outputs = {"action": PolicyFeature(type=FeatureType.ACTION, shape=(action_dim,))}
    config: Any
    if kind == "act":
        from lerobot.policies.act.configuration_act import ACTConfig
        from lerobot.policies.act.modeling_act import ACTPolicy

        config = ACTConfig(input_features=inputs, output_features=outputs, pretrained_backbone_weights=None,
                           chunk_size=10, n_action_steps=10, device="cpu")
        policy: Any = ACTPolicy(config)
    else:
        from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
        from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy

        config = DiffusionConfig(input_features=inputs, output_features=outputs, pretrained_backbone_weights=None,
                                 crop_shape=None, num_inference_steps=diffusion_steps, device="cpu")
        policy = DiffusionPolicy(config)
    pre, post = make_pre_post_processors(config, dataset_stats=stats)
    for part in (policy, pre, post):
        part.save_pretrained(str(directory))
    return directory
