"""``--policy lerobot:<dir>``: tiny LeRobot policies with random weights, saved and loaded back from disk."""

import copy
import json
import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from lerobench.cli import app
from lerobench.errors import ConfigError
from lerobench.policies.base import PolicyContext, policy_traits
from lerobench.policies.lerobot_policy import camera_for_feature
from lerobench.policies.loading import load_policy
from lerobench.suite.registry import get_backend, load_suite

MW_ALIASES = get_backend("metaworld").camera_aliases
LIBERO_ALIASES = get_backend("libero").camera_aliases

pytestmark = pytest.mark.sim  # every test here drives a real simulator

torch = pytest.importorskip("torch")
pytest.importorskip("lerobot")
runner = CliRunner()
ELSEWHERE = os.environ.get("LEROBENCH_LEROBOT_SAVED")
"""Policies another LeRobot saved (scripts/test-lerobot-current.sh: 0.4.4's, for the tests under 0.6.1)."""
SAVED_BY = ["installed"] + (["elsewhere"] if ELSEWHERE else [])
QUEUE_ACT = dict(image_key="observation.images.corner3")
"""The ACT of the per-env queue test: saved here, or by another LeRobot as ``act-corner3`` (lerobot_pusht_fixtures)."""

METAWORLD_CAMERAS = ("corner2", "corner", "corner3", "topview", "behindGripper", "gripperPOV")


def save_tiny_act(directory, state_dim=39, action_dim=4, image_key=None, image_hw=(64, 64), constant_action=None,
                  **overrides):
    """An ACT policy with random weights (no pretrained backbone) plus its pre/post-processors; with
    ``constant_action``, its action head answers that action whatever it sees (its weights zero, its bias the
    action normalised), so a run of it can succeed (drawer-close-v3 under ``(0, 1, -1, 0)``: test_startup.py)."""
    from lerobench.policies.lerobot_policy import _import_lerobot

    _import_lerobot()  # torchvision as lerobench imports it (tolerates a CUDA build beside a CPU torch)
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    torch.manual_seed(0)
    inputs = {"observation.state": PolicyFeature(type=FeatureType.STATE, shape=(state_dim,))}
    stats = {"observation.state": {"mean": torch.zeros(state_dim), "std": torch.ones(state_dim)},
             "action": {"mean": torch.full((action_dim,), 0.1), "std": torch.full((action_dim,), 0.5)}}
    if not image_key:  # ACT wants an image or an environment state: the full Meta-World state
        inputs["observation.environment_state"] = PolicyFeature(type=FeatureType.ENV, shape=(39,))
        stats["observation.environment_state"] = {"mean": torch.zeros(39), "std": torch.ones(39)}
    else:
        inputs[image_key] = PolicyFeature(type=FeatureType.VISUAL, shape=(3, *image_hw))
        stats[image_key] = {"mean": torch.full((3, 1, 1), 0.5), "std": torch.full((3, 1, 1), 0.25)}
    settings = dict(pretrained_backbone_weights=None, dim_model=32, n_heads=2, dim_feedforward=64,
                    n_encoder_layers=1, n_decoder_layers=1, chunk_size=8, n_action_steps=4, use_vae=False,
                    device="cpu")
    settings.update(overrides)
    config = ACTConfig(input_features=inputs,
                       output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(action_dim,))},
                       **settings)
    policy = ACTPolicy(config)
    if constant_action is not None:
        head = policy.model.action_head
        with torch.no_grad():
            head.weight.zero_()
            head.bias.copy_((torch.tensor(constant_action, dtype=torch.float32) - stats["action"]["mean"])
                            / stats["action"]["std"])
    pre, post = make_pre_post_processors(config, dataset_stats=stats)
    for part in (policy, pre, post):
        part.save_pretrained(str(directory))
    return directory


def context(cameras=(), state_dim=39, backend="metaworld"):
    suite = load_suite("smoke")
    facts = get_backend(backend)
    return PolicyContext(suite=suite.name, backend=backend, tasks=suite.tasks, action_dim=4, state_dim=state_dim,
                         cameras=cameras, image_size=(64, 64), camera_aliases=facts.camera_aliases,
                         partial_states=facts.partial_states)


def observation(n, starts, seed=0, cameras=()):
    rng = np.random.default_rng(seed)
    obs = {"state": rng.normal(size=(n, 39)).astype(np.float32), "episode_start": np.asarray(starts, bool),
           "active": np.ones(n, bool), "task": ["reach-v3"] * n}
    if cameras:
        obs["images"] = {c: rng.integers(0, 255, size=(n, 64, 64, 3), dtype=np.uint8) for c in cameras}
    return obs


def test_camera_names():
    assert camera_for_feature("observation.image", MW_ALIASES, METAWORLD_CAMERAS) == "corner2"
    assert camera_for_feature("observation.images.image", MW_ALIASES, METAWORLD_CAMERAS) == "corner2"
    assert camera_for_feature("observation.images.topview", MW_ALIASES, METAWORLD_CAMERAS) == "topview"
    libero = ("agentview", "robot0_eye_in_hand")
    assert camera_for_feature("observation.images.image", LIBERO_ALIASES, libero) == "agentview"
    assert camera_for_feature("observation.images.image2", LIBERO_ALIASES, libero) == "robot0_eye_in_hand"
    assert camera_for_feature("observation.images.front", LIBERO_ALIASES, libero) is None


def test_eval_smoke_through_cli(tmp_path):
    pytest.importorskip("metaworld")
    policy_dir = save_tiny_act(tmp_path / "act", image_key="observation.image", image_hw=(480, 480))
    out = tmp_path / "run"
    result = runner.invoke(app, ["eval", "--suite", "smoke", "--policy", f"lerobot:{policy_dir}", "--episodes", "1",
                                 "--max-steps", "5", "--videos", "0", "--output", str(out)])
    assert result.exit_code == 0, result.output
    eps = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert sorted(e["task"] for e in eps) == ["button-press-v3", "reach-v3"]
    # n_action_steps 4: corner2 is rendered for the first observation and when the queue runs dry after 4 steps
    assert all(e["error"] is None and e["steps"] == 5 and e["renders"] == 2 for e in eps)
    results = json.loads((out / "results.json").read_text())
    assert results["complete"] and results["overall"]["n_episodes"] == 2
    assert results["config"]["policy"] == f"lerobot:{policy_dir}"


def scripted_observation(episode, step):
    """The fake env's observation at ``step`` of ``episode``: a 39-D state and a corner3 image, from one seed."""
    rng = np.random.default_rng(1000 * episode + step)
    return (rng.normal(size=39).astype(np.float32),
            {"corner3": rng.integers(0, 255, size=(64, 64, 3), dtype=np.uint8)})


def rollout_actions(policy, lengths):
    """Actions lerobench's rollout executes per episode, through ``run_episodes`` on the fake vector env.

    Two slots run ``len(lengths)`` episodes in order (episode e lasts ``lengths[e]`` steps): slot 0's first
    episode ends while slot 1 is mid-chunk, so slot 0 starts its next episode out of step with slot 1.
    """
    from fake_env import FakeVectorEnv, Script

    from lerobench.core.task_run import TaskRun
    from lerobench.rollout.loop import run_episodes

    task = load_suite("smoke").tasks[0]
    script = Script(length=lambda episode, trial: lengths[episode], success=lambda episode, trial: False,
                    state=lambda episode, trial, step, dim: scripted_observation(episode, step)[0],
                    images=lambda episode, trial, step: scripted_observation(episode, step)[1], state_dim=39)
    run = TaskRun(suite="smoke", task=task, seed=0, action_dim=4,
                  replan_steps=policy.observation_needs.executed_steps(1))
    env, records = FakeVectorEnv(2, script), []
    run_episodes(env, policy, run, list(range(len(lengths))), records.append)
    assert sorted((r.episode, r.steps, r.error) for r in records) == [(e, n, None) for e, n in enumerate(lengths)]
    assert not env.log.violations
    return {e: np.stack([a for (_, episode, _, _, a) in env.log.steps if episode == e]) for e in range(len(lengths))}


@pytest.mark.parametrize("saved_by", SAVED_BY)
def test_per_env_queues_match_lerobot_select_action(tmp_path, saved_by):
    """Env 0 starts a new episode while env 1 is mid-chunk: each gets what LeRobot gives a fresh episode; also
    for an ACT another LeRobot saved, against this LeRobot's own ``select_action``."""
    from lerobench.policies.lerobot_policy import _import_lerobot

    _import_lerobot()  # torchvision as lerobench imports it, before LeRobot's own modules
    policy_dir = (save_tiny_act(tmp_path / "act", **QUEUE_ACT) if saved_by == "installed"
                  else Path(ELSEWHERE) / "act-corner3")
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    policy = load_policy(f"lerobot:{policy_dir}", context(cameras=METAWORLD_CAMERAS))
    assert policy.chunked and policy.observation_needs.cameras == ("corner3",)
    assert policy.observation_needs.replan_steps == 4  # lerobench executes n_action_steps of each chunk

    reference = ACTPolicy.from_pretrained(str(policy_dir)).eval()
    pre, post = make_pre_post_processors(reference.config, pretrained_path=str(policy_dir))

    def lerobot_episode(episode, steps):
        """LeRobot's own loop (select_action + processors) for one episode alone, at every step."""
        reference.reset()
        actions = []
        for step in range(steps):
            state, images = scripted_observation(episode, step)
            batch = {"observation.state": torch.from_numpy(state[None]),
                     "observation.images.corner3": torch.from_numpy(images["corner3"][None])
                     .permute(0, 3, 1, 2).float() / 255, "task": ["Reach the goal position."]}
            with torch.inference_mode():
                actions.append(post(reference.select_action(pre(batch))).numpy()[0])
        return np.stack(actions)

    state, images = scripted_observation(0, 0)
    batch = {"state": np.stack([state, state]), "images": {"corner3": np.stack([images["corner3"]] * 2)},
             "episode_start": np.ones(2, bool), "active": np.ones(2, bool), "task": ["reach-v3"] * 2}
    assert policy.select_action(batch, ["t"] * 2).shape == (2, 4, 4)  # (B, n_action_steps, A)
    lengths = [3, 8, 5]  # slot 0: episode 0 (3 steps), then 2; slot 1: episode 1, mid-chunk at step 3
    got = rollout_actions(policy, lengths)
    for episode, steps in enumerate(lengths):
        np.testing.assert_allclose(got[episode], lerobot_episode(episode, steps), rtol=1e-5, atol=1e-6)


def test_thread_copies_share_weights_not_queues(tmp_path):
    policy = load_policy(f"lerobot:{save_tiny_act(tmp_path / 'act')}", context())
    clone = copy.copy(policy)
    assert policy_traits(policy).copy_safe and clone.module is not policy.module
    assert [p.data_ptr() for p in clone.module.parameters()] == [p.data_ptr() for p in policy.module.parameters()]
    np.testing.assert_array_equal(policy.select_action(observation(2, [True, True]), ["t"] * 2),
                                  clone.select_action(observation(2, [True, True]), ["t"] * 2))


def test_temporal_ensembling_keeps_one_ensemble_per_env(tmp_path):
    """ACT with temporal ensembling is asked at every step, each env with its own ensemble: env 1's action when
    env 0 starts a new episode beside it is what it gets beside an env mid-episode (tests/test_aloha_act.py
    compares whole staggered episodes with LeRobot's own ``select_action``)."""
    policy_dir = save_tiny_act(tmp_path / "act", temporal_ensemble_coeff=0.01, n_action_steps=1)
    policy = load_policy(f"lerobot:{policy_dir}", context())
    assert not policy.chunked and policy.ensembling and policy_traits(policy).copy_safe
    assert policy.observation_needs.replan_steps is None  # asked at every step: reads every frame
    first = policy.select_action(observation(2, [True, True]), ["t"] * 2)
    twin = copy.copy(policy)
    twin.select_action(observation(2, [True, True]), ["t"] * 2)
    again = policy.select_action(observation(2, [True, False], seed=1), ["t"] * 2)
    alone = twin.select_action(observation(2, [False, False], seed=1), ["t"] * 2)
    assert first.shape == again.shape == (2, 4) and np.isfinite(again).all()
    np.testing.assert_array_equal(again[1], alone[1])  # env 0's restart left env 1's ensemble as it was
    assert not np.array_equal(again[0], alone[0])  # env 0's own started afresh


def test_mismatches_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="not a directory holding a saved LeRobot policy"):
        load_policy(f"lerobot:{tmp_path / 'missing'}", context())
    policy_dir = save_tiny_act(tmp_path / "act", state_dim=8)
    with pytest.raises(ConfigError, match="8-D 'observation.state'.*39-D state"):
        load_policy(f"lerobot:{policy_dir}", context())
    wrist = save_tiny_act(tmp_path / "wrist", image_key="observation.images.wrist")
    with pytest.raises(ConfigError, match="matches no camera"):
        load_policy(f"lerobot:{wrist}", context(cameras=METAWORLD_CAMERAS))


def test_metaworld_agent_pos_is_first_four_dims(tmp_path):
    policy = load_policy(f"lerobot:{save_tiny_act(tmp_path / 'act', state_dim=4)}", context())
    batch = policy._to_lerobot(observation(2, [True, True]), ["t"] * 2)
    assert tuple(batch["observation.state"].shape) == (2, 4)


def test_eval_libero_through_cli(tmp_path):
    """LeRobot's LIBERO layout: image/image2 cameras, 8-D state, 7-D actions, under --protocol lerobot (360x360)."""
    pytest.importorskip("libero.libero")
    policy_dir = save_tiny_act(tmp_path / "act", state_dim=8, action_dim=7, image_key="observation.images.image",
                               image_hw=(360, 360))
    out = tmp_path / "run"
    result = runner.invoke(app, ["eval", "--suite", "smoke_libero", "--policy", f"lerobot:{policy_dir}",
                                 "--protocol", "lerobot", "--max-steps", "3", "--videos", "0", "--output", str(out)])
    assert result.exit_code == 0, result.output
    (ep,) = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert ep["error"] is None and ep["steps"] == 3 and ep["renders"] == 1  # agentview, read once: chunk of 4
    results = json.loads((out / "results.json").read_text())
    assert results["config"]["protocol"] == "lerobot"
    assert results["config"]["protocol_settings"]["image_size"] == [360, 360]


def test_trial_start_replans_from_the_new_observation(tmp_path):
    """Chunk mode keeps no queue of its own (lerobench drops the env's pending chunk at a trial start):
    the chunk asked for at a trial start depends only on the new observation, never on the old attempt."""
    policy = load_policy(f"lerobot:{save_tiny_act(tmp_path / 'act')}", context())
    fresh = load_policy(f"lerobot:{save_tiny_act(tmp_path / 'act2')}", context())
    assert policy.chunked and policy.observation_needs.replan_steps == policy.n_action_steps
    policy.select_action(observation(2, [True, True], seed=0), ["t"] * 2)
    obs = observation(2, [False, False], seed=1) | {"trial_start": np.array([True, False]),
                                                    "trial": np.array([1, 0], dtype=np.int64)}
    got = policy.select_action(obs, ["t"] * 2)
    expected = fresh.select_action(observation(2, [True, True], seed=1), ["t"] * 2)
    assert got.shape == (2, policy.n_action_steps, 4)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


SLIM_IMPORT = """
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[2])
from test_lerobot import context, observation
from lerobench.policies import lerobot_import
from lerobench.policies.loading import load_policy

def actions():
    policy = load_policy("lerobot:" + sys.argv[1], context())
    return policy, policy.select_action(observation(2, [True, True]), ["t"] * 2)

policy, slim = actions()
loaded = {m: m in sys.modules for m in ("lerobot.policies.act.modeling_act", "lerobot.policies.groot",
                                        "diffusers.models", "diffusers")}
# LeRobot's core itself (lerobot.configs.policies -> lerobot.optim.schedulers) imports diffusers.optimization at
# module level in 0.6.1 when diffusers is installed; 0.4.4 imports it inside get_scheduler
scheduler = getattr(sys.modules["lerobot.optim.schedulers"], "get_scheduler", None)
core_imports_diffusers = getattr(scheduler, "__module__", "").startswith("diffusers")
from lerobot.policies import ACTConfig  # the package's own names: its __init__ runs now, in place
from lerobot.policies.factory import get_policy_class
same_class = get_policy_class("act") is type(policy.module) and ACTConfig is type(policy.config)
lerobot_import._one_type = lambda policy_type: None  # LeRobot's factory from here on
from lerobench.policies import lerobot_policy
lerobot_policy.release_kept()  # else the second load reuses the first's model
again, factory = actions()
same_class = same_class and again.module is not policy.module
print(json.dumps({"loaded": loaded, "core_imports_diffusers": core_imports_diffusers, "same_class": same_class,
                  "equal": bool(np.array_equal(slim, factory))}))
"""
CORE_IMPORTS_DIFFUSERS = {"0.4.4": False, "0.6.1": True}
"""Whether LeRobot's core imports ``diffusers`` for any policy, per tested LeRobot (with diffusers installed)."""


def test_a_saved_policy_imports_only_its_own_type(tmp_path):
    """A fresh process loading a saved ACT imports ACT's modules, not every policy's (GR00T's model pulls in
    diffusers' models); ``lerobot.policies`` still answers its names afterwards, and the actions equal those of
    the policy loaded through LeRobot's factory. ``diffusers`` itself stays out where LeRobot's core does not
    import it (0.4.4); LeRobot 0.6.1's core imports ``diffusers.optimization`` for every policy, which lerobench
    cannot avoid, but never diffusers' models (the factory's path imports both)."""
    import subprocess
    import sys
    from importlib.metadata import PackageNotFoundError, version
    from pathlib import Path

    policy_dir = save_tiny_act(tmp_path / "act")
    done = subprocess.run([sys.executable, "-c", SLIM_IMPORT, str(policy_dir), str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    core = result["core_imports_diffusers"]
    assert result["loaded"] == {"lerobot.policies.act.modeling_act": True, "lerobot.policies.groot": False,
                                "diffusers.models": False, "diffusers": core}
    try:
        diffusers_installed = bool(version("diffusers"))
    except PackageNotFoundError:
        diffusers_installed = False
    expected = CORE_IMPORTS_DIFFUSERS.get(version("lerobot"))
    if expected is not None:  # a tested LeRobot: its core does what the table says
        assert core == (expected and diffusers_installed), (version("lerobot"), core)
    assert result["same_class"] and result["equal"]


def test_a_policy_loaded_again_from_the_same_files_is_reused(tmp_path):
    """A second load of the same directory reuses the model (a second ``evaluate`` skips the load and its thread
    check) with a fresh adapter; the files written again, a new model; ``release_simulators`` drops it."""
    import lerobench
    from lerobench.policies import lerobot_policy

    policy_dir = save_tiny_act(tmp_path / "act")
    first = load_policy(f"lerobot:{policy_dir}", context())
    again = load_policy(f"lerobot:{policy_dir}", context())
    assert again is not first and again.call_key is first.call_key
    assert [p.data_ptr() for p in again.module.parameters()] == [p.data_ptr() for p in first.module.parameters()]
    np.testing.assert_array_equal(first.select_action(observation(2, [True, True]), ["t"] * 2),
                                  again.select_action(observation(2, [True, True]), ["t"] * 2))
    save_tiny_act(policy_dir, dim_feedforward=32)  # a new checkpoint in the same directory
    changed = load_policy(f"lerobot:{policy_dir}", context())
    assert changed.config.dim_feedforward == 32
    assert changed.module.parameters().__next__().data_ptr() != first.module.parameters().__next__().data_ptr()
    lerobench.release_simulators()
    assert lerobot_policy.release_kept() is False
    fresh = load_policy(f"lerobot:{policy_dir}", context()).module
    assert fresh.parameters().__next__().data_ptr() != changed.module.parameters().__next__().data_ptr()
