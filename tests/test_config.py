import pytest

from lerobench.core.results import wilson_interval
from lerobench.errors import ConfigError, UnknownNameError
from lerobench.suite.config import parse_suite
from lerobench.suite.registry import list_suites, load_suite, shipped_suite_paths
from lerobench.system import auto_batch_size, cgroup_cpu_limit, usable_cores


def test_every_shipped_suite_loads_and_validates():
    suites = list_suites()
    names = {s.name for s in suites}
    assert {"metaworld_mt50", "metaworld_mt10", "metaworld_easy", "metaworld_medium", "metaworld_hard",
            "metaworld_very_hard", "smoke"} <= names
    for s in suites:
        assert s.tasks and s.protocol().max_steps >= 1
    mt50 = load_suite("metaworld_mt50")
    assert len(mt50.tasks) == 50 and mt50.groups == ["easy", "medium", "hard", "very_hard"]
    assert [len(load_suite(f"metaworld_{g}").tasks) for g in ("easy", "medium", "hard", "very_hard")] == [28, 11, 6, 5]
    assert len(load_suite("metaworld_mt10").tasks) == 10


@pytest.mark.sim
def test_metaworld_suites_match_the_installed_benchmark():
    metaworld = pytest.importorskip("metaworld")
    assert {t.name for t in load_suite("metaworld_mt50").tasks} == set(metaworld.ALL_V3_ENVIRONMENTS)
    assert {t.name for t in load_suite("metaworld_mt10").tasks} == set(metaworld.MT10().train_classes)


def _write(tmp_path, text):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    return path


BASE = 'name = "x"\nbackend = "metaworld"\ntasks = ["reach-v3"]\n'


@pytest.mark.parametrize(
    "text, field",
    [
        (BASE + "max_step = 3\n[protocol]\nmax_steps = 5\n", "max_step"),
        (BASE + "[protocol]\nmax_steps = 'many'\n", "protocol.max_steps"),
        (BASE + "[protocol]\nimage_size = [1]\nmax_steps = 5\n", "protocol.image_size"),
        ('name = "x"\nbackend = "metaworld"\n[protocol]\nmax_steps = 5\n', "tasks"),
        (BASE + "episodes_per_task = 0\n[protocol]\nmax_steps = 5\n", "episodes_per_task"),
        (BASE + "[protocol]\nmax_steps = 5\nsettle = 1\n", "settle"),
        (BASE + "[protocol]\nmax_steps = 5\n[protocols.other]\nmax_steps = -1\n", "protocols.other.max_steps"),
    ],
)
def test_malformed_suite_names_file_and_field(tmp_path, text, field):
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_suite(str(path))
    assert str(path) in str(info.value) and field in str(info.value)


def test_invalid_toml_names_the_file(tmp_path):
    path = _write(tmp_path, "name = \n")
    with pytest.raises(ConfigError, match="invalid TOML") as info:
        load_suite(str(path))
    assert str(path) in str(info.value)


def test_unknown_names_suggest_close_ones():
    with pytest.raises(UnknownNameError, match="metaworld_mt10"):
        load_suite("metaworld_mt1O")
    with pytest.raises(UnknownNameError, match="reach-v3"):
        load_suite("smoke").select_tasks(["reach-v2"])
    with pytest.raises(UnknownNameError, match="standard"):
        load_suite("smoke").protocol("standart")


def test_select_tasks_keeps_suite_order():
    suite = load_suite("metaworld_mt10").select_tasks(["push-v3", "reach-v3"])
    assert [t.name for t in suite.tasks] == ["reach-v3", "push-v3"]
    assert [t.index for t in suite.tasks] == [0, 1]  # indices from the full suite: seeds do not shift


def test_protocol_override_inherits_standard():
    data = {"name": "x", "backend": "libero", "tasks": ["a"],
            "protocol": {"max_steps": 220, "settle_steps": 10, "image_size": [256, 256]},
            "protocols": {"lerobot": {"max_steps": 280, "image_size": [360, 360]}}}
    suite = parse_suite(data, "inline")
    assert suite.protocol("lerobot").settle_steps == 10 and suite.protocol("lerobot").max_steps == 280
    assert suite.protocol().image_size == (256, 256)


def test_shipped_suite_names_equal_file_names():
    for name, path in shipped_suite_paths().items():
        assert load_suite(name).source == path


def test_wilson_interval_contains_rate_and_is_bounded():
    for s, n in [(0, 5), (5, 5), (3, 10), (49, 50)]:
        lo, hi = wilson_interval(s, n)
        assert 0.0 <= lo <= s / n <= hi <= 1.0
    assert wilson_interval(0, 0) == [0.0, 1.0]
    lo, hi = wilson_interval(5, 10)
    assert abs(lo - 0.2366) < 1e-3 and abs(hi - 0.7634) < 1e-3


def test_usable_cores_honours_affinity_and_quota():
    assert usable_cores(affinity={0, 1, 2, 3}, quota=None, probe=False) == 4
    assert usable_cores(affinity={0, 1, 2, 3}, quota=1.5, probe=False) == 2
    assert usable_cores(affinity={3}, quota=8.0, probe=False) == 1
    assert usable_cores(affinity={0, 1}, quota=0.2, probe=False) == 1


def test_cgroup_quota_parsing(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_limit(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(tmp_path) is None
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("300000")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000")
    assert cgroup_cpu_limit(v1) == 3.0
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("-1")
    assert cgroup_cpu_limit(v1) is None


def test_auto_batch_size_caps():
    assert auto_batch_size(50, 400, cores=8, memory_mb=100_000, probe=False).batch_size == 8
    assert auto_batch_size(3, 400, cores=8, memory_mb=100_000, probe=False).batch_size == 3
    choice = auto_batch_size(50, 2000, cores=8, memory_mb=5000, probe=False)
    assert choice.batch_size == 2 and "2000 MB per worker" in choice.explain()
    assert auto_batch_size(50, 2000, cores=8, memory_mb=100, probe=False).batch_size == 1
