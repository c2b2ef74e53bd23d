"""LeRobot's ACT as LeRobot trains it for ALOHA (``observation.images.top`` 3x480x640, 14-D state and actions,
chunks of 100), random weights, through ``--policy lerobot:<dir>`` on the real gym-aloha: the same episodes at batch
1, 4 and in worker processes, with temporal ensembling off and on (then asked at every step, one ensemble per env).

Saved by the installed LeRobot in a session fixture (``tests/lerobot_aloha_fixtures.py``, ~43 MB each, never
committed): 0.4.4 in the main tests, 0.6.1 where ``scripts/test-lerobot-current.sh`` runs this file under the current
LeRobot. A policy 0.4.4 saved loading under 0.6.1 is tested on PushT (``tests/test_lerobot_versions.py``).
A 480x640 ResNet18 call costs ~1 s on this project's 2-core box: the runs are a few episodes of a few steps.
"""

import json

import numpy as np
import pytest
from lerobot_aloha_fixtures import SAVERS
from typer.testing import CliRunner

from lerobench.cli import app

pytestmark = pytest.mark.sim  # the real gym-aloha simulator
torch = pytest.importorskip("torch")
pytest.importorskip("lerobot")
runner = CliRunner()


@pytest.fixture(scope="session")
def aloha_acts(tmp_path_factory):
    """The two ACTs (chunks; temporal ensembling), saved once per test process by the installed LeRobot."""
    root = tmp_path_factory.mktemp("aloha-act")
    return {name: save(root / name) for name, save in SAVERS.items()}


def run(policy, out, episodes, steps, *extra):
    """``lerobench eval --suite aloha_transfer_cube`` of the saved ACT; its episodes by index and its config."""
    result = runner.invoke(app, ["eval", "--suite", "aloha_transfer_cube", "--policy", f"lerobot:{policy}",
                                 "--episodes", str(episodes), "--max-steps", str(steps), "--seed", "1000",
                                 "--videos", "0", *extra, "--output", str(out)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    config = json.loads((out / "results.json").read_text())["config"]
    return {e["episode"]: e for e in lines}, config


def same_episodes(runs):
    """Each run's episodes as (episode, steps, reads, observation digest, return, clipped): all must be equal."""
    keys = {name: sorted((i, e["steps"], e["obs_reads"], e["obs_digest"], e["return"], e["clipped"])
                         for i, e in eps.items()) for name, eps in runs.items()}
    first = next(iter(keys.values()))
    assert all(k == first for k in keys.values()), keys
    assert len({k[3] for k in first}) == len(first)  # every episode saw its own start and its own actions
    return first


def test_alohas_act_gives_the_same_episodes_at_batch_1_4_and_in_processes(tmp_path, aloha_acts):
    """Chunks of 100 all executed: each episode reads the camera at step 0 and at step 100, after its first
    chunk's 100 actions (what the second read's digest covers), so equal digests mean equal actions too."""
    policy = aloha_acts["act-aloha"]
    runs = {}
    for name, extra in (("b1", ["--batch-size", "1"]), ("b4", ["--batch-size", "4", "--executor", "vector"]),
                        ("proc", ["--executor", "processes", "--workers", "2"])):
        episodes, config = run(policy, tmp_path / name, 4, 101, *extra)
        assert config["batch_invariant"] == "verified" and config["policy"] == f"lerobot:{policy}"
        assert all(e["error"] is None and e["obs_parts"] == ["state", "top"] for e in episodes.values())
        assert all(e["steps"] == 101 and e["obs_reads"] == 2 and e["renders"] == 2 for e in episodes.values())
        runs[name] = episodes
    assert runs["b1"][0]["obs_reads"] == 2
    same_episodes(runs)


def test_temporal_ensembling_is_asked_every_step_and_keeps_each_envs_ensemble(tmp_path, aloha_acts):
    """``temporal_ensemble_coeff`` 0.01, ``n_action_steps`` 1: the rollout calls the policy at every step (reads ==
    steps), and 4 envs side by side give episode for episode what one env alone gives."""
    policy = aloha_acts["act-aloha-te"]
    runs = {}
    for name, extra in (("b1", ["--batch-size", "1"]), ("b4", ["--batch-size", "4", "--executor", "vector"])):
        episodes, config = run(policy, tmp_path / name, 4, 3, *extra)
        assert config["batch_invariant"] == "verified"
        # read at every step and rendered where read: the first observation and after steps 1 and 2; nothing after
        # the last step (the episode ends at its step limit there: no one reads it)
        assert all(e["error"] is None and e["steps"] == e["obs_reads"] == e["renders"] == 3
                   for e in episodes.values())
        runs[name] = episodes
    same_episodes(runs)


def staggered_rollout(policy, lengths, image_hw):
    """Per-episode actions of lerobench's rollout on the fake vector env: 2 slots, episode e lasts ``lengths[e]``.

    Slot 0 ends its first episode while slot 1 is mid-episode, so slot 0 starts its next one beside an env whose
    ensemble holds several chunks: a batch-wide ensemble would reset or mix it.
    """
    from fake_env import FakeVectorEnv, Script

    from lerobench.core.task_run import TaskRun
    from lerobench.rollout.loop import run_episodes
    from lerobench.suite.registry import load_suite

    task = load_suite("aloha_transfer_cube").tasks[0]
    script = Script(length=lambda episode, trial: lengths[episode], success=lambda episode, trial: False,
                    state=lambda episode, trial, step, dim: observation(episode, step, image_hw)[0],
                    images=lambda episode, trial, step: {"top": observation(episode, step, image_hw)[1]},
                    state_dim=14)
    run_ = TaskRun(suite="aloha_transfer_cube", task=task, seed=0, action_dim=14, replan_steps=1)
    env, records = FakeVectorEnv(2, script), []
    run_episodes(env, policy, run_, list(range(len(lengths))), records.append)
    assert sorted((r.episode, r.steps, r.error) for r in records) == [(e, n, None) for e, n in enumerate(lengths)]
    assert not env.log.violations
    return {e: np.stack([a for (_, episode, _, _, a) in env.log.steps if episode == e]) for e in range(len(lengths))}


def observation(episode, step, image_hw):
    """The fake env's 14-D state and ``top`` image at ``step`` of ``episode``, from one seed."""
    rng = np.random.default_rng(1000 * episode + step)
    return (rng.normal(0.0, 0.2, size=14).astype(np.float32),
            rng.integers(0, 255, size=(*image_hw, 3), dtype=np.uint8))


def test_temporal_ensembling_per_env_equals_lerobots_select_action_on_one_env(aloha_acts):
    """Envs starting episodes out of step: each episode's actions are those of LeRobot's own ``select_action``
    (its ``ACTTemporalEnsembler``, reset per episode) on that episode alone. Images are 120x160 here (ACT takes
    any size): the ensembles are what is tested, not the 480x640 camera, which the runs above read."""
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    from lerobench.policies.base import PolicyContext, policy_traits
    from lerobench.policies.kernels import pinned_kernels
    from lerobench.policies.loading import load_policy
    from lerobench.suite.registry import get_backend, load_suite

    path = aloha_acts["act-aloha-te"]
    suite, facts = load_suite("aloha_transfer_cube"), get_backend("aloha")
    context = PolicyContext(suite=suite.name, backend="aloha", tasks=suite.tasks, action_dim=14, state_dim=14,
                            cameras=facts.cameras, image_size=(480, 640), camera_aliases=facts.camera_aliases,
                            partial_states=facts.partial_states)
    policy = load_policy(f"lerobot:{path}", context)
    assert policy.ensembling and not policy.chunked and policy.observation_needs.replan_steps is None
    assert policy.observation_needs.image_sizes == {"top": (480, 640)}
    assert policy_traits(policy).batch_invariant and policy_traits(policy).copy_safe
    lengths, hw = [3, 7, 4], (120, 160)  # slot 0: episode 0 then 2, which starts at slot 1's 4th step
    got = staggered_rollout(policy, lengths, hw)

    reference = ACTPolicy.from_pretrained(str(path)).eval()
    pre, post = make_pre_post_processors(reference.config, pretrained_path=str(path))
    assert reference.config.temporal_ensemble_coeff == 0.01 and reference.config.chunk_size == 100
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # lerobench's calls give one thread's bits, on its pinned kernels
    try:
        with pinned_kernels():
            want = {e: reference_episode(reference, pre, post, e, n, hw, suite.tasks[0].description)
                    for e, n in enumerate(lengths)}
    finally:
        torch.set_num_threads(threads)
    for episode in want:
        np.testing.assert_array_equal(got[episode], want[episode])
    assert not np.allclose(got[1][1], got[1][0])  # the ensemble moves: not one chunk's first action repeated


def reference_episode(reference, pre, post, episode, steps, hw, description):
    """LeRobot's own loop for one episode alone: ``reset`` then ``select_action`` at every step, with processors."""
    reference.reset()
    want = []
    for step in range(steps):
        state, image = observation(episode, step, hw)
        batch = {"observation.state": torch.from_numpy(state[None]),
                 "observation.images.top": torch.from_numpy(image[None]).permute(0, 3, 1, 2).float() / 255,
                 "task": [description]}
        with torch.inference_mode():
            want.append(post(reference.select_action(pre(batch))).numpy()[0])
    return np.stack(want)
