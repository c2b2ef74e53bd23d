"""``--delay-steps`` on the real simulators, short horizons: d = 0 changes nothing, d > 0 is batch-invariant."""

import json

import pytest

import lerobench

pytestmark = pytest.mark.sim


def lines(run_dir):
    """Each episode line without its wall-clock time: what must be bit-identical."""
    lines = [json.loads(line) for line in (run_dir / "episodes.jsonl").read_text().splitlines()]
    return sorted((tuple(sorted((k, v) for k, v in line.items() if k not in ("elapsed_s", "policy_check"))))
                  for line in lines)


@pytest.mark.parametrize(("suite", "policy", "episodes"), [
    ("smoke", "metaworld-expert", 2), pytest.param("smoke_libero", "random", 1, marks=pytest.mark.slow)])
def test_zero_delay_is_bit_identical_to_no_flag(tmp_path, suite, policy, episodes):
    common = {"episodes": episodes, "videos": 0, "max_steps": 12, "batch_size": episodes, "replan_steps": 4}
    lerobench.evaluate(policy, suite, output=tmp_path / "plain", **common)
    results = lerobench.evaluate(policy, suite, output=tmp_path / "d0", delay_steps=0, **common)
    assert lines(tmp_path / "plain") == lines(tmp_path / "d0")
    assert json.loads((results.run_dir / "results.json").read_text())["config"]["delay_steps"] == 0


@pytest.mark.slow
def test_delayed_chunks_give_the_same_episodes_at_any_batch_size_and_executor(tmp_path):
    common = {"episodes": 8, "videos": 0, "max_steps": 40, "replan_steps": 4, "delay_steps": 3}
    runs = [("b1", {"batch_size": 1}), ("b3", {"batch_size": 3}), ("b8", {"batch_size": 8}),
            ("processes", {"executor": "processes", "workers": 2})]
    seen = []
    for name, extra in runs:
        lerobench.evaluate("metaworld-expert-chunks", "smoke", output=tmp_path / name, **common, **extra)
        seen.append(lines(tmp_path / name))
    assert all(s == seen[0] for s in seen[1:])
    zero = lerobench.evaluate("metaworld-expert-chunks", "smoke", output=tmp_path / "d0",
                              **{**common, "delay_steps": 0, "batch_size": 8})
    assert lines(tmp_path / "d0") != seen[0]  # the delay changed what ran (else this test could not fail)
    assert zero.run_dir.exists()


def test_measured_delay_against_a_served_policy_matches_its_latency(tmp_path):
    import threading

    from lerobench.policies.serve import PolicyServer, suite_context

    server = PolicyServer("fixture_policies:make_slow_chunks", suite_context("smoke"), port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        results = lerobench.evaluate(server.url, "smoke", output=tmp_path / "measured", episodes=1, videos=0,
                                     max_steps=60, replan_steps=8, delay_steps="measured", tasks=["reach-v3"])
    finally:
        server.shutdown()
    document = json.loads((results.run_dir / "results.json").read_text())
    assert document["config"]["delay_steps"] == "measured" and document["config"]["control_fps"] == 80
    line = json.loads((results.run_dir / "episodes.jsonl").read_text().splitlines()[0])
    expected = 4  # 50 ms at Meta-World's 80 Hz
    assert line["call_delays"][0] == 0 and all(expected <= d <= expected + 2 for d in line["call_delays"][1:]), line
    task = document["tasks"][0]
    assert expected <= task["delay_steps_p95"] <= expected + 2 and 0 < task["stale_action_fraction"] < 1
    assert document["overall"]["implied_delay_steps_p95"] >= expected


def test_a_delay_sweep_gives_the_curve_with_paired_drops_and_a_report_chart(tmp_path):
    from typer.testing import CliRunner

    from lerobench.cli import app
    from lerobench.stats.binomial import compare_paired

    out = tmp_path / "sweep"
    result = CliRunner().invoke(app, ["robustness", "--base", "smoke", "--tasks", "button-press-v3", "--families",
                                      "delay_steps=8", "--policy", "metaworld-expert-chunks", "--replan-steps", "8",
                                      "--episodes", "3", "--max-steps", "100", "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert "success vs inference delay" in result.output
    data = json.loads((out / "robustness.json").read_text())
    control, delayed = data["delay_curve"]
    assert (control["delay_steps"], delayed["delay_steps"]) == (0, 8) and delayed["n_pairs"] == 3
    arm = json.loads((out / "delay_steps=8" / "results.json").read_text())["config"]
    assert arm["delay_steps"] == 8 and json.loads((out / "control" / "results.json").read_text())["config"][
        "delay_steps"] == 0
    def successes(name):
        found = [json.loads(line) for line in (out / name / "episodes.jsonl").read_text().splitlines()]
        return [r["success"] for r in sorted(found, key=lambda r: r["episode"])]

    outcome = {name: successes(name) for name in ("control", "delay_steps=8")}
    expected = compare_paired(outcome["control"], outcome["delay_steps=8"])
    assert delayed["drop"] == pytest.approx(-expected.delta) and delayed["p_value"] == pytest.approx(expected.p_value)

    pytest.importorskip("matplotlib")
    report = CliRunner().invoke(app, ["report", str(out), "-o", str(tmp_path / "r.html")])
    assert report.exit_code == 0, report.output
    assert "id='delay-curve'><svg" in (tmp_path / "r.html").read_text()
