"""examples/libero_bc end to end at a tiny budget: LIBERO demo files from a real recorded run, a visuomotor torch
policy trained on them that evaluates through ``lerobench.evaluate`` into TensorBoard, two checkpoints, the same
weights on a rerun, and ``lerobench eval`` running a checkpoint that reads both cameras."""

import json
import math

import pytest

pytestmark = pytest.mark.sim
pytest.importorskip("torch")
pytest.importorskip("tensorboardX")


def _args(demos, out, **changes):
    from examples.libero_bc.train import Args

    settings = {"updates": 30, "early_at": 10, "eval_every": 1000, "eval_episodes": 1, "eval_max_steps": 6,
                "batch": 16, **changes}
    return Args(demos=demos, out=out, **settings)


@pytest.fixture(scope="module")
def trained(libero_demos, tmp_path_factory):
    from examples.libero_bc.train import train

    run, _ = libero_demos
    out = tmp_path_factory.mktemp("libero_bc")
    return out, train(_args(run, out))


def test_the_loop_reads_the_demo_files_trains_evaluates_and_writes_both_checkpoints(trained, libero_demos):
    out, curve = trained
    _, lines = libero_demos
    task = lines[0]["task"]
    assert curve["tasks"] == [task] and curve["rows"] == lines[0]["steps"]  # the failed demo is left out
    assert [e["update"] for e in curve["evaluations"]] == [10, 30]  # at early_at and at the end
    for e in curve["evaluations"]:
        assert e["episodes"] == 1 and set(e["tasks"]) == {task} and math.isfinite(e["loss"])
    assert json.loads((out / "curve.json").read_text()) == json.loads(json.dumps(curve))
    from examples.libero_bc.policy import CAMERAS, load

    early, final = load(out / "early.pt"), load(out / "final.pt")
    assert early.tasks == final.tasks == [task] and final.image_size == 32
    assert final.observation_needs.cameras == CAMERAS and final.observation_needs.replan_steps == 4
    assert any((a != b).any() for a, b in zip(early.state_dict().values(), final.state_dict().values(), strict=True))


def test_a_rerun_gives_the_same_weights_whatever_it_evaluates(trained, libero_demos, tmp_path):
    """Byte-identical weights from the same demos and seed, with other evaluations in between (they must not
    touch the training's random stream or numerics)."""
    import torch

    from examples.libero_bc.policy import load
    from examples.libero_bc.train import train

    out, _ = trained
    run, _ = libero_demos
    train(_args(run, tmp_path, eval_every=15, early_at=10))
    for name in ("early.pt", "final.pt"):
        first, again = load(out / name).state_dict(), load(tmp_path / name).state_dict()
        assert all(torch.equal(first[k], again[k]) for k in first), name


def test_tensorboard_holds_the_success_curve_and_the_loss(trained):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out, curve = trained
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    logged = [(p.step, p.value) for p in events.Scalars("eval/success_rate")]
    assert logged == [(e["update"], pytest.approx(e["success_rate"])) for e in curve["evaluations"]]
    loss = events.Scalars("train/loss")
    assert [p.step for p in loss] == [30] and math.isfinite(loss[0].value) and loss[0].value > 0


def test_lerobench_eval_runs_a_checkpoint_reading_both_cameras(trained, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from lerobench.cli import app

    out, _ = trained
    monkeypatch.setenv("LIBERO_BC_DIR", str(out))
    result = CliRunner().invoke(app, ["eval", "--suite", "libero_object", "--tasks", "0", "--episodes", "1",
                                      "--max-steps", "9", "--videos", "0", "--policy",
                                      "examples.libero_bc.policy:final", "--output", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["policy"] == "examples.libero_bc.policy:final"
    (episode,) = [json.loads(x) for x in (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()]
    assert episode["error"] is None and episode["steps"] == 9
    assert episode["renders"] == 2 * 3  # both cameras at the first observation and after steps 4 and 8
