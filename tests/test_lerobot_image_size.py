"""A LeRobot policy's cameras are rendered at the size its config.json declares (issue 61, item 9).

A diffusion policy without ``crop_shape`` sizes its spatial-softmax head from its declared image shape: fed the
suite's 480x480 Meta-World render it failed at its first call ("shape '[-1, 32, 2]' is invalid for input of size
7200"). Now each run renders the policy's cameras at the declared size (recorded as ``config.image_size``), at
any batch size with the same episodes; a protocol picked with ``--protocol`` keeps its own size, and refuses a
policy that cannot take it before the run, naming both sizes and the flag.
"""

import json

import pytest
from typer.testing import CliRunner

from lerobench.cli import app
from lerobench.errors import ConfigError
from lerobench.plan.planner import image_size_for
from lerobench.policies.base import ObservationNeeds, PolicyContext
from lerobench.policies.lerobot_policy import declared_needs
from lerobench.suite.registry import get_backend, load_suite

runner = CliRunner()


def _needs(sizes, exact, cameras=None):
    return ObservationNeeds(cameras=tuple(cameras or sizes), image_sizes=sizes, exact_image_sizes=exact)


def test_the_declared_size_is_rendered_unless_a_chosen_protocol_fixes_another():
    """The rule of ``RunPlan.image_size_for``, case by case."""
    agent = {"agentview": (64, 64)}
    assert image_size_for((256, 256), _needs(agent, True), "s", "standard") == (64, 64)
    assert image_size_for((256, 256), _needs(agent, False), "s", "standard") == (64, 64)  # the contract, cheaper
    assert image_size_for((256, 256), ObservationNeeds(cameras=("agentview",)), "s", "standard") == (256, 256)
    assert image_size_for((256, 256), ObservationNeeds(), "s", "standard") == (256, 256)  # state only
    # a protocol picked with --protocol (lerobot-eval's 360x360) keeps its size for a policy that takes any ...
    assert image_size_for((360, 360), _needs(agent, False), "s", "lerobot") == (360, 360)
    assert image_size_for((360, 360), _needs({"agentview": (360, 360)}, True), "s", "lerobot") == (360, 360)
    # ... and refuses one that takes no other, naming the suite, both sizes and the flag
    with pytest.raises(ConfigError, match=r"suite 'smoke_libero' protocol 'lerobot' renders images at 360x360, "
                                          r"but the policy reads agentview at 64x64 .* leave out --protocol lerobot"):
        image_size_for((360, 360), _needs(agent, True), "smoke_libero", "lerobot")
    # cameras declared at different sizes: one size per run, the protocol's; refused where each must be exact
    two = {"agentview": (64, 64), "robot0_eye_in_hand": (32, 32)}
    assert image_size_for((256, 256), _needs(two, False), "s", "standard") == (256, 256)
    with pytest.raises(ConfigError, match=r"agentview at 64x64 and robot0_eye_in_hand at 32x32 .* at one size"):
        image_size_for((256, 256), _needs(two, True), "s", "standard")
    # a size declared for a camera the policy does not read changes nothing
    assert image_size_for((256, 256), _needs(agent, True, cameras=("robot0_eye_in_hand",)), "s", "standard") == (
        256, 256)


def _context(backend="libero", suite="smoke_libero"):
    loaded = load_suite(suite)
    protocol = loaded.protocol()
    return PolicyContext(suite=suite, backend=backend, tasks=loaded.tasks, action_dim=7, state_dim=8,
                         cameras=protocol.cameras, image_size=protocol.image_size,
                         camera_aliases=get_backend(backend).camera_aliases)


@pytest.mark.parametrize(("kind", "extra", "exact"), [
    ("diffusion", {"crop_shape": None}, True),
    ("diffusion", {"crop_shape": [56, 56]}, False),  # center-cropped to 56x56 first: any size at least that
    ("diffusion", {"crop_shape": None, "resize_shape": [64, 64]}, False),
    ("vqbet", {"crop_shape": None}, True),
    ("tdmpc", {}, True),
    ("act", {}, False),
    ("smolvla", {}, False),
])
def test_a_saved_config_declares_its_sizes_and_whether_it_takes_others(tmp_path, kind, extra, exact):
    """From config.json alone (LeRobot not imported): the run refuses early what the loaded policy would."""
    features = {"observation.state": {"type": "STATE", "shape": [8]},
                "observation.images.image": {"type": "VISUAL", "shape": [3, 64, 48]},
                "observation.images.image2": {"type": "VISUAL", "shape": [3, 64, 48]}}
    (tmp_path / "config.json").write_text(json.dumps({"type": kind, "input_features": features, **extra}))
    needs = declared_needs(f"lerobot:{tmp_path}", _context())
    assert needs is not None and needs.cameras == ("agentview", "robot0_eye_in_hand")
    assert dict(needs.image_sizes) == {"agentview": (64, 48), "robot0_eye_in_hand": (64, 48)}
    assert needs.exact_image_sizes is exact


def _diffusion(directory, **kwargs):
    pytest.importorskip("lerobot")
    from lerobot_fixtures import save_tiny_diffusion

    return save_tiny_diffusion(directory, image_hw=(64, 64), **kwargs)


def _run(out, *args):
    result = runner.invoke(app, ["eval", *args, "--videos", "0", "--output", str(out)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    seen = sorted((e["task"], e["episode"], e["seed"], e["success"], e["steps"], e["return"], e["error"],
                   e["obs_digest"], e["renders"]) for e in lines)
    return seen, json.loads((out / "results.json").read_text())["config"]


def _same_at_batch_1_and_3(tmp_path, *args):
    """The run at --batch-size 1 and 3: every episode ran to its step limit without an error, identically."""
    b1, config = _run(tmp_path / "b1", *args, "--batch-size", "1")
    b3, config3 = _run(tmp_path / "b3", *args, "--batch-size", "3")
    assert len(b1) == 3 and all(e[6] is None and e[7] and e[8] > 0 for e in b1), b1
    assert b1 == b3
    for c in (config, config3):
        assert c["image_size"] == [64, 64] and c["batch_invariant"] == "verified", c["batch_invariance"]
    return config


@pytest.mark.sim
@pytest.mark.slow
def test_a_64px_diffusion_policy_runs_on_metaworld_at_batch_1_and_3(tmp_path):
    """metaworld_mt10 renders 480x480; the policy's corner2 is rendered at its 64x64 (480 failed at the first call)."""
    pytest.importorskip("metaworld")
    policy = _diffusion(tmp_path / "diffusion", image_key="observation.image")
    config = _same_at_batch_1_and_3(tmp_path, "--suite", "metaworld_mt10", "--tasks", "reach-v3", "--policy",
                                    f"lerobot:{policy}", "--episodes", "3", "--max-steps", "5")
    assert config["protocol_settings"]["image_size"] == [480, 480]  # the suite's protocol is unchanged


@pytest.mark.sim
@pytest.mark.slow
def test_a_64px_diffusion_policy_runs_on_libero_at_batch_1_and_3(tmp_path):
    """smoke_libero renders 256x256; LeRobot's ``image`` (agentview) is rendered at the policy's 64x64."""
    pytest.importorskip("libero.libero")
    policy = _diffusion(tmp_path / "diffusion", state_dim=8, action_dim=7, image_key="observation.images.image")
    config = _same_at_batch_1_and_3(tmp_path, "--suite", "smoke_libero", "--policy", f"lerobot:{policy}",
                                    "--episodes", "3", "--max-steps", "3")
    assert config["protocol_settings"]["image_size"] == [256, 256]


@pytest.mark.sim
def test_a_protocol_fixing_another_size_refuses_the_policy_before_the_run(tmp_path):
    """``--protocol lerobot`` (lerobot-eval's 360x360) and a policy that takes only 64x64: one line, exit 2, nothing
    written. The Python API refuses the policy object the same way (after it is built, before the run)."""
    pytest.importorskip("libero.libero")
    policy = _diffusion(tmp_path / "diffusion", state_dim=8, action_dim=7, image_key="observation.images.image")
    out = tmp_path / "refused"
    result = runner.invoke(app, ["eval", "--suite", "smoke_libero", "--policy", f"lerobot:{policy}", "--protocol",
                                 "lerobot", "--max-steps", "3", "--videos", "0", "--output", str(out)])
    assert result.exit_code == 2, result.output
    assert ("suite 'smoke_libero' protocol 'lerobot' renders images at 360x360, but the policy reads agentview at "
            "64x64") in result.output and "leave out --protocol lerobot" in result.output
    assert not out.exists()

    import lerobench
    from lerobench.policies.lerobot_policy import _import_lerobot

    _import_lerobot()
    from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy
    from lerobot.policies.factory import make_pre_post_processors

    module = DiffusionPolicy.from_pretrained(str(policy))
    pre, post = make_pre_post_processors(module.config, pretrained_path=str(policy))
    with pytest.raises(ConfigError, match="renders images at 360x360, but the policy reads agentview at 64x64"):
        lerobench.evaluate(module, "smoke_libero", protocol="lerobot", max_steps=3, videos=0,
                           output=tmp_path / "api", preprocessor=pre, postprocessor=post)
    assert not (tmp_path / "api").exists()


def test_the_size_used_is_part_of_the_treatment_and_older_results_read_as_the_protocols():
    """``config.image_size`` is compared by --resume, merge and compare; a results.json written before it existed
    rendered every camera at the protocol's size, and reads so."""
    from lerobench.core.identity import diff, identity_of

    old = {"policy": "lerobot:p", "protocol_settings": {"image_size": [480, 480]}}
    assert identity_of(old).treatment["image_size"] == [480, 480]
    assert diff(old, {**old, "image_size": [480, 480]}) == []
    assert diff(old, {**old, "image_size": [64, 64]}, labels=("previous", "now")) == [
        "treatment.image_size: previous [480, 480], now [64, 64]"]
