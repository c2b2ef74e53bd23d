"""What a camera policy learned here makes checkable on LIBERO, in short versions (issue 45): the same episodes at
any batch size, executor and task parallelism; the delay curve and a LIBERO-PRO family against their controls,
each with the exact paired interval; the designed A/B of the final checkpoint against the early one.

The policy is ``examples/libero_bc`` trained on libero_object tasks 0 and 1 (``tests/data/libero_bc/README.md``:
the commands that made the two checkpoints, their rates and digests). It reads both cameras and the 8-D state,
never the simulator's. Each check spans both outcomes (the invariance runs hold successes and failures; each
robustness arm and the A/B compare a run that succeeds with one that fails), and asserts so: a check on runs
where every episode fails could not fail.
"""

import json
from pathlib import Path

import pytest
from helpers import libero_suite_copy
from typer.testing import CliRunner

from lerobench.cli import app

pytestmark = [pytest.mark.sim, pytest.mark.slow]
pytest.importorskip("libero.libero")
pytest.importorskip("torch")

TESTS = Path(__file__).parent
CHECKPOINTS = TESTS / "data" / "libero_bc"
runner = CliRunner()
STEPS = 125
"""The short suite's step limit: the final checkpoint solves task 0 in 101-106 steps, task 1 in 157-266 or never
(so every failure ends at 125 steps, and a run of failures costs what it must)."""
EPISODES = 3
"""Per task in the invariance runs (so ``--batch-size 3`` really steps 3 envs): the final checkpoint solves task 0's
three and fails task 1's at STEPS (measured)."""
PAIRS = 2
"""Episodes per arm of the robustness run (task 0, where the final checkpoint succeeds): one round at batch 2."""
AB_CAP = 10
"""The A/B's cap in pairs (run A's episodes): the design at --effect 0.8 would take up to 13; the cap lowers its
``max_pairs`` to 10, where 6 discordant pairs still arrive with 97% power (at --effect 0.5 it needs 15: refused)."""


@pytest.fixture(autouse=True)
def _checkpoints(monkeypatch):
    monkeypatch.setenv("LIBERO_BC_DIR", str(CHECKPOINTS))


def _small_suite(tmp_path: Path, image: int = 64, steps: int = STEPS) -> Path:
    """libero_object's first two tasks at ``image``x``image`` (frames 16 times cheaper than the protocol's, at the
    size the policy was trained on) and a ``steps`` limit (failures end sooner); everything else as shipped."""
    return libero_suite_copy(tmp_path, "libero_object", [0, 1], "libero_object_small",
                             {"image_size = [256, 256]": f"image_size = [{image}, {image}]",
                              "max_steps = 280": f"max_steps = {steps}"})


def _small_family_suites(folder: Path) -> Path:
    """libero_object, its LIBERO-PRO swap family and the family's control, each as shipped but at the policy's
    64x64 images (frames 16 times cheaper) and STEPS: the base's file, which ``robustness --base`` finds the two
    others beside."""
    folder.mkdir()
    shipped = TESTS.parent / "suites"
    for source in (shipped / "libero_object.toml", shipped / "libero_pro" / "libero_object_swap.toml",
                   shipped / "libero_pro" / "libero_object_swap_control.toml"):
        text = source.read_text()
        changes = {"image_size = [256, 256]": "image_size = [64, 64]", "max_steps = 280": f"max_steps = {STEPS}"}
        for old, new in changes.items():
            assert text.count(old) == 1, f"{source} no longer holds {old!r} once: update this copy"
            text = text.replace(old, new)
        (folder / source.name).write_text(text)
    return folder / "libero_object.toml"


def _lines(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]


def _seen(out: Path) -> list[tuple]:
    """Each episode as the invariance promise covers it: outcome, steps, return and what the policy saw."""
    return sorted((e["task"], e["episode"], e["success"], e["steps"], e["return"], e["start_digest"],
                   e["obs_digest"], e["obs_reads"], tuple(e["obs_parts"] or ())) for e in _lines(out))


def _eval(out: Path, *args: str) -> dict:
    result = runner.invoke(app, ["eval", "--videos", "0", "--output", str(out), *args])
    assert result.exit_code == 0, result.output
    return json.loads((out / "results.json").read_text())


def test_the_learned_policys_episodes_are_the_same_at_any_batch_size_executor_and_task_parallelism(tmp_path):
    suite = _small_suite(tmp_path)
    common = ["--suite", str(suite), "--policy", "examples.libero_bc.policy:final", "--episodes", str(EPISODES)]
    # batch 1 is the reference (the two tasks side by side in threads, each at batch 1: a run of its own at batch 1
    # would step the same envs one task after the other), then batch 3 and the processes executor
    runs = {"b1-parallel-tasks": ["--parallel-tasks", "2", "--batch-size", "1"], "b3": ["--batch-size", "3"],
            "processes": ["--executor", "processes", "--workers", "2"]}
    reference = None
    for name, extra in runs.items():
        results = _eval(tmp_path / name, *common, *extra)
        assert results["config"]["policy_kind"] != "privileged expert"
        if name == "b3":  # (a batch larger than a task's episodes would be cut to them)
            assert results["config"]["batch_size_used"] == 3, results["config"]
        seen = _seen(tmp_path / name)
        assert all(s[8] == ("state", "agentview", "robot0_eye_in_hand") for s in seen), seen  # never privileged
        if reference is None:
            outcomes = [s[2] for s in seen]
            assert any(outcomes) and not all(outcomes), outcomes  # else the comparison could not fail
            reference = seen
        assert seen == reference, name


def test_a_delay_and_a_libero_pro_family_drop_the_learned_policy_against_their_controls(tmp_path):
    """One ``robustness`` call: the swap family (LIBERO-PRO, against its matched control suite) and a 4-step
    inference delay (against the shared undelayed control). Each arm's drop, exact paired interval and exact
    McNemar p are those of its own episodes; the camera policy feels both (the privileged expert is untouched by
    the swap: docs/perturbations.md). With 2 pairs the drop is a point estimate (p 0.5): the 20-pair numbers are
    in the docs."""
    from lerobench.stats.binomial import compare_paired, paired_difference_exact

    task = "pick_up_the_alphabet_soup_and_place_it_in_the_basket"
    out = tmp_path / "rob"
    base = _small_family_suites(tmp_path / "suites")
    result = runner.invoke(app, ["robustness", "--base", str(base), "--tasks", task, "--families",
                                 "swap,delay_steps=4", "--policy", "examples.libero_bc.policy:final", "--episodes",
                                 str(PAIRS), "--max-steps", str(STEPS), "--videos", "0", "--output", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads((out / "robustness.json").read_text())
    families = {f["family"]: f for f in document["families"]}
    assert set(families) == {"swap", "delay_steps=4"}

    def outcomes(run: str) -> list[bool]:
        return [e["success"] for e in sorted(_lines(Path(run)), key=lambda e: e["episode"])]

    for family, row in families.items():
        for run in (row["control_run"], row["perturbed_run"]):  # the suites beside the base, not the shipped ones
            config = json.loads((Path(run) / "results.json").read_text())["config"]
            assert config["protocol_settings"]["image_size"] == [64, 64], (run, config["protocol_settings"])
        control, perturbed = outcomes(row["control_run"]), outcomes(row["perturbed_run"])
        assert len(control) == len(perturbed) == PAIRS
        assert any(control) and not all(perturbed), (family, control, perturbed)  # both outcomes in the family
        expected = compare_paired(control, perturbed)
        exact, _ = paired_difference_exact(expected.gained, expected.lost, PAIRS)
        assert row["paired"] and row["n_pairs"] == PAIRS and row["interval"] == "exact unconditional (paired)"
        assert row["drop"] == pytest.approx(-expected.delta) and row["p_value"] == pytest.approx(expected.p_value)
        assert row["drop_ci95"] == pytest.approx([-exact[1], -exact[0]], abs=1e-6)
        assert row["drop"] > 0 and row["lost"] == expected.lost > 0, (family, row)
    assert families["swap"]["control_suite"] == "libero_object_swap_control"  # the matched control, not the base
    assert families["delay_steps=4"]["start_digests_equal"] == PAIRS  # the same starts, only the delay differs
    assert [point["delay_steps"] for point in document["delay_curve"]] == [0, 4]


def test_the_final_checkpoint_is_decided_better_than_the_early_one_in_fewer_pairs_than_fixed_n(tmp_path):
    """The designed A/B (``--versus`` the early checkpoint's recorded run, ``--until decided --effect 0.8``) on
    task 0: the early checkpoint (100 updates) fails where the final one succeeds, and the test stops as soon as
    that is decided, before the pairs a fixed-n exact McNemar test needs at the same effect, alpha and power."""
    suite = _small_suite(tmp_path)
    common = ["--suite", str(suite), "--tasks", "0", "--episodes", str(AB_CAP)]
    _eval(tmp_path / "early", *common, "--policy", "examples.libero_bc.policy:early")
    results = _eval(tmp_path / "final", *common, "--policy", "examples.libero_bc.policy:final", "--versus",
                    str(tmp_path / "early"), "--until", "decided", "--effect", "0.8")
    early, final = ({(e["task"], e["episode"]): e["success"] for e in _lines(tmp_path / name)}
                    for name in ("early", "final"))
    assert not all(early.values()) and any(final.values())  # both outcomes: the decision could have gone otherwise
    versus = results["stopping"]["versus"]
    assert versus["decision"] == "B better", versus
    # Run A solved none, so the design is all-or-nothing: one loss decides against B, and B is decided better
    # after ceil(log2(1 / 0.025)) = 6 discordant pairs (6 pairs where B solves each), where fixed-n needs 9.
    assert versus["design"]["fixed_n"] == 9 and versus["gained"] == 6 and versus["lost"] == 0
    assert versus["pairs"] < versus["design"]["fixed_n"]
    task = next(iter(final))[0]
    paired = [(task, i) for i in range(versus["pairs"])]  # the ledger counts run A's episodes in index order
    assert all(key in final and key in early for key in paired)  # (more ran in flight at the stop)
    assert versus["gained"] == sum(final[k] and not early[k] for k in paired)
