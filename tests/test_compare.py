"""`lerobench compare` on real Meta-World runs (fixture ``real_runs``) and on multi-trial run directories."""

import json
import shutil

import numpy as np
import pytest
from helpers import write_trial_run
from typer.testing import CliRunner

from lerobench.cli import app

runner = CliRunner()


def compare(*args):
    return runner.invoke(app, ["compare", *map(str, args)])


def compare_json(a, b, *extra):
    result = compare(a, b, "--json", *extra)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_expert_vs_random_is_paired_significant_and_in_the_right_direction(real_runs):
    from statsmodels.stats.contingency_tables import mcnemar

    c = compare_json(real_runs["expert"], real_runs["random"])
    assert c["paired"] and c["matched_episodes"] == 12 and c["differences"] == [] and not c["notes"]
    episodes = {}
    for side in ("expert", "random"):
        for line in (real_runs[side] / "episodes.jsonl").read_text().splitlines():
            e = json.loads(line)
            episodes.setdefault((e["task"], e["episode"]), {})[side] = e["success"]
    for task in c["tasks"]:
        pairs = [v for (t, _), v in episodes.items() if t == task["task"]]
        a = np.array([p["expert"] for p in pairs])
        b = np.array([p["random"] for p in pairs])
        assert task["rate_a"] == a.mean() and task["rate_b"] == b.mean()
        assert task["lost"] == int(np.sum(a & ~b)) and task["gained"] == int(np.sum(~a & b))
        table = [[int(np.sum(a & b)), int(np.sum(a & ~b))], [int(np.sum(~a & b)), int(np.sum(~a & ~b))]]
        assert task["p_value"] == pytest.approx(min(1.0, mcnemar(table, exact=True).pvalue), abs=1e-12)
        assert task["test"] == "exact McNemar" and task["p_holm"] >= task["p_value"]
    overall = c["overall"]
    assert overall["rate_a"] > 0.8 and overall["rate_b"] < 0.2  # the expert solves these within 120 steps
    assert overall["difference"] < 0 and overall["ci95"][1] < 0 and overall["p_value"] < 0.01
    assert overall["significant"] and c["verdict"] == "B worse than A" and c["b_worse"]
    assert set(c["groups"]) == {"easy", "hard"}
    # Reversed, the same numbers with the other sign.
    r = compare_json(real_runs["random"], real_runs["expert"])
    assert r["overall"]["difference"] == -overall["difference"] and r["overall"]["p_value"] == overall["p_value"]
    assert r["verdict"] == "B better than A" and not r["b_worse"]


def test_fail_if_worse_is_a_regression_gate(real_runs):
    assert compare(real_runs["expert"], real_runs["random"], "--fail-if-worse").exit_code == 1
    assert compare(real_runs["random"], real_runs["expert"], "--fail-if-worse").exit_code == 0
    assert compare(real_runs["expert"], real_runs["random"]).exit_code == 0  # without the flag: report only


def test_a_run_compared_with_itself_has_p_1_and_difference_0(real_runs):
    c = compare_json(real_runs["expert"], real_runs["expert"], "--fail-if-worse")
    for block in [*c["tasks"], *c["groups"].values(), c["overall"]]:
        assert block["p_value"] == 1.0 and block["difference"] == 0.0 and not block["significant"]
        assert block["ci95"][0] <= 0 <= block["ci95"][1]
    assert c["verdict"] == "no significant difference overall"


def test_table_for_people(real_runs):
    result = compare(real_runs["expert"], real_runs["random"])
    assert result.exit_code == 0
    text = result.output
    assert "paired on 12 episodes" in text and "reach-v3" in text and "push-v3" in text and "overall" in text
    assert "B worse than A" in text and "worse" in text


def test_different_seeds_are_compared_unpaired_with_boschloo(real_runs):
    from scipy.stats import boschloo_exact

    refused = compare(real_runs["expert_seed6"], real_runs["random"])  # another seed: other episodes
    assert refused.exit_code == 2 and "episodes.seed: 6 vs 5" in refused.output
    c = compare_json(real_runs["expert_seed6"], real_runs["random"], "--allow-different")
    assert c["differences"] == ["episodes.seed: 6 vs 5"]
    assert not c["paired"] and any("UNPAIRED" in n for n in c["notes"])
    for task in c["tasks"]:
        table = [[task["successes_b"], task["n_b"] - task["successes_b"]],
                 [task["successes_a"], task["n_a"] - task["successes_a"]]]
        expected = boschloo_exact(table).pvalue
        assert task["test"] == "Boschloo exact" and task["p_value"] == pytest.approx(expected, rel=1e-9)
    assert c["overall"]["difference"] < 0 and c["overall"]["significant"]


def test_different_step_limits_are_refused_unless_allowed(real_runs):
    result = compare(real_runs["random"], real_runs["random_short"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.startswith("error:") and "max_steps" in result.output and "--allow-different" in result.output
    c = compare_json(real_runs["random"], real_runs["random_short"], "--allow-different")
    assert c["differences"] == ["episodes.protocol_settings.max_steps: 120 vs 50"]


def test_missing_run_is_one_line(tmp_path, real_runs):
    result = compare(tmp_path / "nope", real_runs["expert"])
    assert result.exit_code == 2 and "results.json does not exist" in result.output and "Traceback" not in result.output


def test_incomplete_run_is_compared_on_finished_episodes_and_left_untouched(tmp_path, real_runs):
    partial = tmp_path / "partial"
    shutil.copytree(real_runs["random"], partial)
    lines = (partial / "episodes.jsonl").read_text().splitlines()
    cut = "\n".join(lines[:5]) + "\n" + lines[5][:20]  # the writer was killed mid-line
    (partial / "episodes.jsonl").write_text(cut)
    results = json.loads((partial / "results.json").read_text())
    results["complete"] = False
    (partial / "results.json").write_text(json.dumps(results))
    c = compare_json(real_runs["expert"], partial)
    assert c["paired"] and c["matched_episodes"] == 5 and c["unmatched_episodes"] == {"a": 7, "b": 0}
    assert any("run B is incomplete" in n for n in c["notes"])
    assert (partial / "episodes.jsonl").read_text() == cut  # a reader never truncates a running run's file


# -- multi-trial runs (TRIALS_SCHEMA): synthetic run directories, since this branch cannot run K trials -------

def test_multi_trial_runs_are_compared_per_trial_index(tmp_path):
    a = write_trial_run(tmp_path / "a", {"t1": [[False, False, True]] * 8, "t2": [[True, True, True]] * 8}, "A")
    # B: trial 0 like A, trial 1 solves t1 everywhere, trial 2 loses t2 in 6 episodes (2 by errors at trial 1).
    b_rows = {"t1": [[False, True, True]] * 8, "t2": [[True, True, False]] * 6 + [[True, True, True]] * 2}
    b = write_trial_run(tmp_path / "b", b_rows, "B", errors={("t2", 6): 1, ("t2", 7): 1})
    c = compare_json(a, b)
    assert c["paired"] and c["trials_compared"] == 3 and [t["trial"] for t in c["per_trial"]] == [0, 1, 2]
    assert c["overall"] == c["per_trial"][0]["overall"]
    trial0, trial1, trial2 = (t["overall"] for t in c["per_trial"])
    assert trial0["difference"] == 0 and trial0["p_value"] == 1.0
    # Trial 1: t1 gained 8, t2 lost 2 (the errors end those episodes: failures at trial 1 and 2).
    assert (trial1["gained"], trial1["lost"]) == (8, 2)
    # Trial 2: t1 unchanged (both solve it), t2 lost in all 8 (6 failures, 2 errored earlier).
    t2 = next(t for t in c["per_trial"][2]["tasks"] if t["task"] == "t2")
    assert (t2["gained"], t2["lost"], t2["rate_b"]) == (0, 8, 0.0)
    assert trial2["significant"] and trial2["difference"] == -0.5
    result = compare(a, b)
    assert "trial 1:" in result.output and "trial 2:" in result.output


def test_unfinished_multi_trial_episode_is_left_out(tmp_path):
    a = write_trial_run(tmp_path / "a", {"t1": [[True, True]] * 4}, "A")
    b = write_trial_run(tmp_path / "b", {"t1": [[True, True]] * 4}, "B")
    lines = (b / "episodes.jsonl").read_text().splitlines()
    (b / "episodes.jsonl").write_text("\n".join(lines[:-1]) + "\n")  # episode 3's trial 1 is still running
    c = compare_json(a, b)
    assert c["matched_episodes"] == 3 and c["unmatched_episodes"] == {"a": 1, "b": 0}


def test_trial_count_mismatch_is_a_treatment_difference(tmp_path):
    a = write_trial_run(tmp_path / "a", {"t1": [[True, True]] * 4}, "A")
    b = write_trial_run(tmp_path / "b", {"t1": [[True, True, False]] * 4}, "B")
    result = compare(a, b)  # the same episodes, attempted 2 and 3 times: compared on the trials both have
    assert result.exit_code == 0 and "treatment.trials: 2 vs 3" in result.output
    c = compare_json(a, b)
    assert c["differences"] == [] and "treatment.trials: 2 vs 3" in c["treatment"]
    assert c["trials_compared"] == 2 and len(c["per_trial"]) == 2


def test_pooled_p_value_is_mcnemars_below_the_old_floor_and_marked_at_its_own(tmp_path):
    """Issue 61: 30 of 30 pairs one way printed overall p 0.0002; McNemar's exact p (scipy) is 1.9e-9. With 60 of 60
    the p-value reaches the exact test's floor (2e-12) and the table says so beside it."""
    from scipy.stats import binomtest

    for pairs in (30, 60):
        a = write_trial_run(tmp_path / f"a{pairs}", {"t1": [[True]] * (pairs // 2), "t2": [[True]] * (pairs // 2)}, "A")
        b = write_trial_run(tmp_path / f"b{pairs}", {"t1": [[False]] * (pairs // 2), "t2": [[False]] * (pairs // 2)},
                            "B")
        overall = compare_json(a, b)["overall"]
        assert overall["lost"] == pairs and overall["p_value_floor"] == 2e-12
        assert overall["p_value"] == pytest.approx(binomtest(0, pairs).pvalue + 2e-12, rel=1e-9)
        table = compare(a, b).output
        assert ("≤2e-12 (floor)" in table) == (pairs == 60), table
    assert "1.9e-09" in compare(tmp_path / "a30", tmp_path / "b30").output
