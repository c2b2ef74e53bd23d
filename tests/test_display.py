"""What the terminal and the report show: whole cells when piped, intervals rounded outward, one n under --until."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lerobench.plan.stopping import Ledger, Until, stopping_line
from lerobench.stats.intervals import outward, percent_interval, points_interval

TESTS = Path(__file__).parent


def test_interval_ends_round_outward():
    assert percent_interval((0.8278, 0.9992)) == "82–100%"  # nearest would say 83–100%: narrower than computed
    assert percent_interval((0.29, 0.5)) == "29–50%"  # float noise (100 * 0.29 = 28.999...) is not rounded down
    assert points_interval((-0.0049, 0.1201)) == "-1…+13"
    assert points_interval((0.0, 0.0)) == "+0…+0"
    assert percent_interval((0.12345, 0.6789), 1) == "12.3–67.9%"
    for lo, hi in [(0.0123, 0.456), (0.5, 0.99999), (-0.333, 0.333)]:
        a, b = outward(100 * lo, 100 * hi)
        assert a <= 100 * lo and b >= 100 * hi


def test_summary_and_report_print_the_interval_rounded_outward(real_runs, tmp_path):
    from lerobench.analysis.report import write_report
    from lerobench.cli.common import console
    from lerobench.cli.summary import print_summary

    run = tmp_path / "run"
    run.mkdir()
    results = json.loads((real_runs["expert"] / "results.json").read_text())
    results["tasks"][0].update(ci95=[0.8278, 0.9992], success_rate=0.9)
    (run / "results.json").write_text(json.dumps(results))
    (run / "episodes.jsonl").write_text((real_runs["expert"] / "episodes.jsonl").read_text())
    with console.capture() as captured:
        print_summary(results, run)
    assert "82–100%" in captured.get() and "83–100%" not in captured.get()
    html = write_report([run], tmp_path / "r.html").read_text()
    assert "82–100%" in html and "83–100%" not in html


def test_compare_piped_never_cuts_a_cell(real_runs):
    """`compare | cat`, CI logs: rich used to cut cells to 80 columns ("1.9e-…", "bett…")."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS.parent), str(TESTS)])
    done = subprocess.run([sys.executable, "-m", "lerobench", "compare", str(real_runs["random"]),
                           str(real_runs["expert"])], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    table = json.loads(subprocess.run([sys.executable, "-m", "lerobench", "compare", str(real_runs["random"]),
                                       str(real_runs["expert"]), "--json"], capture_output=True, text=True,
                                      env=env, timeout=120).stdout)
    out = done.stdout
    assert "…  " not in out and "… \n" not in out and not any(line.endswith("…") for line in out.splitlines())
    overall = next(line for line in out.splitlines() if line.strip().startswith("overall"))
    assert overall.split()[-1] == "better" and table["overall"]["significant"]
    p = table["overall"]["p_value"]
    assert (f"{p:.2g}" if p < 0.001 else f"{p:.3f}") in overall.split()
    assert "reach-v3" in out and "push-v3" in out
    verdict = [line for line in out.splitlines() if line.startswith(table["verdict"])]
    assert verdict and verdict[0].endswith(")")  # one line, whole


def _ledger_stopped_with_a_late_episode() -> dict:
    """A real ledger: reach-v3 decided at 10 all-success outcomes, and an 11th that was running meanwhile."""
    ledger = Ledger(Until("halfwidth", 0.2), ["reach-v3"], cap=30)
    for episode in range(11):
        ledger.add("reach-v3", episode, True)
    return ledger.block()


def test_until_line_names_the_recorded_count_when_it_differs_from_the_rule_count():
    block = _ledger_stopped_with_a_late_episode()
    assert block["tasks"]["reach-v3"]["episodes"] == 10 and block["tasks"]["reach-v3"]["recorded"] == 11
    line = stopping_line(block)
    assert "reach-v3 10 (target)" in line
    assert "counted in the table's n" in line and "reach-v3 11" in line


@pytest.mark.parametrize("late", [False, True])
def test_until_line_is_unchanged_when_nothing_ran_late(late):
    block = _ledger_stopped_with_a_late_episode()
    if not late:
        block["tasks"]["reach-v3"]["recorded"] = 10
    assert ("table's n" in stopping_line(block)) is late


def test_readme_says_what_the_report_holds(real_runs, tmp_path):
    """The report inlines charts, tables and thumbnails; the MP4s are links (README used to call it self-contained)."""
    import re

    from lerobench.analysis.report import write_report

    html = write_report([real_runs["expert"]], tmp_path / "r.html").read_text()
    links = re.findall(r"href='([^']+\.mp4)'", html)
    assert links and all(not Path(link).is_absolute() and (tmp_path / link).resolve().is_file() for link in links)
    assert "<video" not in html and "data:video" not in html  # not embedded: README must not say so
    readme = (TESTS.parent / "README.md").read_text()
    line = next(i for i, text in enumerate(readme.splitlines()) if text.startswith("lerobench report"))
    claim = " ".join(readme.splitlines()[line:line + 2])
    assert "self-contained" not in claim and "linked" in claim


@pytest.mark.sim
def test_a_piped_trials_run_reads_as_a_log_of_what_the_trials_did(tmp_path):
    """`eval --trials 2 > log`: every episode fails trial 0 and succeeds at trial 1 (the expert from trial 1 on).
    Progress and task lines say both rates (41dfc68: "0.0% success" only), and the end of the run is plain whole
    lines: no live bars cut at the width ("73 env-st…"), the summary's notes unwrapped."""
    pytest.importorskip("metaworld")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS.parent), str(TESTS)])
    log = tmp_path / "eval.log"
    with log.open("w") as out:
        done = subprocess.run([sys.executable, "-m", "lerobench", "eval", "--suite", "smoke", "--tasks", "reach-v3",
                               "--policy", "fixture_policies:make_late_expert", "--trials", "2", "--episodes", "2",
                               "--videos", "0", "--max-steps", "80", "--progress-interval", "60",
                               "-o", str(tmp_path / "run")], stdout=out, stderr=subprocess.STDOUT, env=env, timeout=300)
    text = log.read_text()
    assert done.returncode == 0, text
    lines = text.splitlines()
    assert any(line.endswith("task reach-v3 finished: 2 episodes x 2 trials, 0.0% success at trial 0, "
                             "100.0% within 2 trials") for line in lines), text
    assert any("progress smoke: 2/2 episodes (100%), trial 0: 0 solved (0.0%), within 2 trials: 2 (100.0%)" in line
               for line in lines), text
    assert "overall: 0.0% success at trial 0, 100.0% within 2 trials" in lines
    assert not any(line.rstrip().endswith("…") for line in lines), text  # nothing cut
    assert not any("env-st" in line and "━" in line for line in lines), text  # no live bars at the end
    note = next(line for line in lines if line.startswith("success/CI/errors: trial 0"))
    assert note.endswith("results.json also has the unbiased estimator over all trials)")  # one whole line
    assert "pass@k = success_within_k[k-1]" in note


def test_resumed_progress_counts_the_whole_run_and_fits_80_columns(monkeypatch):
    from rich.console import Console

    import lerobench.cli.evaluate as evaluate
    from lerobench.core.records import EpisodeRecord
    from lerobench.suite.registry import load_suite

    suite = load_suite("libero_90")
    monkeypatch.setenv("COLUMNS", "80")  # an 80-column terminal: rich reads it whenever it measures
    assert evaluate.console.width == 80
    reporter = evaluate.RichReporter(90 * 50, suite.name)

    def record(task, episode, success):
        return EpisodeRecord(task=task.name, episode=episode, trial=0, seed=0, init_state=0, success=success,
                             success_at_end=success, steps=1, return_=0.0, elapsed_s=0.0)

    first, second = suite.tasks[:2]
    reporter.resumed([record(first, e, e % 2 == 0) for e in range(50)] + [record(second, e, True) for e in range(3)])
    reporter.task_started(first, 50, 50)  # finished before the resume
    reporter.task_started(second, 50, 3)
    reporter.episode(second, record(second, 3, True))
    suite_bar, first_bar, second_bar = reporter.progress.tasks
    assert (suite_bar.completed, first_bar.completed, second_bar.completed) == (54, 50, 4)
    assert suite_bar.fields["info"].startswith("29 solved") and second_bar.fields["info"] == "4 solved"
    screen = Console(width=80, record=True, force_terminal=False)
    screen.print(reporter.progress.make_tasks_table(reporter.progress.tasks))
    lines = screen.export_text().splitlines()
    assert len(lines) == 3 and all(len(line) <= 80 for line in lines)  # one line per bar, nothing wrapped
    assert lines[2].lstrip().startswith("KITCHEN_SCENE") and "…" in lines[2]
    assert lines[2].split()[0].endswith("_of_it")  # elided in the middle: the goal at the end stays
