"""examples/metaworld_bc end to end at a tiny budget: demos from the real simulator, a torch training loop that
evaluates through ``lerobench.evaluate`` into TensorBoard, two checkpoints, and ``lerobench eval`` running one."""

import json
import math
from pathlib import Path

import pytest

pytestmark = pytest.mark.sim

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    pytest.importorskip("metaworld")
    pytest.importorskip("torch")
    pytest.importorskip("tensorboardX")
    from examples.metaworld_bc.train import Args, train

    out = tmp_path_factory.mktemp("bc")
    args = Args(out=out, tasks=("reach-v3",), demos=2, demo_steps=80, updates=40, eval_every=1000, early_at=20,
                eval_episodes=2, eval_max_steps=20)
    return out, train(args)


def test_the_loop_collects_trains_evaluates_and_writes_both_checkpoints(trained):
    out, curve = trained
    assert curve["demo_successes"] == {"reach-v3": 2}  # the noised expert still solves reach
    assert [e["update"] for e in curve["evaluations"]] == [20, 40]  # at early_at and at the end
    for e in curve["evaluations"]:
        assert 0.0 <= e["success_rate"] <= 1.0 and set(e["tasks"]) == {"reach-v3"} and math.isfinite(e["loss"])
    assert json.loads((out / "curve.json").read_text()) == json.loads(json.dumps(curve))
    from examples.metaworld_bc.policy import load

    early, final = load(out / "early.pt"), load(out / "final.pt")
    assert early.tasks == final.tasks == ["reach-v3"]
    assert any((a != b).any() for a, b in zip(early.state_dict().values(), final.state_dict().values(), strict=True))


def test_tensorboard_holds_the_success_curve_and_the_loss(trained):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out, curve = trained
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    logged = [(p.step, p.value) for p in events.Scalars("eval/success_rate")]
    assert logged == [(e["update"], pytest.approx(e["success_rate"])) for e in curve["evaluations"]]
    assert [p.step for p in events.Scalars("eval/reach-v3/success_rate")] == [20, 40]
    loss = events.Scalars("train/loss")
    assert [p.step for p in loss] == [40] and math.isfinite(loss[0].value) and loss[0].value > 0


def test_lerobench_eval_runs_a_checkpoint(trained, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from lerobench.cli import app

    out, curve = trained
    monkeypatch.chdir(ROOT)  # `examples.metaworld_bc.policy` is found from the repository root
    monkeypatch.setenv("METAWORLD_BC_DIR", str(out))
    run = tmp_path / "final"
    result = CliRunner().invoke(app, ["eval", "--suite", "metaworld_mt10", "--tasks", "reach-v3", "--episodes", "2",
                                      "--max-steps", "20", "--videos", "0", "--policy",
                                      "examples.metaworld_bc.policy:final", "--output", str(run)])
    assert result.exit_code == 0, result.output
    results = json.loads((run / "results.json").read_text())
    assert results["policy"] == "examples.metaworld_bc.policy:final"
    # the same weights on the same episodes (seed 0, 20 steps) as the loop's last evaluation
    assert results["overall"]["success_rate"] == pytest.approx(curve["evaluations"][-1]["success_rate"])
    monkeypatch.setenv("METAWORLD_BC_DIR", str(tmp_path / "nowhere"))
    missing = CliRunner().invoke(app, ["eval", "--suite", "metaworld_mt10", "--tasks", "reach-v3", "--episodes", "1",
                                       "--policy", "examples.metaworld_bc.policy:early", "--output",
                                       str(tmp_path / "missing")])
    assert missing.exit_code == 1 and "no BC checkpoint at" in missing.output
