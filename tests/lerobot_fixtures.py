"""Tiny LeRobot policies with random weights, saved with their pre/post-processors (shared by the tests)."""

import torch


def _features(state_dim, action_dim, image_key, image_hw):
    from lerobot.configs.types import FeatureType, PolicyFeature

    inputs = {"observation.state": PolicyFeature(type=FeatureType.STATE, shape=(state_dim,))}
    stats = {"observation.state": {"mean": torch.zeros(state_dim), "std": torch.ones(state_dim),
                                   "min": torch.full((state_dim,), -3.0), "max": torch.full((state_dim,), 3.0)},
             "action": {"mean": torch.full((action_dim,), 0.1), "std": torch.full((action_dim,), 0.5),
                        "min": torch.full((action_dim,), -1.0), "max": torch.full((action_dim,), 1.0)}}
    if not image_key:  # these policies want an image or an environment state: the full Meta-World state
        inputs["observation.environment_state"] = PolicyFeature(type=FeatureType.ENV, shape=(39,))
        stats["observation.environment_state"] = {"mean": torch.zeros(39), "std": torch.ones(39),
                                                  "min": torch.full((39,), -3.0), "max": torch.full((39,), 3.0)}
    else:
        inputs[image_key] = PolicyFeature(type=FeatureType.VISUAL, shape=(3, *image_hw))
        stats[image_key] = {"mean": torch.full((3, 1, 1), 0.5), "std": torch.full((3, 1, 1), 0.25),
                            "min": torch.zeros((3, 1, 1)), "max": torch.ones((3, 1, 1))}
    outputs = {"action": PolicyFeature(type=FeatureType.ACTION, shape=(action_dim,))}
    return inputs, outputs, stats


def save_tiny_diffusion(directory, state_dim=39, action_dim=4, image_key=None, image_hw=(64, 64), **overrides):
    """A diffusion policy (DDPM, 2 observations of history, horizon 8) with random weights."""
    from lerobench.policies.lerobot_policy import _import_lerobot

    _import_lerobot()
    from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
    from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy
    from lerobot.policies.factory import make_pre_post_processors

    torch.manual_seed(0)
    inputs, outputs, stats = _features(state_dim, action_dim, image_key, image_hw)
    settings = dict(n_obs_steps=2, horizon=8, n_action_steps=4, down_dims=(16, 32), kernel_size=3,
                    n_groups=4, diffusion_step_embed_dim=16, num_train_timesteps=20, num_inference_steps=4,
                    pretrained_backbone_weights=None, use_group_norm=True, crop_shape=None, device="cpu")
    settings.update(overrides)
    config = DiffusionConfig(input_features=inputs, output_features=outputs, **settings)
    policy = DiffusionPolicy(config)
    pre, post = make_pre_post_processors(config, dataset_stats=stats)
    for part in (policy, pre, post):
        part.save_pretrained(str(directory))
    return directory
