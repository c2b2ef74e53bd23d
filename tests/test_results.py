import json
import os
import threading

import pytest
from typer.testing import CliRunner

from lerobench.cli import app
from lerobench.core.records import EpisodeRecord
from lerobench.core.results import ResultsWriter
from lerobench.core.rundir import RunDir, read_episodes
from lerobench.errors import RunError


def record(episode, **kw):
    base = dict(task="t", episode=episode, trial=0, seed=1, init_state=episode, success=True, success_at_end=True,
                steps=3, return_=1.5, elapsed_s=0.1)
    base.update(kw)
    return EpisodeRecord(**base)


def held_fsyncs(monkeypatch):
    """Every ``os.fsync`` waits (at most 10 s) until the returned event is set: a disk that stalls. Returns the
    list of the calls' descriptors and the event."""
    real_fsync, calls, released = os.fsync, [], threading.Event()

    def held(fd):
        calls.append(fd)
        released.wait(10)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", held)
    return calls, released


def test_writer_appends_snapshots_and_replaces_results_atomically(tmp_path):
    writer = ResultsWriter(tmp_path)
    writer.put_episode(record(0))
    writer.put_results({"overall": {"n": 1}})
    writer.put_episode(record(1, success=False))
    writer.close()
    assert [r.episode for r in read_episodes(tmp_path / "episodes.jsonl")] == [0, 1]
    assert json.loads((tmp_path / "results.json").read_text()) == {"overall": {"n": 1}}
    assert oct((tmp_path / "results.json").stat().st_mode & 0o777) == "0o644"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_writer_commits_a_backlog_of_lines_with_one_fsync_and_keeps_their_order(tmp_path, monkeypatch):
    """A slow disk (CI's, under image builds) made each queued line cost its own fsync: a backlog took minutes.

    The first fsync here stalls while 300 more lines and a results.json queue behind it: they must land in order,
    the JSON after them, with a handful of fsyncs rather than 301.
    """
    calls, stalled = held_fsyncs(monkeypatch)
    writer = ResultsWriter(tmp_path)
    writer.put_episode(record(0))
    for episode in range(1, 301):
        writer.put_episode(record(episode, success=episode % 3 == 0))
    writer.put_results({"overall": {"n": 301}})
    writer.put_episode(record(301))
    stalled.set()
    writer.close()
    episodes = read_episodes(tmp_path / "episodes.jsonl")
    assert [r.episode for r in episodes] == list(range(302))
    assert [r.success for r in episodes[1:301]] == [e % 3 == 0 for e in range(1, 301)]
    assert json.loads((tmp_path / "results.json").read_text()) == {"overall": {"n": 301}}
    assert 2 <= len(calls) <= 4, calls  # line 0; the 300 behind it; line 301 (a JSON between never joins lines)


def test_writer_failure_surfaces_on_the_main_thread(tmp_path):
    (tmp_path / "results.json").mkdir()  # os.replace onto a directory fails inside the writer thread
    writer = ResultsWriter(tmp_path)
    writer.put_results({"x": 1})
    with pytest.raises(RunError, match="writing results"):
        writer.flush()
    with pytest.raises(RunError):
        writer.put_episode(record(0))


def test_nan_is_refused_before_it_reaches_disk(tmp_path):
    writer = ResultsWriter(tmp_path)
    with pytest.raises(ValueError):
        writer.put_results({"rate": float("nan")})
    writer.close()


def test_truncated_last_line_is_skipped_flagged_and_left_for_resume_to_cut(tmp_path):
    path = tmp_path / "episodes.jsonl"
    good = json.dumps(record(0).to_json())
    path.write_text(good + "\n" + good[:20])
    assert [r.episode for r in read_episodes(path)] == [0]
    (tmp_path / "results.json").write_text(json.dumps({"config": {
        "suite": "s", "policy": "p", "tasks": ["t"], "episodes_per_task": 1, "seed": 0}}))
    run = RunDir.load(tmp_path)
    assert [r.episode for r in run.records] == [0] and run.cut_tail
    assert path.read_text() == good + "\n" + good[:20]  # readers never truncate (a run may still be writing)


@pytest.mark.sim
def test_unwritable_output_is_refused_before_any_env(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = CliRunner().invoke(app, ["eval", "--suite", "smoke", "--output", str(blocker / "out")])
    assert result.exit_code == 2 and "not writable" in result.output and "Traceback" not in result.output


def test_demo_files_number_demos_in_save_order_replace_a_rerun_in_place_and_keep_filter_keys(tmp_path):
    """LIBERO's layout (``write_demo``): ``demo_0 ... demo_{n-1}`` whatever the episodes and trials saved (a loader
    iterates ``range(num_demos)``), an (episode, trial) written again keeps its name (``--resume``), and robomimic's
    ``mask/successful`` / ``mask/failed`` name exactly the demos of each outcome after every write."""
    h5py = pytest.importorskip("h5py")
    import numpy as np

    from lerobench.core.results import write_demo

    def save(episode, trial, success, steps):
        arrays = {"actions": np.full((steps, 7), episode + trial / 10),
                  "obs/agentview_rgb": np.zeros((steps, 8, 8, 3), np.uint8)}
        attrs = {"trial": trial, "success": success, "num_samples": steps}
        write_demo(tmp_path, "t", episode, attrs, arrays, {"env_name": "e"})

    def read():
        with h5py.File(tmp_path / "recordings" / "t_demo.hdf5", "r") as f:
            data = f["data"]
            demos = {name: (int(d.attrs["episode"]), int(d.attrs["trial"]), int(d.attrs["num_samples"]))
                     for name, d in data.items()}
            masks = {key: [name.decode() for name in f["mask"][key][()]] for key in f["mask"]}
            return demos, masks, int(data.attrs["num_demos"]), int(data.attrs["total"]), data.attrs["env_name"]

    save(3, 1, False, 4)  # as a shard or a batch finishes them: out of order, a later trial first
    save(0, 0, True, 2)
    save(3, 0, True, 5)
    demos, masks, n, total, name = read()
    assert demos == {"demo_0": (3, 1, 4), "demo_1": (0, 0, 2), "demo_2": (3, 0, 5)} and (n, total) == (3, 11)
    assert masks == {"successful": ["demo_1", "demo_2"], "failed": ["demo_0"]} and name == "e"
    save(3, 1, True, 6)  # episode 3's trial 1 run again: its own demo, replaced, now a success
    demos, masks, n, total, _ = read()
    assert demos == {"demo_0": (3, 1, 6), "demo_1": (0, 0, 2), "demo_2": (3, 0, 5)} and (n, total) == (3, 13)
    assert masks == {"successful": ["demo_0", "demo_1", "demo_2"], "failed": []}
    with h5py.File(tmp_path / "recordings" / "t_demo.hdf5", "r") as f:
        np.testing.assert_array_equal(f["data/demo_0/actions"][()], np.full((6, 7), 3.1))


def test_a_line_that_cannot_be_written_keeps_the_lines_queued_before_it(tmp_path, monkeypatch):
    """Group commit serialises a backlog together: a NaN line in it must not take the good lines before it along
    (they were on disk before, one write each, and ``--resume`` keeps them)."""
    _, stalled = held_fsyncs(monkeypatch)
    writer = ResultsWriter(tmp_path)
    for episode in range(51):
        writer.put_episode(record(episode))
    writer.put_episode(record(51, return_=float("nan")))
    stalled.set()
    with pytest.raises(RunError, match="writing results"):
        writer.close()
    assert [r.episode for r in read_episodes(tmp_path / "episodes.jsonl")] == list(range(51))
