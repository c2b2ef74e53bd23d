"""``eval --until`` and ``--versus`` on the real Meta-World simulator (short episodes), and the index-order ledger."""

import json

import pytest
from typer.testing import CliRunner

from lerobench.cli import app
from lerobench.plan.stopping import Ledger, Until, parse_until
from lerobench.stats.sequential import beta_binomial_cs

pytestmark = pytest.mark.sim  # every test here drives a real simulator

pytest.importorskip("metaworld")
runner = CliRunner()
SHORT = ["--suite", "metaworld_mt10", "--videos", "0", "--max-steps", "150"]


def run(*args):
    return runner.invoke(app, ["eval", *SHORT, *args])


def lines(out):
    return [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("executor", ["inline", "processes"])
def test_until_halfwidth_stops_a_task_at_its_target_and_resume_tightens_it(tmp_path, executor):
    out = tmp_path / executor
    result = run("--tasks", "reach-v3", "--policy", "metaworld-expert", "--episodes", "30", "--until",
                 "halfwidth=0.2", "--executor", executor, "--output", str(out))
    assert result.exit_code == 0, result.output
    stop = json.loads((out / "results.json").read_text())["stopping"]["tasks"]["reach-v3"]
    # All successes: the Jeffreys-mixture sequence's half-width first drops to 0.2 at episode 10.
    assert (1 - beta_binomial_cs(9, 9)[0]) / 2 > 0.2 >= (1 - beta_binomial_cs(10, 10)[0]) / 2
    assert stop["reason"] == "target" and stop["episodes"] == 10
    assert (stop["cs"][1] - stop["cs"][0]) / 2 <= 0.2 and stop["cs"][1] == 1.0
    # episodes running at the stop are finished and recorded, and with worker processes those that ended before a
    # slower, earlier one (the rule reads episodes in index order; 13 seen under load): never the cap (30)
    assert 10 <= len(lines(out)) <= 15
    assert "reach-v3 10 (target)" in result.output and "descriptive only" in result.output
    again = run("--tasks", "reach-v3", "--policy", "metaworld-expert", "--episodes", "30", "--until",
                "halfwidth=0.15", "--executor", executor, "--output", str(out), "--resume")
    assert again.exit_code == 0, again.output
    stop = json.loads((out / "results.json").read_text())["stopping"]["tasks"]["reach-v3"]
    assert stop["reason"] == "target" and 10 < stop["episodes"] < 30
    assert sorted(r["episode"] for r in lines(out)) == list(range(len(lines(out))))


def test_suite_halfwidth_runs_tasks_round_by_round(tmp_path):
    out = tmp_path / "suite"
    result = run("--tasks", "reach-v3,push-v3", "--policy", "metaworld-expert", "--episodes", "20", "--until",
                 "suite-halfwidth=0.15", "--output", str(out))
    assert result.exit_code == 0, result.output
    stopping = json.loads((out / "results.json").read_text())["stopping"]
    assert stopping["suite"]["reason"] == "target" and stopping["suite"]["episodes"] < 40
    used = [t["episodes"] for t in stopping["tasks"].values()]
    assert used[0] == used[1]  # checked at complete rounds only


@pytest.fixture(scope="module")
def random_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("a") / "random"
    result = run("--tasks", "reach-v3,push-v3", "--policy", "random", "--episodes", "12", "--output", str(out))
    assert result.exit_code == 0, result.output
    return out


def test_versus_decides_b_better_for_the_expert_against_random(random_run, tmp_path):
    out = tmp_path / "b"
    result = run("--tasks", "reach-v3,push-v3", "--policy", "metaworld-expert", "--versus", str(random_run),
                 "--output", str(out))
    assert result.exit_code == 0, result.output
    versus = json.loads((out / "results.json").read_text())["stopping"]["versus"]
    assert versus["decision"] == "B better" and versus["pairs"] == 8 and versus["gained"] == 8
    assert versus["e_value_b_better"] >= 40 and versus["difference_cs"][0] > 0
    own = versus["decision_interval"]  # the e-process's own interval: excludes 1/2 as it decided
    assert own["theta_b"][0] > 0.5 and own["p_value"] <= 0.05 and "anytime-valid" in own["method"]
    assert "B better after 8 of 24 pairs" in result.output
    # another policy from the same starts: every pair's first observation is A's (state-only: the state)
    inputs = versus["same_first_observation"]
    assert inputs["different"] == 0 and inputs["identical"] >= 8 and inputs["first"] is None
    recorded = len(lines(out))
    again = run("--tasks", "reach-v3,push-v3", "--policy", "metaworld-expert", "--versus", str(random_run),
                "--output", str(out), "--resume")  # already decided: nothing left to run, and no wait on nothing
    assert again.exit_code == 0, again.output
    assert len(lines(out)) == recorded and "B better after 8 of 24 pairs" in again.output
    report = runner.invoke(app, ["report", str(out), "-o", str(tmp_path / "r.html")])
    assert report.exit_code == 0, report.output
    page = (tmp_path / "r.html").read_text()
    assert "B better after 8 of 24 pairs" in page and "descriptive only after a sequential stop" in page
    assert "stopped early by --until decided (cap 12 episodes per task)" in page  # not "complete"
    both = runner.invoke(app, ["report", str(random_run), str(out), "-o", str(tmp_path / "ab.html")])
    assert both.exit_code == 0, both.output
    page = (tmp_path / "ab.html").read_text()
    assert "DESCRIPTIVE" in page and "B better after 8 of 24 pairs" in page
    assert "paired episodes only (left out, without a partner:" in page  # bars on what is compared
    compared = runner.invoke(app, ["compare", str(random_run), str(out), "--json"])
    assert compared.exit_code == 0, compared.output
    c = json.loads(compared.output)
    assert c["descriptive"] and c["sequential"]["decision"] == "B better" and c["sequential"]["against_this_a"]
    assert c["verdict"] == "B better than A" and c["verdict_by"] == "the rule that stopped run B (--until decided)"
    assert c["sequential"]["interval"]["theta_b"][0] > 0.5 and c["sequential"]["p_value"] <= 0.05
    shown = " ".join(runner.invoke(app, ["compare", str(random_run), str(out)]).output.split())
    assert "run B was stopped by --until decided: B better after 8 of 24 pairs" in shown
    assert "DESCRIPTIVE: fixed-n figures after a sequential stop" in shown
    assert "protocol standard, modified: max_steps 150 (published 500)" in page


def test_versus_a_rerun_of_itself_is_never_better(random_run, tmp_path):
    out = tmp_path / "again"
    result = run("--tasks", "reach-v3,push-v3", "--policy", "random", "--versus", str(random_run), "--margin", "0.3",
                 "--output", str(out))
    assert result.exit_code == 0, result.output
    versus = json.loads((out / "results.json").read_text())["stopping"]["versus"]
    assert versus["gained"] == versus["lost"] == 0
    assert versus["decision"] == "equivalent within ±0.3" and versus["pairs"] < 24


def test_versus_refuses_other_episodes_naming_the_field(random_run, tmp_path):
    result = run("--tasks", "reach-v3,push-v3", "--policy", "random", "--versus", str(random_run), "--seed", "1",
                 "--output", str(tmp_path / "x"))
    assert result.exit_code == 2 and "episodes.seed: recorded run 0, this run 1" in result.output
    result = run("--tasks", "reach-v3", "--policy", "random", "--versus", str(random_run),
                 "--output", str(tmp_path / "y"))
    assert "episodes.tasks" in result.output
    result = run("--tasks", "reach-v3", "--until", "decided", "--output", str(tmp_path / "z"))
    assert "--until decided needs --versus" in result.output


def test_ledger_updates_in_index_order_only():
    ledger = Ledger(parse_until("halfwidth=0.3"), ["t"], cap=50)
    for episode in range(1, 8):  # episode 0 (a failure) finishes last: nothing may be decided before it
        ledger.add("t", episode, True)
    assert ledger.wants("t", 8) and ledger.block()["tasks"]["t"]["episodes"] == 0
    ledger.add("t", 0, False)
    stop = ledger.block()["tasks"]["t"]
    assert stop["episodes"] == 8 and stop["recorded"] == 8
    assert Until("decided").interleaved and not parse_until("halfwidth=0.1").interleaved


@pytest.mark.parametrize("effect", ["0.5", "0.8"])
def test_the_designed_test_decides_against_a_run_at_zero(random_run, tmp_path, effect):
    """Run A at 0%: every discordant pair favours B at the effect; the design decides after a handful of pairs."""
    out = tmp_path / effect
    result = run("--tasks", "reach-v3,push-v3", "--policy", "metaworld-expert", "--versus", str(random_run),
                 "--until", "decided", "--effect", effect, "--power", "0.8", "--output", str(out))
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    versus = json.loads((out / "results.json").read_text())["stopping"]["versus"]
    assert versus["decision"] == "B better" and versus["lost"] == 0
    design = versus["design"]
    assert design["theta1"] == 1.0 and design["type_i"] <= 0.025 and design["power"] >= 0.8
    assert versus["pairs"] == versus["gained"] == 6  # 2^-6 <= alpha/2 < 2^-5
    assert "fixed_n_at_observed_rates" not in versus  # one fixed-n figure: the design's, at its effect
    line = " ".join(result.output.split())
    assert f"against the {design['fixed_n']} pairs a fixed-n exact McNemar test needs at that effect" in line
    own = versus["decision_interval"]  # the designed test's own interval, beside its decision
    assert own["outcome"] == "better" and own["theta_b"][0] > 0.5 and own["p_value"] <= 0.05
    assert "95% interval (stagewise, the designed test's own): P(B wins | discordant) in [" in line
    assert "anytime-valid" not in line  # the e-process monitor stays in results.json, not beside the decision


def test_an_effect_that_cannot_happen_is_refused_in_one_line_before_b_runs(random_run, tmp_path):
    out = tmp_path / "never"
    result = run("--tasks", "reach-v3,push-v3", "--policy", "metaworld-expert", "--versus", str(random_run),
                 "--until", "decided", "--effect", "-0.1", "--output", str(out))
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "--effect -0.1" in result.output and "impossible" in result.output
    assert not (out / "episodes.jsonl").exists() or not (out / "episodes.jsonl").read_text()


def test_the_api_decides_as_the_cli_does_on_the_same_runs(random_run, tmp_path):
    import lerobench

    args = ["--tasks", "reach-v3,push-v3", "--policy", "metaworld-expert", "--versus", str(random_run), "--until",
            "decided", "--effect", "0.5", "--power", "0.8"]
    result = run(*args, "--output", str(tmp_path / "cli"))
    assert result.exit_code == 0, result.output
    cli = json.loads((tmp_path / "cli" / "results.json").read_text())["stopping"]["versus"]
    api = lerobench.evaluate("metaworld-expert", "metaworld_mt10", tasks="reach-v3,push-v3", videos=0, max_steps=150,
                             versus=random_run, until="decided", effect=0.5, power=0.8, output=tmp_path / "api")
    assert api.decision == cli["decision"] == "B better"
    assert {k: api.stopping["versus"][k] for k in ("pairs", "gained", "lost")} == \
        {k: cli[k] for k in ("pairs", "gained", "lost")}
    compared = lerobench.compare(random_run, api.run_dir)
    assert compared["verdict"] == "B better than A" and not compared["b_worse"]
    planned = lerobench.plan_comparison(0.0, 0.5)
    assert planned["designed"]["type_i"] == cli["design"]["type_i"] == 1 / 64
    with pytest.raises(lerobench.errors.ConfigError, match=r"lerobench.evaluate: effect=-0.1: run A"):
        lerobench.evaluate("metaworld-expert", "metaworld_mt10", tasks="reach-v3,push-v3", videos=0,
                           max_steps=150, versus=random_run, until="decided", effect=-0.1)


def test_versus_another_suite_is_refused_briefly(random_run, tmp_path):
    result = runner.invoke(app, ["eval", "--suite", "smoke", "--videos", "0", "--policy", "random", "--versus",
                                 str(random_run), "--output", str(tmp_path / "other")])
    assert result.exit_code == 2
    line = " ".join(result.output.split())
    assert "episodes.suite: recorded run 'metaworld_mt10', this run 'smoke'" in line and len(line) < 400
