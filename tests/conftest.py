import os

os.environ.setdefault("MUJOCO_GL", "egl")
# The tests run commands through typer's CliRunner in this process, not through ``lerobench.cli.main``: ask MKL for
# the strict mode the ``lerobench`` command starts in (``system.strict_mkl_default``), before torch computes.
# tests/test_imports.py checks in a clean subprocess that lerobench itself sets nothing.
os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")
# Runs in the tests compare runs with each other (batch sizes, executors, resumes), not with published pixels: they
# render at draft quality (2-3x cheaper frames on a CPU; docs/suites.md), as recorded in each run's config. Tests
# about published pixels or the published label take the ``published_rendering`` fixture; test_render_savings
# compares with frames stored at published quality.
os.environ["LEROBENCH_RENDER_QUALITY"] = "draft"  # also over a developer's own setting: the same runs everywhere


from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

# Under CI (CI=true) a skipped test fails the run, unless LEROBENCH_CI_ALLOW_SKIPS says why (tests/ci_skips.py).
from ci_skips import (  # noqa: E402,F401 - hooks: pytest registers them from this module's namespace
    pytest_configure,
    pytest_make_collect_report,
    pytest_report_header,
    pytest_runtest_makereport,
    pytest_terminal_summary,
)
from file_times import pytest_runtest_logreport, pytest_sessionfinish  # noqa: E402,F401 - per-file times

# -- real runs shared by the compare and report tests -----------------------------------------------------
_MT10 = Path(__file__).resolve().parent.parent / "suites" / "metaworld_mt10.toml"


@pytest.fixture(scope="session")
def real_runs(tmp_path_factory):
    """Real Meta-World runs (reach-v3, push-v3): expert and random on seed 5, expert on seed 6, and random with a
    shorter step limit. 96x96 videos keep rendering cheap; 120 steps is enough for both experts (they need ~45 and
    ~65). Returns a dict of run directories."""
    pytest.importorskip("metaworld")
    from typer.testing import CliRunner

    from lerobench.cli import app

    base = tmp_path_factory.mktemp("runs")
    suite = base / "metaworld_mt10.toml"
    suite.write_text(_MT10.read_text().replace("image_size = [480, 480]", "image_size = [96, 96]"))
    common = ["eval", "--suite", str(suite), "--tasks", "reach-v3,push-v3", "--episodes", "6", "--batch-size", "2"]
    runs = {"expert": ("metaworld-expert", "5", "120", "1"), "random": ("random", "5", "120", "1"),
            "expert_seed6": ("metaworld-expert", "6", "120", "0"), "random_short": ("random", "5", "50", "0")}
    out = {}
    for name, (policy, seed, steps, videos) in runs.items():
        out[name] = base / name
        result = CliRunner().invoke(app, [*common, "--policy", policy, "--seed", seed, "--max-steps", steps,
                                          "--videos", videos, "--output", str(out[name])])
        assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="session")
def libero_demos(tmp_path_factory):
    """A real LIBERO run of the privileged expert recorded as LIBERO demo files (``--record all``, 32x32 images):
    libero_object task 0, episodes 0 and 1, which need 100 and 101 steps, at a limit of 100: one success and one
    failure. Returns ``(run directory, its episodes.jsonl lines)``."""
    pytest.importorskip("libero.libero")
    pytest.importorskip("h5py")
    import json

    from typer.testing import CliRunner

    from lerobench.cli import app

    out = tmp_path_factory.mktemp("libero_demos") / "run"
    result = CliRunner().invoke(app, ["eval", "--suite", "libero_object", "--tasks", "0", "--episodes", "2",
                                      "--max-steps", "100", "--videos", "0", "--record", "all", "--record-size", "32",
                                      "--output", str(out)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    assert [e["success"] for e in lines] == [True, False], [e["steps"] for e in lines]
    return out, lines


@pytest.fixture(scope="session")
def pusht_noisy_run(tmp_path_factory):
    """Run A of the progress A/B tests: ``pusht-expert-noisy``, 40 episodes of 50 steps on the real gym-pusht
    (partial progress, few successes). Shared: a test that edits its files edits a copy."""
    pytest.importorskip("gym_pusht")
    from typer.testing import CliRunner

    from lerobench.cli import app

    out = tmp_path_factory.mktemp("pusht_noisy") / "a"
    result = CliRunner().invoke(app, ["eval", "--suite", "pusht", "--videos", "0", "--max-steps", "50", "--policy",
                                      "pusht-expert-noisy", "--episodes", "40", "--output", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture
def published_rendering(monkeypatch):
    """Runs in this test render as the suites publish (no ``LEROBENCH_RENDER_QUALITY=draft`` from this file)."""
    monkeypatch.delenv("LEROBENCH_RENDER_QUALITY", raising=False)


@pytest.fixture
def golden_copy(tmp_path, monkeypatch):
    """A private cache and a perturbable copy of the Meta-World golden file; returns ``perturb(change)``, which
    applies ``change`` to the whole golden document (not another MuJoCo: the files it is checked against)."""
    import json
    import shutil

    from lerobench.envs.fingerprint import golden_path

    monkeypatch.setenv("LEROBENCH_CACHE_DIR", str(tmp_path / "cache"))
    golden = tmp_path / "golden"
    shutil.copytree(golden_path("metaworld").parent, golden)
    monkeypatch.setenv("LEROBENCH_GOLDEN_DIR", str(golden))

    def perturb(change) -> None:
        doc = json.loads((golden / "metaworld.json").read_text())
        change(doc)
        (golden / "metaworld.json").write_text(json.dumps(doc))

    return perturb


def pytest_collection_modifyitems(config, items):
    """A test that uses ``real_runs`` drives the simulator (through the fixture): marked ``sim`` with the rest."""
    for item in items:
        if "real_runs" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.sim)


@pytest.fixture(autouse=True)
def _torch_state_as_found():
    """A test that runs a torch policy in this process (check-policy through CliRunner, an Evaluation) switches
    torch to deterministic numerics, as the CLI's own process does; the next test must find torch as it was."""
    import sys

    if "torch" not in sys.modules:
        yield
        if "torch" in sys.modules:  # imported by this test: back to torch's defaults
            torch = sys.modules["torch"]
            torch.use_deterministic_algorithms(False)
            torch.backends.cudnn.deterministic = False
        return
    from lerobench.policies.numerics import preserved_torch_state

    with preserved_torch_state():
        yield


@pytest.fixture(autouse=True)
def _no_kept_template():
    """``lerobench.evaluate`` keeps the last template process for its next call: not from one test to the next."""
    yield
    import sys

    template = sys.modules.get("lerobench.envs.template")
    if template is not None:
        template.stop_kept()
