"""``libero-expert``: goals read from LIBERO's BDDL files, refusals before a run, and real LIBERO episodes that
succeed and fail, with the same outcomes and observation digests at any batch size and executor."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from helpers import libero_suite_copy
from typer.testing import CliRunner

from lerobench.cli import app
from lerobench.envs.bddl import PREDICATES, parse_bddl

runner = CliRunner()

CONJUNCTION = """
(define (problem LIBERO_Kitchen_Tabletop_Manipulation)
  (:domain robosuite)
  (:language turn on the stove and put the moka pot on it)
  (:fixtures
    kitchen_table - kitchen_table
    flat_stove_1 - flat_stove
  )
  (:objects
    chefmate_8_frypan_1 - chefmate_8_frypan
    moka_pot_1 moka_pot_2 - moka_pot
  )
  (:goal
    (And (Turnon flat_stove_1) (On moka_pot_1 flat_stove_1_cook_region))
  )
)
"""


def test_a_conjunctive_goal_parses_into_its_conditions_and_names():
    goal = parse_bddl(CONJUNCTION)
    assert goal.language == "turn on the stove and put the moka pot on it"
    assert goal.objects == ("chefmate_8_frypan_1", "moka_pot_1", "moka_pot_2")
    assert goal.fixtures == ("kitchen_table", "flat_stove_1")
    assert [(c.predicate, c.args) for c in goal.goal] == [("turnon", ("flat_stove_1",)),
                                                         ("on", ("moka_pot_1", "flat_stove_1_cook_region"))]
    assert goal.regions == ("flat_stove_1_cook_region",) and not goal.unsupported()
    assert str(goal.goal[1]) == "(On moka_pot_1 flat_stove_1_cook_region)"


def test_every_goal_of_the_five_suites_uses_a_predicate_the_expert_has_a_skill_for():
    """130 tasks: the predicates are exactly On, In, Open, Close, TurnOn, TurnOff (docs/suites.md lists them)."""
    pytest.importorskip("libero.libero")
    from libero.libero import benchmark

    from lerobench.envs.bddl import read_bddl

    seen = set()
    for name in ("libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90"):
        with contextlib.redirect_stdout(io.StringIO()):
            bench = benchmark.get_benchmark_dict()[name]()
        for i in range(bench.n_tasks):
            goal = read_bddl(bench.get_task_bddl_file_path(i))
            assert goal.goal and not goal.unsupported(), (name, i, goal.goal)
            seen |= {c.predicate for c in goal.goal}
    assert seen == set(PREDICATES)


def test_a_goal_without_a_skill_is_refused_naming_task_and_condition():
    from lerobench.errors import ConfigError
    from lerobench.policies.experts.libero import check_goal

    stacked = parse_bddl(CONJUNCTION.replace("(Turnon flat_stove_1)", "(Stack moka_pot_2 moka_pot_1)"))
    with pytest.raises(ConfigError) as caught:
        check_goal(stacked, "suite s task 'stack_the_pots'")
    assert "task 'stack_the_pots'" in str(caught.value) and "(Stack moka_pot_2 moka_pot_1)" in str(caught.value)
    moved = parse_bddl(CONJUNCTION.replace("(Turnon flat_stove_1)", "(On flat_stove_1 kitchen_table)"))
    with pytest.raises(ConfigError, match="flat_stove_1.*not a movable object"):
        check_goal(moved, "suite s task 't'")
    check_goal(parse_bddl(CONJUNCTION), "suite s task 't'")  # what the expert can do passes


def test_the_expert_on_another_backend_is_one_line_and_exit_2(tmp_path):
    result = runner.invoke(app, ["eval", "--suite", "smoke", "--policy", "libero-expert", "--output",
                                 str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    assert "only runs on libero suites" in result.output and "Traceback" not in result.output


def _mixed_suite(tmp_path: Path, steps: int) -> Path:
    """libero_spatial's task 1 alone at a step limit where some episodes succeed and some do not."""
    return libero_suite_copy(tmp_path, "libero_spatial", [1], "libero_spatial_short",
                             {"max_steps = 220": f"max_steps = {steps}"})


def _seen(out: Path) -> list[tuple]:
    lines = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    return sorted((e["task"], e["episode"], e["success"], e["steps"], e["return"], e["obs_digest"], e["obs_reads"],
                   tuple(e["obs_parts"] or ())) for e in lines)


@pytest.mark.sim
@pytest.mark.slow
def test_expert_episodes_succeed_and_fail_the_same_at_any_batch_size_and_executor_and_videos_say_which(tmp_path):
    """A short step limit splits the expert's episodes into successes and failures (a check that cannot fail on
    all-failure runs would prove nothing); batch 1, batch 3 (recording every episode's video) and worker processes
    give the same episodes, down to the digests of the privileged state the policy read. Every video's file name
    says success or failure as its line in episodes.jsonl does."""
    pytest.importorskip("libero.libero")
    suite = _mixed_suite(tmp_path, steps=83)  # its episodes 0-3 need 85, 78, 81, 84 steps: fail, 2 succeed, fail
    runs = {"b1": ["--batch-size", "1", "--videos", "0"],
            "b3": ["--batch-size", "3", "--videos", "4", "--video-size", "64"],
            "processes": ["--executor", "processes", "--workers", "2", "--videos", "0"]}
    reference = None
    for name, args in runs.items():
        out = tmp_path / name
        result = runner.invoke(app, ["eval", "--suite", str(suite), "--episodes", "4", "--output", str(out), *args])
        assert result.exit_code == 0, result.output
        results = json.loads((out / "results.json").read_text())
        assert results["policy"] == "libero-expert"  # the suite's default
        assert results["config"]["policy_kind"] == "privileged expert" and results["config"]["privileged_state"]
        seen = _seen(out)
        assert all(s[5] is not None and s[7] == ("state", "privileged") for s in seen), seen
        reference = reference or seen
        assert seen == reference, name
    outcomes = [s[2] for s in reference]
    assert any(outcomes) and not all(outcomes), outcomes
    lines = [json.loads(x) for x in (tmp_path / "b3" / "episodes.jsonl").read_text().splitlines()]
    assert len(lines) == 4
    for e in lines:
        name = Path(e["video"]).name
        assert name == f"episode_{e['episode']}_{'success' if e['success'] else 'failure'}.mp4", (name, e)
        assert (tmp_path / "b3" / e["video"]).is_file() or Path(e["video"]).is_file()


@pytest.mark.sim
@pytest.mark.slow
@pytest.mark.parametrize(("suite", "task"), [
    ("libero_goal", 0),   # Open: a drawer, pulled by its handle
    ("libero_goal", 7),   # TurnOn: the stove's knob
    ("libero_object", 3),  # In: a bottle into the basket
    ("libero_90", 0),     # Close: a drawer pushed shut
    ("libero_10", 8),     # On twice on one region: the second moka pot beside the first on the burner
    ("libero_10", 3),     # In a bottom drawer, then Close it: a hand leaning into the push, beside a bottle
    ("libero_goal", 3),   # Open a top drawer that would stand over the bowl: the bowl slides clear first
    ("libero_10", 9),     # In a region under a roof, then Close its door: a mug set down at the microwave's
                          # opening by its handle, then pushed in by a leaning hand
])
def test_each_kind_of_goal_is_solved_at_the_protocol_limit(tmp_path, suite, task):
    """One episode per skill, at the suite's own step limit (standard protocol): it must succeed."""
    pytest.importorskip("libero.libero")
    from lerobench.suite.registry import load_suite

    name = load_suite(suite).tasks[task].name
    out = tmp_path / "run"
    result = runner.invoke(app, ["eval", "--suite", suite, "--tasks", name, "--episodes", "1", "--videos", "0",
                                 "--output", str(out)])
    assert result.exit_code == 0, result.output
    (episode,) = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    assert episode["success"] and episode["error"] is None, episode
    assert "privileged expert" in " ".join(result.output.split())


def test_the_expert_is_refused_by_serve_which_cannot_send_the_simulators_state():
    pytest.importorskip("libero.libero")
    from lerobench.errors import ConfigError
    from lerobench.policies.serve import PolicyServer, suite_context

    with pytest.raises(ConfigError, match="privileged state"):
        PolicyServer("libero-expert", suite_context("smoke_libero"), port=0)
