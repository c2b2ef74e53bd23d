"""End-to-end evaluations on the real Meta-World simulator (short horizons)."""

import json

import pytest
from typer.testing import CliRunner

from lerobench.cli import app
from lerobench.core.results import wilson_interval
from lerobench.suite.registry import load_suite

pytestmark = pytest.mark.sim  # every test here drives a real simulator

pytest.importorskip("metaworld")
runner = CliRunner()

EPISODE_FIELDS = {"task", "episode", "trial", "seed", "init_state", "success", "success_at_end", "steps",
                  "return", "elapsed_s", "error", "video", "renders", "max_reward", "start_digest", "clipped",
                  "obs_digest", "obs_reads", "obs_read_digests", "obs_parts", "progress", "max_progress"}
TASK_FIELDS = {"task", "description", "n_episodes", "successes", "success_rate", "ci95", "ci95_method",
               "mean_steps",
               "mean_return", "n_errors"}
OVERALL_FIELDS = {"n_episodes", "successes", "success_rate", "ci95", "eval_s", "episodes_per_s", "env_steps_per_s"}


def run(*args):
    result = runner.invoke(app, ["eval", *args])
    return result


def episodes(out):
    return [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]


def test_expert_run_writes_every_field(tmp_path):
    out = tmp_path / "run"
    result = run("--suite", "metaworld_easy", "--tasks", "reach-v3,button-press-v3", "--policy", "metaworld-expert",
                 "--episodes", "2", "--batch-size", "2", "--videos", "0", "--output", str(out), "--seed", "3")
    assert result.exit_code == 0, result.output
    eps = episodes(out)
    assert len(eps) == 4 and all(set(e) - {"policy_check"} == EPISODE_FIELDS for e in eps)
    assert sum("policy_check" in e for e in eps) >= 1  # the run's batch-invariance check, on one line
    assert sorted((e["task"], e["episode"]) for e in eps) == [
        ("button-press-v3", 0), ("button-press-v3", 1), ("reach-v3", 0), ("reach-v3", 1)]
    assert all(e["renders"] == 0 and e["error"] is None for e in eps)  # state-only: nothing rendered
    results = json.loads((out / "results.json").read_text())
    assert results["complete"] and results["suite"] == "metaworld_easy"
    assert results["config"]["episodes_per_task"] == 2 and results["config"]["seed"] == 3
    prov = results["provenance"]
    assert prov["versions"]["mujoco"] and prov["versions"]["metaworld"] and prov["lerobench"]
    assert prov["usable_cores"] >= 1 and prov["command"]
    assert {t["task"] for t in results["tasks"]} == {"reach-v3", "button-press-v3"}
    for t in results["tasks"]:
        assert TASK_FIELDS <= set(t)
        assert t["ci95"][0] <= t["success_rate"] <= t["ci95"][1]
    assert results["groups"]["easy"]["n_episodes"] == 4
    overall = results["overall"]
    assert OVERALL_FIELDS <= set(overall) and overall["n_episodes"] == 4
    assert overall["success_rate"] > 0
    assert overall["ci95"][0] <= overall["success_rate"] <= overall["ci95"][1]
    assert overall["successes"] == sum(e["success"] for e in eps)


def _outcomes(out):
    return sorted((e["task"], e["episode"], e["seed"], e["init_state"], e["success"], e["steps"],
                   round(e["return"], 6)) for e in episodes(out))


def test_same_seed_same_episodes_for_batch_1_and_2(tmp_path):
    common = ["--suite", "smoke", "--policy", "random", "--episodes", "3", "--max-steps", "25", "--videos", "0",
              "--seed", "11"]
    assert run(*common, "--batch-size", "1", "--output", str(tmp_path / "b1")).exit_code == 0
    assert run(*common, "--batch-size", "2", "--output", str(tmp_path / "b2")).exit_code == 0
    one, two = _outcomes(tmp_path / "b1"), _outcomes(tmp_path / "b2")
    assert one == two
    assert len({o[6] for o in one}) == len(one)  # episodes really differ from each other
    assert run(*common[:-1], "12", "--batch-size", "2", "--output", str(tmp_path / "s12")).exit_code == 0
    assert _outcomes(tmp_path / "s12") != two


def test_unknown_suite_and_policy_exit_2_with_one_line(tmp_path):
    result = run("--suite", "metaworld_mt1O", "--output", str(tmp_path / "x"))
    assert result.exit_code == 2 and "metaworld_mt10" in result.output and "Traceback" not in result.output
    result = run("--suite", "smoke", "--policy", "randm", "--output", str(tmp_path / "y"))
    assert result.exit_code == 2 and "'random'" in result.output and "Traceback" not in result.output
    result = run("--suite", "smoke", "--tasks", "reach", "--output", str(tmp_path / "z"))
    assert result.exit_code == 2 and "reach-v3" in result.output


@pytest.mark.parametrize("factory, message", [("make_wrong_shape", "expected actions of shape"),
                                              ("make_raises", "policy raised RuntimeError: boom")])
def test_bad_policy_output_names_suite_task_episode(tmp_path, factory, message):
    result = run("--suite", "smoke", "--policy", f"fixture_policies:{factory}", "--max-steps", "5", "--videos",
                 "0", "--output", str(tmp_path / "o"))
    assert result.exit_code == 1
    assert message in result.output and "suite 'smoke'" in result.output and "task 'reach-v3'" in result.output
    assert "episode 0" in result.output and "Traceback" not in result.output


def test_policy_failure_keeps_finished_results(tmp_path):
    out = tmp_path / "o"
    result = run("--suite", "smoke", "--policy", "fixture_policies:make_nan_after", "--max-steps", "5",
                 "--videos", "0", "--output", str(out))
    assert result.exit_code == 1 and "NaN" in result.output and "button-press-v3" in result.output
    eps = episodes(out)
    assert [(e["task"], e["steps"]) for e in eps] == [("reach-v3", 5)]
    results = json.loads((out / "results.json").read_text())
    assert not results["complete"] and results["overall"]["n_episodes"] == 1


def test_camera_policy_renders_state_policy_does_not(tmp_path):
    common = ["--suite", "smoke", "--tasks", "reach-v3", "--max-steps", "3", "--videos", "0"]
    assert run(*common, "--policy", "zero", "--output", str(tmp_path / "z")).exit_code == 0
    assert episodes(tmp_path / "z")[0]["renders"] == 0
    result = run(*common, "--policy", "fixture_policies:make_camera", "--output", str(tmp_path / "c"))
    assert result.exit_code == 0, result.output
    assert episodes(tmp_path / "c")[0]["renders"] == 3  # one camera: reset + 2 steps (after the 3rd, the last, unread)


def test_existing_output_needs_resume(tmp_path):
    out = tmp_path / "o"
    common = ["--suite", "smoke", "--tasks", "reach-v3", "--max-steps", "3", "--videos", "0", "--policy", "zero"]
    assert run(*common, "--output", str(out)).exit_code == 0
    result = run(*common, "--output", str(out))
    assert result.exit_code == 2 and "--resume" in result.output


def test_videos_are_playable_with_sim_fps_and_one_frame_per_step(tmp_path):
    av = pytest.importorskip("av")
    out = tmp_path / "o"
    result = run("--suite", "smoke", "--tasks", "reach-v3", "--policy", "zero", "--episodes", "2", "--videos", "1",
                 "--max-steps", "10", "--batch-size", "2", "--video-fps", "80", "--video-size", "0",  # every step
                 "--output", str(out))
    assert result.exit_code == 0, result.output
    eps = sorted(episodes(out), key=lambda e: e["episode"])
    assert eps[0]["video"] == "videos/reach-v3/episode_0_failure.mp4" and eps[1]["video"] is None
    assert eps[1]["renders"] == 0  # only recorded episodes render
    with av.open(str(out / eps[0]["video"])) as container:
        stream = container.streams.video[0]
        frames = list(container.decode(stream))
        assert len(frames) == 11 and stream.average_rate == 80  # reset frame + one per step
        assert (frames[0].width, frames[0].height) == (480, 480)
    leftovers = [p.name for p in (out / "videos").rglob("*") if p.name.startswith(".")]
    assert leftovers == []


def test_record_writes_hdf5_per_task(tmp_path):
    h5py = pytest.importorskip("h5py")
    out = tmp_path / "all"
    result = run("--suite", "smoke", "--tasks", "reach-v3", "--policy", "fixture_policies:make_camera",
                 "--episodes", "2", "--max-steps", "4", "--videos", "0", "--record", "all", "--output", str(out))
    assert result.exit_code == 0, result.output
    with h5py.File(out / "recordings" / "reach-v3.h5") as f:
        assert sorted(f) == ["episode_0", "episode_1"]
        ep = f["episode_0"]
        assert ep["actions"].shape == (4, 4) and ep["rewards"].shape == (4,) and ep["success"].shape == (4,)
        assert ep["observations/state"].shape == (5, 39)
        assert ep["observations/images/corner2"].shape == (5, 480, 480, 3)
        assert ep.attrs["steps"] == 4 and not ep.attrs["success"]
    out = tmp_path / "success"
    result = run("--suite", "smoke", "--policy", "metaworld-expert", "--tasks", "reach-v3", "--episodes", "2",
                 "--videos", "0", "--record", "success", "--max-steps", "60", "--output", str(out))
    assert result.exit_code == 0, result.output
    eps = episodes(out)
    with h5py.File(out / "recordings" / "reach-v3.h5") as f:
        assert sorted(f) == sorted(f"episode_{e['episode']}" for e in eps if e["success"])
        for e in eps:
            if e["success"]:
                group = f[f"episode_{e['episode']}"]
                assert group["success"][-1] and "images" not in group["observations"]


def test_lerobot_format_eval_info(tmp_path):
    out = tmp_path / "o"
    result = run("--suite", "metaworld_easy", "--tasks", "reach-v3,button-press-v3", "--policy", "metaworld-expert",
                 "--episodes", "2", "--videos", "0", "--format", "lerobot", "--output", str(out))
    assert result.exit_code == 0, result.output
    text = (out / "eval_info.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    info = json.loads(text)
    results = json.loads((out / "results.json").read_text())
    assert info["overall"]["pc_success"] == pytest.approx(100 * results["overall"]["success_rate"])
    assert info["overall"]["n_episodes"] == 4 and info["per_group"]["easy"]["n_episodes"] == 4
    # LeRobot PR #4628: counts and a Wilson interval (percent) at every level (results.json's own are exact).
    for block, ours in [(info["overall"], results["overall"]), (info["per_group"]["easy"], results["groups"]["easy"]),
                        *[(t, next(r for r in results["tasks"] if r["task"] == t["task"])) for t in info["per_task"]]]:
        assert block["n_success"] == ours["successes"] and block["n_episodes"] == ours["n_episodes"]
        wilson = wilson_interval(ours["successes"], ours["n_episodes"])
        assert block["pc_success_ci95"] == [pytest.approx(100 * x, abs=0.005) for x in wilson]
        assert block["pc_success_ci95"][0] <= block["pc_success"] <= block["pc_success_ci95"][1]
    assert [t["task_id"] for t in info["per_task"]] == [
        next(t.index for t in load_suite("metaworld_easy").tasks if t.name == name)
        for name in ("button-press-v3", "reach-v3")]
    for task in info["per_task"]:
        metrics = task["metrics"]
        assert len(metrics["successes"]) == len(metrics["sum_rewards"]) == len(metrics["max_rewards"]) == 2
        assert all(m <= s for m, s in zip(metrics["max_rewards"], metrics["sum_rewards"], strict=True))


@pytest.mark.slow
def test_partial_resets_do_not_duplicate_frames_or_states(tmp_path):
    av = pytest.importorskip("av")
    h5py = pytest.importorskip("h5py")
    out = tmp_path / "o"
    result = run("--suite", "smoke", "--tasks", "reach-v3", "--policy", "fixture_policies:make_camera_expert",
                 "--episodes", "3", "--batch-size", "2", "--videos", "3", "--record", "all", "--max-steps", "120",
                 "--output", str(out))
    assert result.exit_code == 0, result.output
    eps = episodes(out)
    assert len({e["steps"] for e in eps}) > 1  # episodes ended at different steps: partial resets happened
    with h5py.File(out / "recordings" / "reach-v3.h5") as f:
        for e in eps:
            with av.open(str(out / e["video"])) as container:
                # the default 10 fps of an 80 Hz task: the first observation, then every 8th step
                assert sum(1 for _ in container.decode(video=0)) == e["steps"] // 8 + 1
            group = f[f"episode_{e['episode']}"]
            assert group["observations/state"].shape[0] == e["steps"] + 1 and group["actions"].shape[0] == e["steps"]


def test_parallel_task_failure_stops_the_others(tmp_path):
    out = tmp_path / "o"
    result = run("--suite", "metaworld_mt10", "--tasks", "reach-v3,push-v3,drawer-close-v3",
                 "--policy", "fixture_policies:make_nan_after", "--episodes", "1", "--videos", "0",
                 "--parallel-tasks", "2", "--max-steps", "300", "--output", str(out))
    assert result.exit_code == 1 and "NaN" in result.output
    results = json.loads((out / "results.json").read_text())
    assert not results["complete"]
    assert all(e["task"] == "reach-v3" for e in episodes(out))


def test_invalid_numbers_are_refused(tmp_path):
    for flags, message in ((["--episodes", "0"], "--episodes must be >= 1"),
                           (["--batch-size", "-1"], "--batch-size must be >= 0"),
                           (["--max-steps", "501"], "limited to 500 steps")):
        result = run("--suite", "smoke", *flags, "--output", str(tmp_path / "x"))
        assert result.exit_code == 2 and message in result.output, result.output
