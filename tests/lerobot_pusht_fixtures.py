"""LeRobot policies shaped as LeRobot trains them on PushT, with random weights, saved by the installed LeRobot.

``observation.image`` 3x96x96 and a 2-D ``observation.state``, actions in gym-pusht's workspace (the saved
normalisation statistics are PushT's scale, so actions land inside [0, 512]). The same code runs under LeRobot 0.4.4
(Python 3.11) and 0.6.1 (Python 3.12): ``python tests/lerobot_pusht_fixtures.py DIR`` saves both into DIR, which the
other version's tests then load (``scripts/test-lerobot-current.sh``), with the ACT of tests/test_lerobot.py's per-env
queue test (``act-corner3``).
"""

import sys
from pathlib import Path

import torch


def _features():
    from lerobot.configs.types import FeatureType, PolicyFeature

    inputs = {"observation.image": PolicyFeature(type=FeatureType.VISUAL, shape=(3, 96, 96)),
              "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(2,))}
    outputs = {"action": PolicyFeature(type=FeatureType.ACTION, shape=(2,))}
    workspace = {"mean": torch.full((2,), 256.0), "std": torch.full((2,), 100.0),
                 "min": torch.full((2,), 12.0), "max": torch.full((2,), 500.0)}
    stats = {"observation.state": workspace, "action": workspace,
             "observation.image": {"mean": torch.full((3, 1, 1), 0.5), "std": torch.full((3, 1, 1), 0.25),
                                   "min": torch.zeros((3, 1, 1)), "max": torch.ones((3, 1, 1))}}
    return inputs, outputs, stats


def _save(config_class, policy_class, settings, directory):
    from lerobot.policies.factory import make_pre_post_processors

    torch.manual_seed(0)
    inputs, outputs, stats = _features()
    config = config_class(input_features=inputs, output_features=outputs, **settings)
    policy = policy_class(config)
    pre, post = make_pre_post_processors(config, dataset_stats=stats)
    for part in (policy, pre, post):
        part.save_pretrained(str(directory))
    return Path(directory)


def save_pusht_diffusion(directory, **overrides):
    """A diffusion policy as LeRobot's PushT config has it (2 observations, chunks), shrunk: tiny U-Net, 4 steps."""
    from lerobench.policies.lerobot_policy import _import_lerobot

    _import_lerobot()
    from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
    from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy

    settings = dict(n_obs_steps=2, horizon=8, n_action_steps=4, down_dims=(16, 32), kernel_size=3, n_groups=4,
                    diffusion_step_embed_dim=16, num_train_timesteps=20, num_inference_steps=4,
                    pretrained_backbone_weights=None, use_group_norm=True, crop_shape=None, device="cpu")
    return _save(DiffusionConfig, DiffusionPolicy, {**settings, **overrides}, directory)


def save_pusht_act(directory, **overrides):
    """An ACT reading PushT's image and state, chunks of 10, shrunk: one encoder and one decoder layer."""
    from lerobench.policies.lerobot_policy import _import_lerobot

    _import_lerobot()
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy

    settings = dict(chunk_size=10, n_action_steps=10, dim_model=32, n_heads=2, dim_feedforward=64,
                    n_encoder_layers=1, n_decoder_layers=1, use_vae=False, pretrained_backbone_weights=None,
                    device="cpu")
    return _save(ACTConfig, ACTPolicy, {**settings, **overrides}, directory)


SAVERS = {"diffusion": save_pusht_diffusion, "act": save_pusht_act}


if __name__ == "__main__":
    root = Path(sys.argv[1])
    for name, save in SAVERS.items():
        print(save(root / name))
    from test_lerobot import QUEUE_ACT, save_tiny_act  # and the ACT of test_lerobot.py's per-env queue test

    print(save_tiny_act(root / "act-corner3", **QUEUE_ACT))
