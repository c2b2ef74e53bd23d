"""One source of truth for install and test commands: README, docs/usage.md and .ci/run agree line for line.

The README holds two one-line commands for a fresh machine: install and run the smoke evaluation; install what
the tests need and run them (``scripts/test.sh``). ``.ci/run`` ends with exactly the second.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


def bash_blocks(text):
    return [block.strip().splitlines() for block in re.findall(r"```bash\n(.*?)```", text, re.S)]


def readme_blocks():
    blocks = bash_blocks((ROOT / "README.md").read_text())
    setup = next(b for b in blocks if any("lerobench eval --suite smoke" in line for line in b))
    tests = next(b for b in blocks if "bash scripts/test.sh" in b[-1])
    assert len(setup) == 1 and len(tests) == 1, "each set-up is one command"
    return setup, tests


def test_usage_md_shows_exactly_the_readme_commands():
    setup, tests = readme_blocks()
    usage = bash_blocks((ROOT / "docs" / "usage.md").read_text())
    assert setup in usage and tests in usage


def test_ci_runs_the_readme_test_block_line_for_line_and_ends_with_it():
    _, tests = readme_blocks()
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert ci[-len(tests):] == tests


def test_the_test_script_installs_lints_types_and_runs_every_test():
    script = (ROOT / "scripts" / "test.sh").read_text().splitlines()
    steps = [line for line in script if line and not line.startswith(("#", " ", "if", "fi", "set", "cd"))]
    assert steps[-3:-1] == ["ruff check lerobench tests benchmarks examples", "mypy"]
    assert steps[-1].startswith("LEROBENCH_RECORD_DURATIONS=")  # the pytest line, continued
    assert script[-1] == '    MUJOCO_GL=egl python -m pytest -q -n "${LEROBENCH_TEST_WORKERS:-3}" --durations=40 "$@"'
    assert any(s.startswith("pip install -q -e \".[metaworld,libero,pusht,aloha,dev]\"") for s in steps)


def test_trials_docs_give_both_counts_and_they_hold():
    """pass@k counts attempts from 1, ``success_within_k[].trial`` indexes trials from 0 (41dfc68 documented neither
    pass@k nor the difference): the documented identity holds on a real aggregate, and both pages state it."""
    import itertools

    from lerobench.core.records import EpisodeRecord
    from lerobench.core.trials import trial_summary

    outcomes = list(itertools.product([False, True], repeat=3))  # every pattern of 3 trials, one episode each
    records = [EpisodeRecord(task="t", episode=e, trial=k, seed=0, init_state=e, success=ok, success_at_end=ok,
                             steps=1, return_=0.0, elapsed_s=0.0)
               for e, pattern in enumerate(outcomes) for k, ok in enumerate(pattern)]
    block = trial_summary(records, 3)
    for k in (1, 2, 3):
        row = block["pass_at_k"][k - 1]
        assert row["k"] == k and block["success_within_k"][k - 1]["trial"] == k - 1
        assert row["within_first_k"] == block["success_within_k"][k - 1]["success_rate"]
    assert block["pass_at_k"][0]["within_first_k"] == block["per_trial"][0]["success_rate"]  # pass@1 = trial 0
    for page in ("trials.md", "results.md"):
        text = (ROOT / "docs" / page).read_text()
        assert "`pass_at_k[k-1].within_first_k` = `success_within_k[k-1].success_rate`" in text, page
        assert "pass@1" in text and "from 0" in text and "from 1" in text, page


def _docs_torch_example():
    text = (ROOT / "docs" / "policies.md").read_text()
    return re.search(r"```python\n(# my_torch_policy\.py — run with: .*?)```", text, re.S)[1]


@pytest.mark.sim
def test_docs_torch_example_keys_state_by_row_and_check_policy_catches_position_keys(tmp_path, monkeypatch):
    """docs/policies.md's SmoothedMLP kept its state by row position (41dfc68), against the page's rule; now it
    keys by ``row_ids`` and passes check-policy, whose "state per row" check fails the old one."""
    import json

    from typer.testing import CliRunner

    from lerobench.cli import app

    pytest.importorskip("torch")
    pytest.importorskip("metaworld")
    (tmp_path / "my_torch_policy.py").write_text(_docs_torch_example())
    monkeypatch.syspath_prepend(str(tmp_path))

    def check(policy):
        done = CliRunner().invoke(app, ["check-policy", "--policy", policy, "--suite", "smoke", "--json"])
        return done.exit_code, {c["name"]: c for c in json.loads(done.stdout)["checks"]}

    code, checks = check("my_torch_policy:make_policy")
    assert code == 0 and checks["state per row"]["status"] == "pass", checks
    code, checks = check("fixture_policies:make_position_keyed_smoother")
    assert code == 1 and checks["state per row"]["status"] == "fail", checks
    assert "state is kept by position in the call; key it by row_ids(observation)" in checks["state per row"]["detail"]


def _policy_examples():
    text = (ROOT / "docs" / "policies.md").read_text()
    return re.findall(r"```python\n(# (\w+)\.py — run with: (lerobench eval [^\n]+)\n.*?)```", text, re.S)


@pytest.mark.sim
@pytest.mark.parametrize("example", _policy_examples(), ids=lambda e: e[1])
def test_docs_policy_examples_run_as_written_from_their_folder(tmp_path, example):
    code, module, command = example
    if module == "my_torch_policy":
        pytest.importorskip("torch")
    (tmp_path / f"{module}.py").write_text(code)
    # -P: like the `lerobench` console script, the working directory is not on sys.path
    args = [sys.executable, "-P", "-m", "lerobench", *command.split()[1:], "--max-steps", "5", "--videos", "0",
            "--output", str(tmp_path / "out")]
    env = {**os.environ, "MUJOCO_GL": "egl", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert len((tmp_path / "out" / "episodes.jsonl").read_text().splitlines()) == 2

