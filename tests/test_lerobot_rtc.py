"""RTC's committed prefix handed to LeRobot's flow policies under ``--delay-steps`` (issue 43, item 4).

The policy is a real LeRobot 0.4.4 SmolVLA (random weights, on a tiny local VLM: ``lerobot_fixtures``) with
``rtc_config.enabled``; nothing of LeRobot is replaced.
"""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from lerobench.cli import app
from lerobench.policies.base import PolicyContext
from lerobench.policies.lerobot_policy import make_lerobot_policy
from lerobench.policies.lerobot_rtc import RTC_PREFIX
from lerobench.suite.registry import get_backend, load_suite

torch = pytest.importorskip("torch")
pytest.importorskip("lerobot")
pytest.importorskip("transformers")
pytest.importorskip("num2words")

runner = CliRunner()
DELAY, EXECUTED = 3, 5


@pytest.fixture(scope="module")
def smolvla_dirs(tmp_path_factory):
    from lerobot_fixtures import save_tiny_smolvla

    root = tmp_path_factory.mktemp("smolvla")
    return {"rtc": save_tiny_smolvla(root / "rtc", rtc=True), "plain": save_tiny_smolvla(root / "plain", rtc=False)}


def _context(delay, call_width=None):
    suite = load_suite("metaworld_mt10")
    facts = get_backend("metaworld")
    return PolicyContext(suite=suite.name, backend="metaworld", tasks=suite.tasks[:1], action_dim=4, state_dim=39,
                         cameras=("corner2",), image_size=(64, 64), delay_steps=delay, call_width=call_width,
                         camera_aliases=facts.camera_aliases, partial_states=facts.partial_states)


def _observation(call, delay=0, committed=None, seed=0):
    rng = np.random.default_rng(seed + call)
    obs = {"state": rng.normal(size=(1, 39)).astype(np.float32), "episode_start": np.array([call == 0]),
           "active": np.ones(1, bool), "task": ["reach-v3"], "slot": np.array([0]), "episode_seed": np.array([7]),
           "call": np.array([call]), "images": {"corner2": rng.integers(0, 255, (1, 64, 64, 3), dtype=np.uint8)}}
    if committed is not None:
        obs.update(delay_steps=np.array([delay]), committed_actions=committed[None].astype(np.float32),
                   committed_from_previous=np.ones((1, delay), bool))
    return obs


def _second_chunk(policy, committed_override=None):
    """First call (nothing committed), then the call made with ``DELAY`` of its executed actions left."""
    first = policy.select_action(_observation(0, committed=np.zeros((0, 4)), delay=0), ["reach"])[0]
    committed = first[EXECUTED - DELAY:EXECUTED] if committed_override is None else committed_override
    second = policy.select_action(_observation(1, DELAY, committed), ["reach"])[0]
    return committed, second


def test_rtc_prefix_pulls_the_new_chunk_onto_the_committed_actions(smolvla_dirs):
    rtc = make_lerobot_policy(f"lerobot:{smolvla_dirs['rtc']}", _context(DELAY))
    plain = make_lerobot_policy(f"lerobot:{smolvla_dirs['plain']}", _context(DELAY))
    assert rtc.committed_prefix == RTC_PREFIX and plain.committed_prefix is None
    assert rtc.executed == plain.executed == EXECUTED and rtc.returned == 10
    committed, guided = _second_chunk(rtc)
    committed_plain, unguided = _second_chunk(plain)
    np.testing.assert_array_equal(committed, committed_plain)  # same weights, same first call
    near = np.abs(guided[:DELAY] - committed).mean()
    far = np.abs(unguided[:DELAY] - committed).mean()
    assert near < 0.5 * far, (near, far)  # guided onto the prefix the env executes meanwhile
    # without delay the same policy takes no prefix: LeRobot's own chunks, identical to the plain policy's
    undelayed = make_lerobot_policy(f"lerobot:{smolvla_dirs['rtc']}", _context(0))
    assert undelayed.committed_prefix is None


def test_a_leftover_that_is_not_what_the_env_runs_is_an_error(smolvla_dirs):
    rtc = make_lerobot_policy(f"lerobot:{smolvla_dirs['rtc']}", _context(DELAY))
    with pytest.raises(RuntimeError, match="does not start with its 3 committed actions"):
        _second_chunk(rtc, committed_override=np.full((DELAY, 4), 0.25, dtype=np.float32))


def _rows(parts):
    """One batch of the single-row observations ``parts`` (their own slots and seeds)."""
    keys = [k for k in parts[0] if k != "images"]
    width = max(p["committed_actions"].shape[1] if "committed_actions" in p else 0 for p in parts)
    batch = {k: np.concatenate([p[k] for p in parts]) for k in keys if k not in
             ("delay_steps", "committed_actions", "committed_from_previous", "task")}
    batch["task"] = [p["task"][0] for p in parts]
    batch["images"] = {"corner2": np.concatenate([p["images"]["corner2"] for p in parts])}
    batch["delay_steps"] = np.array([int(p.get("delay_steps", [0])[0]) for p in parts])
    batch["committed_actions"] = np.zeros((len(parts), width, 4), np.float32)
    for i, p in enumerate(parts):
        if "committed_actions" in p:
            batch["committed_actions"][i, :p["committed_actions"].shape[1]] = p["committed_actions"][0]
    batch["committed_from_previous"] = batch["committed_actions"].any(axis=2)
    return batch


def _slot(obs, slot, seed):
    return {**obs, "slot": np.array([slot]), "episode_seed": np.array([seed])}


def test_rows_with_and_without_a_prefix_in_one_call_get_their_own_chunks(smolvla_dirs):
    """At call width 2 a call holding a row with a prefix and a row starting an episode (RTC's delay is one number
    per call) gives each row the bits it gets alone in a call of that width."""
    spec = f"lerobot:{smolvla_dirs['rtc']}"
    start = [_slot(_observation(0, 0, np.zeros((0, 4))), slot, 10 + slot) for slot in (0, 1)]
    together = make_lerobot_policy(spec, _context(DELAY, call_width=2))
    first = together.select_action(_rows(start), ["reach", "reach"])
    second_obs = [_slot(_observation(1, DELAY, first[0, EXECUTED - DELAY:EXECUTED]), 0, 10),
                  {**_slot(_observation(0, 0, np.zeros((0, 4)), seed=5), 1, 99)}]
    second = together.select_action(_rows(second_obs), ["reach", "reach"])
    alone = make_lerobot_policy(spec, _context(DELAY, call_width=2))
    for slot in (0, 1):
        np.testing.assert_array_equal(alone.select_action(_rows([start[slot]]), ["reach"])[0], first[slot])
    for slot in (0, 1):
        np.testing.assert_array_equal(alone.select_action(_rows([second_obs[slot]]), ["reach"])[0], second[slot])


@pytest.mark.sim
def test_rtc_runs_give_the_same_episodes_at_batch_1_3_and_on_processes(tmp_path, smolvla_dirs):
    """Meta-World reach-v3 and push-v3 with a camera: RTC's prefix at batch 1, 3 and on worker processes, episode
    by episode; and the prefix changes the episodes (the same weights without RTC give other returns)."""
    from test_batch_invariance import SCHEDULES, _outcomes, _same_everywhere, small_camera_suite

    suite = small_camera_suite(tmp_path, steps=16)
    schedules = {k: SCHEDULES[k] for k in ("b1", "b3", "processes")}
    dirs = _same_everywhere(tmp_path, suite, f"lerobot:{smolvla_dirs['rtc']}", schedules, "--episodes", "3",
                            "--delay-steps", str(DELAY))
    config = json.loads((dirs["b3"] / "results.json").read_text())["config"]
    assert config["committed_prefix"] == RTC_PREFIX and config["replan_steps_executed"] == EXECUTED
    assert config["batch_invariant"] == "verified", config["batch_invariance"]
    out = tmp_path / "plain"
    result = runner.invoke(app, ["eval", "--suite", str(suite), "--policy", f"lerobot:{smolvla_dirs['plain']}",
                                 "--videos", "0", "--episodes", "3", "--delay-steps", str(DELAY), "--batch-size",
                                 "3", "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "results.json").read_text())["config"]["committed_prefix"] is None
    guided, unguided = _outcomes(dirs["b3"]), _outcomes(out)
    assert [o[:2] for o in guided] == [o[:2] for o in unguided]  # the same (task, episode) pairs
    assert [o[4] for o in guided] != [o[4] for o in unguided]  # other returns: the prefix steered the chunks
