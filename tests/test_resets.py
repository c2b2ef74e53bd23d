"""Resets that forget (issue 33): every task's first observation is the same whatever its simulator ran before.

The sweep (``lerobench.envs.resets``, ``lerobench check-resets``) over the 50 Meta-World tasks and the 130 tasks of
the five LIBERO suites, in two processes: per task one simulator, reset to episode 1 (fresh), episode 0 run by a
moving policy, episode 1 again; state, drawn poses (every geom, site, body, camera, light), start digest and the
first camera's image at 32x32 compared bit for bit.
Meta-World's own reset (no ``mj_forward``) is named stale on exactly the tasks it was stale on.

CI sweeps every third task of Meta-World's, every tenth of a LIBERO suite's and every thirtieth of libero_90 (every
task is checked by ``make sweeps``, which sets LEROBENCH_FULL_SWEEPS=1, and by ``lerobench check-resets <suite>``;
all clean when last run, docs/suites.md).
"""

import dataclasses
import json

import pytest
from helpers import swept
from typer.testing import CliRunner

from lerobench.cli import app
from lerobench.envs.resets import check_resets, reset_specs
from lerobench.suite.registry import load_suite

runner = CliRunner()
SIZE = (32, 32)
"""Images compared at 32x32: the drawn poses are compared exactly, so a small image loses nothing but cost."""


def _stale(suite, cameras=None, processes=2):
    checks = list(check_resets(reset_specs(suite, SIZE, cameras=cameras), processes=processes))
    assert len(checks) == len(suite.tasks)
    assert all(c.error is None for c in checks), [c.describe() for c in checks if c.error]
    return {c.task: c.differences for c in checks if not c.ok}


@pytest.mark.sim
@pytest.mark.slow
def test_check_resets_names_the_tasks_metaworlds_own_reset_left_stale(tmp_path):
    """Before the fix lerobench reset Meta-World as Meta-World does; the check finds push-v3 and push-back-v3
    (their goal site is drawn where the previous episode put it), and passes reach-v3. Exit 1, task named."""
    pytest.importorskip("metaworld")
    suite = tmp_path / "own_reset.toml"
    suite.write_text("""
name = "own_reset"
backend = "stale_backend:METAWORLD_RESET"
episodes_per_task = 2
tasks = ["reach-v3", "push-v3", "push-back-v3"]

[protocol]
max_steps = 20
image_size = [32, 32]
cameras = ["corner2"]
flip_images = true
""")
    result = runner.invoke(app, ["check-resets", str(suite), "--image-size", "32", "--json"])
    assert result.exit_code == 1, result.output
    found = {c["task"]: c for c in map(json.loads, result.stdout.strip().replace("}\n{", "}\x00{").split("\x00"))}
    assert {t for t, c in found.items() if not c["ok"]} == {"push-v3", "push-back-v3"}
    assert found["push-v3"]["differences"]["scene_poses"] >= 1 and found["reach-v3"]["differences"] == {}
    assert "push-v3" in result.output and "failed the reset check" in result.output
    fixed = runner.invoke(app, ["check-resets", "metaworld_mt50", "--tasks", "push-v3", "--image-size", "32"])
    assert fixed.exit_code == 0, fixed.output


@pytest.mark.sim
@pytest.mark.slow
def test_every_metaworld_task_forgets_its_previous_episode():
    pytest.importorskip("metaworld")
    suite = load_suite("metaworld_mt50")
    assert _stale(dataclasses.replace(suite, tasks=swept(suite.tasks, 3)), cameras=["corner2"]) == {}


@pytest.mark.sim
@pytest.mark.slow
@pytest.mark.parametrize("name", ["libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90"])
def test_every_libero_task_forgets_its_previous_episode(name):
    """State, drawn poses and start digest bit for bit; the agentview image at 32x32 too, except on libero_90.

    libero_90's scenes are the other suites' scenes, objects and cameras, and the drawn poses (every geom, site,
    body, camera and light) are what catch a stale scene (a goal site left behind changed 0 pixels at small
    images); its 90 tasks take 100 s without images and 2-4 minutes with them, so its sweep checks state and
    poses, and ``lerobench check-resets libero_90`` all 90 with images (measured clean, docs/suites.md).
    """
    pytest.importorskip("libero")
    suite = load_suite(name)
    # in CI every tenth task (the first of each suite), and every thirtieth of libero_90's (its scenes are the
    # other suites'): 7 tasks
    suite = dataclasses.replace(suite, tasks=swept(suite.tasks, 30 if name == "libero_90" else 10))
    assert _stale(suite, cameras=[] if name == "libero_90" else ["agentview"]) == {}


def test_a_runs_reset_claim_is_what_check_resets_found_on_this_stack(tmp_path, monkeypatch):
    """verified only when every task of the run passed; failed names the stale one; unchecked otherwise."""
    from lerobench.envs.resets import ResetCheck, remember, reset_claim

    monkeypatch.setenv("LEROBENCH_CACHE_DIR", str(tmp_path))
    tasks = ["reach-v3", "push-v3"]
    assert reset_claim("mt", "metaworld", tasks)["status"] == "unchecked"
    remember("mt", "metaworld", [ResetCheck("reach-v3", 1)])
    claim = reset_claim("mt", "metaworld", tasks)
    assert claim["status"] == "unchecked" and claim["tasks_checked"] == 1 and "1 of 2 tasks" in claim["reason"]
    remember("mt", "metaworld", [ResetCheck("push-v3", 1, {"corner2": 51})])
    claim = reset_claim("mt", "metaworld", tasks)
    assert claim["status"] == "failed" and "push-v3" in claim["reason"] and "corner2: 51 pixels" in claim["reason"]
    remember("mt", "metaworld", [ResetCheck("push-v3", 1)])
    assert reset_claim("mt", "metaworld", tasks) == {"status": "verified", "tasks_checked": 2, "reason": None}
    assert reset_claim("other_suite", "metaworld", tasks)["status"] == "unchecked"
