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


def _save(config_class, policy_class, inputs, outputs, stats, settings, directory):
    """Build the policy with random weights and save it beside its pre/post-processors (fitted to ``stats``)."""
    from lerobot.policies.factory import make_pre_post_processors

    config = config_class(input_features=inputs, output_features=outputs, **settings)
    policy = policy_class(config)
    pre, post = make_pre_post_processors(config, dataset_stats=stats)
    for part in (policy, pre, post):
        part.save_pretrained(str(directory))
    return directory


def save_tiny_diffusion(directory, state_dim=39, action_dim=4, image_key=None, image_hw=(64, 64), **overrides):
    """A diffusion policy (DDPM, 2 observations of history, horizon 8) with random weights."""
    from lerobench.policies.lerobot_policy import _import_lerobot

    _import_lerobot()
    from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
    from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy

    torch.manual_seed(0)
    inputs, outputs, stats = _features(state_dim, action_dim, image_key, image_hw)
    settings = dict(n_obs_steps=2, horizon=8, n_action_steps=4, down_dims=(16, 32), kernel_size=3,
                    n_groups=4, diffusion_step_embed_dim=16, num_train_timesteps=20, num_inference_steps=4,
                    pretrained_backbone_weights=None, use_group_norm=True, crop_shape=None, device="cpu")
    settings.update(overrides)
    return _save(DiffusionConfig, DiffusionPolicy, inputs, outputs, stats, settings, directory)


def _save_tiny_vlm(directory):
    """A tiny SmolVLM (4 text layers of width 64, a 2-layer vision tower on 64x64 images) and its processor, on
    disk: SmolVLA reads its VLM's config and processor by name; a local directory keeps everything offline. Its
    tokenizer splits text into characters (a word-level vocabulary of printable ASCII and SmolVLM's specials)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (
        PreTrainedTokenizerFast,
        SmolVLMConfig,
        SmolVLMImageProcessor,
        SmolVLMProcessor,
        SmolVLMVideoProcessor,
    )

    specials = ["<pad>", "<unk>", "<|im_start|>", "<end_of_utterance>", "<fake_token_around_image>",
                "<global-img>", "<image>"]
    words = specials + [chr(c) for c in range(32, 127)] + ["\n"]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", unk_token="<unk>", bos_token="<|im_start|>",
        eos_token="<end_of_utterance>",
        extra_special_tokens={"fake_image_token": "<fake_token_around_image>", "global_image_token": "<global-img>",
                              "image_token": "<image>", "end_of_utterance_token": "<end_of_utterance>"})
    config = SmolVLMConfig(
        text_config=dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=len(words)),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           image_size=64, patch_size=16),
        scale_factor=2, image_token_id=fast.convert_tokens_to_ids("<image>"))
    config.save_pretrained(str(directory))
    SmolVLMProcessor(image_processor=SmolVLMImageProcessor(size={"longest_edge": 64},
                                                           max_image_size={"longest_edge": 64}),
                     video_processor=SmolVLMVideoProcessor(), tokenizer=fast, image_seq_len=4,
                     ).save_pretrained(str(directory))
    return directory


def save_tiny_smolvla(directory, rtc=True, image_key="observation.images.corner2", image_hw=(64, 64), **overrides):
    """A SmolVLA (0.4 M parameters, random weights) on a tiny local VLM, reading the 4-D agent state and one
    camera; RTC's prefix guidance enabled when ``rtc`` (LeRobot's ``rtc_config``). Chunk 10, 5 actions executed."""
    from lerobench.policies.lerobot_policy import _import_lerobot

    _import_lerobot()
    from lerobot.policies.rtc.configuration_rtc import RTCConfig
    from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig
    from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy

    vlm = directory.parent / f"{directory.name}-vlm"
    vlm.mkdir(parents=True, exist_ok=True)
    _save_tiny_vlm(vlm)
    torch.manual_seed(0)
    inputs, outputs, stats = _features(4, 4, image_key, image_hw)
    settings = dict(vlm_model_name=str(vlm), load_vlm_weights=False, num_vlm_layers=4, chunk_size=10,
                    n_action_steps=5, resize_imgs_with_padding=image_hw, num_steps=4, tokenizer_max_length=24,
                    rtc_config=RTCConfig(enabled=rtc, execution_horizon=8), device="cpu", push_to_hub=False)
    settings.update(overrides)
    return _save(SmolVLAConfig, SmolVLAPolicy, inputs, outputs, stats, settings, directory)
