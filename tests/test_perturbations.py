"""--perturb, start digests, compare's pairing by digest and `lerobench robustness`, on the real Meta-World."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from lerobench.analysis.compare import compare_runs, load_run
from lerobench.cli import app
from lerobench.core.results import EPISODES_FILE
from lerobench.envs.base import EnvSpec, episode_seed
from lerobench.envs.perturb import PerturbedSimulator, parse_perturbations, start_digest
from lerobench.errors import ConfigError, UnknownNameError
from lerobench.stats.binomial import compare_paired
from lerobench.suite.config import Protocol, TaskSpec

pytestmark = pytest.mark.sim  # every test here drives a real simulator

pytest.importorskip("metaworld")


def _eval(out, *extra, episodes="4", steps="150"):
    result = CliRunner().invoke(app, ["eval", "--suite", "smoke", "--videos", "0", "--episodes", episodes,
                                      "--max-steps", steps, "--output", str(out), *extra])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in (out / EPISODES_FILE).read_text().splitlines()]


def _by_key(lines):
    return {(r["task"], r["episode"]): r for r in lines}


def test_parse_perturbations_sorts_and_checks():
    assert parse_perturbations(["light=0.5,action_noise=0.1", "action_delay=2"]) == (
        ("action_delay", 2.0), ("action_noise", 0.1), ("light", 0.5))
    assert parse_perturbations("action_noise=0,light=1") == ()  # neutral values perturb nothing
    with pytest.raises(UnknownNameError, match="Did you mean 'action_noise'"):
        parse_perturbations("action_nois=0.1")
    for bad in ("action_noise", "obs_noise=x", "action_delay=1.5", "light=0", "obs_noise=-1",
                "obs_noise=0.1,obs_noise=0.2"):
        with pytest.raises(ConfigError):
            parse_perturbations(bad)


def _metaworld_sim():
    from lerobench.envs.metaworld import MetaWorldBackend

    spec = EnvSpec(suite="t", backend="metaworld", task=TaskSpec("reach-v3", "reach", 0),
                   protocol=Protocol(max_steps=20), seed=3, state_dim=39, action_dim=4)
    return MetaWorldBackend().make_simulator(spec)


def test_wrapper_keeps_the_start_and_perturbs_only_what_it_names():
    plain, wrapped = _metaworld_sim(), PerturbedSimulator(
        _metaworld_sim(), (("action_delay", 2.0), ("obs_noise", 0.1)))
    seed = episode_seed(3, 0, 4)
    plain.reset_to(4, seed)
    wrapped.reset_to(4, seed)
    assert start_digest(plain) == start_digest(wrapped)  # digest from the unperturbed physics
    assert not np.allclose(plain.state(), wrapped.state())  # the policy reads a noisy state
    np.testing.assert_allclose(wrapped.state(), wrapped.state())  # one draw per step, however often read
    # action_delay=2: the first two executed actions are zeros, then the policy's actions two steps late
    actions = [np.full(4, 0.9 * (-1) ** k, dtype=np.float32) for k in range(5)]
    for a in [np.zeros(4, np.float32), np.zeros(4, np.float32), *actions[:3]]:
        plain.step(a)
    for a in actions:
        wrapped.step(a)
    np.testing.assert_array_equal(plain.physics_state()[:-39], wrapped.inner.physics_state()[:-39])
    # the same episode seed replays the same noise; another episode draws other noise
    wrapped.reset_to(4, seed)
    first = wrapped.state()
    wrapped.reset_to(4, seed)
    np.testing.assert_array_equal(first, wrapped.state())
    plain.close()
    wrapped.close()


def test_camera_shift_and_light_edit_the_model_per_episode():
    sim = PerturbedSimulator(_metaworld_sim(), (("camera_shift", 0.05), ("light", 0.5)))
    model = sim.mujoco_model()
    original = sim._cam_pos.copy()
    np.testing.assert_allclose(model.light_diffuse, sim._light[0] * 0.5)
    sim.reset_to(0, 11)
    shifted = model.cam_pos.copy()
    np.testing.assert_allclose(np.linalg.norm(shifted - original, axis=1), 0.05, rtol=1e-9)
    sim.reset_to(1, 12)
    assert not np.allclose(model.cam_pos, shifted)  # a direction per episode
    sim.reset_to(0, 11)
    np.testing.assert_array_equal(model.cam_pos, shifted)  # ... fixed by the episode seed
    sim.close()


def test_action_noise_keeps_starts_lowers_success_and_pairs_in_compare(tmp_path):
    control = _eval(tmp_path / "control")
    noisy = _eval(tmp_path / "noisy", "--perturb", "action_noise=2")
    again = _eval(tmp_path / "noisy_b2", "--perturb", "action_noise=2", "--batch-size", "2")
    control, noisy, again = _by_key(control), _by_key(noisy), _by_key(again)
    assert control.keys() == noisy.keys() and len(control) == 8
    assert all(control[k]["start_digest"] == noisy[k]["start_digest"] is not None for k in control)
    assert sum(r["success"] for r in noisy.values()) < sum(r["success"] for r in control.values())
    for k in noisy:  # noise keyed on the episode: the same at another batch size
        assert {f: noisy[k][f] for f in ("success", "steps", "return")} == \
               {f: again[k][f] for f in ("success", "steps", "return")}
    results = json.loads((tmp_path / "noisy" / "results.json").read_text())
    assert results["config"]["perturb"] == {"action_noise": 2.0}
    resumed = CliRunner().invoke(app, ["eval", "--suite", "smoke", "--episodes", "4", "--max-steps", "150",
                                       "--output", str(tmp_path / "noisy"), "--resume"])
    assert resumed.exit_code == 2 and "treatment.perturb.action_noise: previous 2.0, now None" in resumed.output

    c = compare_runs(load_run(tmp_path / "control"), load_run(tmp_path / "noisy"))
    assert c["paired"] and c["matched_episodes"] == 8 and c["start_digest_mismatches"] == 0
    # an episode whose start differs is not a pair, even with the same seed and init state
    path = tmp_path / "noisy" / EPISODES_FILE
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    lines[0]["start_digest"] = "0" * 16
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    c = compare_runs(load_run(tmp_path / "control"), load_run(tmp_path / "noisy"))
    assert c["matched_episodes"] == 7 and c["start_digest_mismatches"] == 1
    assert any("start_digest differs" in note for note in c["notes"])


def test_robustness_command_writes_drops_resumes_and_reports(tmp_path):
    out = tmp_path / "rob"
    args = ["robustness", "--base", "smoke", "--families", "action_noise=2,light=0.5", "--episodes", "3",
            "--max-steps", "150", "--output", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads((out / "robustness.json").read_text())
    assert [f["family"] for f in data["families"]] == ["action_noise=2", "light=0.5"]
    noise, light = data["families"]
    assert noise["control_run"] == light["control_run"] == str(out / "control")  # one shared control run
    assert noise["n_pairs"] == noise["start_digests_equal"] == 6
    # the drop and its test are the paired statistics of the same outcomes, read back from the two runs
    control = _by_key(json.loads(line) for line in (out / "control" / EPISODES_FILE).read_text().splitlines())
    noisy = _by_key(json.loads(line) for line in (out / "action_noise=2" / EPISODES_FILE).read_text().splitlines())
    keys = sorted(control)
    expected = compare_paired([control[k]["success"] for k in keys], [noisy[k]["success"] for k in keys])
    assert noise["drop"] == pytest.approx(-expected.delta) and noise["p_value"] == pytest.approx(expected.p_value)
    assert noise["drop"] > 0 and light["drop"] == 0  # a state-based expert never sees the light
    assert light["p_value"] == 1.0 and noise["p_holm"] == pytest.approx(min(1.0, 2 * noise["p_value"]))  # Holm
    assert [t["task"] for t in noise["tasks"]] == ["reach-v3", "button-press-v3"]
    before = (out / "control" / EPISODES_FILE).read_text()
    again = CliRunner().invoke(app, args)  # everything finished: resumes, reruns nothing
    assert again.exit_code == 0, again.output
    assert (out / "control" / EPISODES_FILE).read_text() == before
    assert json.loads((out / "robustness.json").read_text())["families"] == data["families"]

    pytest.importorskip("matplotlib")
    report = CliRunner().invoke(app, ["report", str(out), "-o", str(tmp_path / "r.html")])
    assert report.exit_code == 0, report.output
    page = (tmp_path / "r.html").read_text()
    assert "id='drop-heatmap'><svg" in page and "action_noise=2" in page


def test_robustness_rejects_unknown_families(tmp_path):
    result = CliRunner().invoke(app, ["robustness", "--base", "smoke", "--families", "lan", "-o", str(tmp_path)])
    assert result.exit_code == 2 and "no suite smoke_lan ships" in result.output


def test_unpaired_family_uses_the_exact_unconditional_test(tmp_path):
    from scipy.stats import boschloo_exact

    from lerobench.analysis.compare import Run
    from lerobench.analysis.robustness import Arm, Family, analyze_family
    from lerobench.core.records import EpisodeRecord
    from lerobench.suite.registry import load_suite

    def run(successes, seed_offset):
        records = [EpisodeRecord(task="reach-v3", episode=e, trial=0, seed=e + seed_offset, init_state=e,
                                 success=e < successes, success_at_end=e < successes, steps=1, return_=0.0,
                                 elapsed_s=0.0, start_digest=f"{e + seed_offset:016x}") for e in range(12)]
        return Run(path=tmp_path, results={"config": {"tasks": ["reach-v3"], "trials": 1}}, records=records)

    smoke = load_suite("smoke")
    family = Family("swap", "libero-pro", Arm(smoke, (), tmp_path / "p"), Arm(smoke, (), tmp_path / "c"),
                    paired=False, reason="the swapped pair is not recorded")
    block = analyze_family(family, run(3, 100), run(10, 0))
    assert not block["paired"] and block["unpaired_reason"] == "the swapped pair is not recorded"
    assert block["drop"] == pytest.approx(7 / 12) and block["test"] == "Boschloo exact"
    expected = boschloo_exact([[10, 2], [3, 9]], alternative="two-sided").pvalue
    assert block["p_value"] == pytest.approx(expected, rel=1e-6)
    assert block["tasks"][0]["drop"] == pytest.approx(7 / 12)


def test_a_base_toml_finds_its_family_suites_beside_it_before_the_shipped_ones(tmp_path):
    """``robustness --base DIR/libero_object.toml``: ``DIR/libero_object_swap.toml`` is the family's suite; a name
    with no file beside the base is the shipped one; a file whose ``name`` is not its file name is refused."""
    from lerobench.errors import ConfigError
    from lerobench.suite.registry import load_suite, suite_loader_beside

    shipped = Path(__file__).resolve().parent.parent / "suites"
    (tmp_path / "libero_object.toml").write_text((shipped / "libero_object.toml").read_text())
    swap = (shipped / "libero_pro" / "libero_object_swap.toml").read_text()
    (tmp_path / "libero_object_swap.toml").write_text(swap.replace("image_size = [256, 256]", "image_size = [64, 64]"))
    load = suite_loader_beside(str(tmp_path / "libero_object.toml"))
    assert load("libero_object_swap").protocol().image_size == (64, 64)
    assert load_suite("libero_object_swap").protocol().image_size == (256, 256)
    assert load("libero_object_swap_control").protocol().image_size == (256, 256)  # none beside: the shipped one
    assert suite_loader_beside("libero_object")("libero_object_swap").protocol().image_size == (256, 256)
    (tmp_path / "libero_object_lan.toml").write_text(swap)  # its name says libero_object_swap
    with pytest.raises(ConfigError, match="must equal the file name 'libero_object_lan'"):
        load("libero_object_lan")
