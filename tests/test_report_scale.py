"""`report` and `compare` at LIBERO scale: 10 to 90 tasks with 60-90 character names stay readable."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lerobench.cli import app

pytestmark = pytest.mark.sim  # every test here drives a real simulator

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
runner = CliRunner()

# Measures every task label of the chart as Chromium lays it out at 1280 px and writes the boxes into the page.
MEASURE = """<script>
const boxes = [...document.querySelectorAll('#task-chart g[id^="task-label-"]')].map(g => {
  const r = g.getBoundingClientRect(); const t = g.querySelector('title');
  return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, title: t ? t.textContent : null,
          text: [...g.querySelectorAll('text')].map(x => x.textContent).join(' ')};
});
const svg = document.querySelector('#task-chart svg').getBoundingClientRect();
document.body.insertAdjacentHTML('beforeend', '<pre id="meas' + 'ured">' + JSON.stringify({boxes, width: svg.width})
  .replace(/</g, '&lt;') + '</pre>');
</script>"""


def libero_run(path, n_tasks, policy="zero", flip=0):
    """A results directory of the first ``n_tasks`` of libero_90 (the real suite file; outcomes made up)."""
    from lerobench.core.records import EpisodeRecord
    from lerobench.core.results import summarize
    from lerobench.suite.registry import load_suite

    suite = load_suite("libero_90").select_tasks([f"0-{n_tasks - 1}"])
    records = [EpisodeRecord(task=t.name, episode=e, trial=0, seed=e, init_state=e,
                             success=(t.index + e + flip) % 3 == 0, success_at_end=False, steps=1, return_=0.0,
                             elapsed_s=0.1) for t in suite.tasks for e in range(3)]
    path.mkdir(parents=True)
    (path / "episodes.jsonl").write_text("".join(json.dumps(r.to_json()) + "\n" for r in records))
    config = {"suite": suite.name, "policy": policy, "protocol": "standard", "protocol_settings": {"max_steps": 1},
              "tasks": [t.name for t in suite.tasks], "episodes_per_task": 3, "seed": 0, "stop_on_success": True,
              "replan_steps": 1, "trials": 1}
    results = {"suite": suite.name, "policy": policy, "complete": True, "config": config, "provenance": {},
               **summarize(suite, records, 1)}
    (path / "results.json").write_text(json.dumps(results))
    return path


def test_short_labels_keep_both_ends_of_a_libero_name():
    from lerobench.analysis.charts import short_label

    label = short_label("12: KITCHEN_SCENE10_close_the_top_drawer_of_the_cabinet_and_put_the_black_bowl_on_top_of_it")
    first, second = label.split("\n")
    assert first.startswith("12: KITCHEN_SCENE10_") and second.endswith("black_bowl_on_top_of_it")
    assert max(len(first), len(second)) <= 40 and "…" in second
    assert short_label("3: reach-v3") == "3: reach-v3"


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
@pytest.mark.parametrize("n_tasks", [10, 50, 90])
def test_every_task_label_is_legible_in_chromium_at_1280_px(tmp_path, n_tasks):
    pytest.importorskip("matplotlib")
    run = libero_run(tmp_path / "run", n_tasks)
    out = tmp_path / "report.html"
    result = runner.invoke(app, ["report", str(run), "-o", str(out)])
    assert result.exit_code == 0, result.output
    page = tmp_path / "measure.html"
    page.write_text(out.read_text().replace("</body>", MEASURE + "</body>"))
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,2000",
                          "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=180).stdout
    found = json.loads(re.search(r'<pre id="measured">(.*?)</pre>', dom, re.S).group(1).replace("&amp;", "&"))
    boxes = found["boxes"]
    names = json.loads((run / "results.json").read_text())["config"]["tasks"]
    assert [b["title"] for b in boxes] == names  # hover: the full name
    assert [b["text"].split(":")[0] for b in boxes] == [str(i) for i in range(n_tasks)]  # index first
    for above, below in zip(boxes, boxes[1:], strict=False):
        assert above["bottom"] <= below["top"] + 0.5, (above, below)  # no two labels overlap
    assert all(b["left"] >= 0 and b["right"] <= 1280 for b in boxes)  # inside the page
    assert min(b["bottom"] - b["top"] for b in boxes) >= 10  # a line of text at least 10 px high
    assert found["width"] >= 1000  # the plot is not squeezed by its labels


def test_one_run_report_has_no_significance_caption(tmp_path):
    pytest.importorskip("matplotlib")
    run = libero_run(tmp_path / "run", 3)
    out = tmp_path / "r.html"
    assert runner.invoke(app, ["report", str(run), "-o", str(out)]).exit_code == 0
    assert "differs significantly" not in out.read_text()
    two = tmp_path / "two.html"
    other = libero_run(tmp_path / "other", 3, policy="other", flip=1)
    assert runner.invoke(app, ["report", str(run), str(other), "-o", str(two)]).exit_code == 0
    assert "differs significantly" in two.read_text()


def test_report_refuses_runs_of_different_suites(tmp_path):
    pytest.importorskip("matplotlib")
    a = libero_run(tmp_path / "a", 2)
    b = libero_run(tmp_path / "b", 2)
    results = json.loads((b / "results.json").read_text())
    results["suite"] = results["config"]["suite"] = "libero_spatial"
    (b / "results.json").write_text(json.dumps(results))
    result = runner.invoke(app, ["report", str(a), str(b), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 2 and "different suites" in result.output
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("where", ["directory", "unwritable", "not html"])
def test_report_output_that_cannot_be_written_is_one_line(tmp_path, where):
    pytest.importorskip("matplotlib")
    run = libero_run(tmp_path / "run", 2)
    if where == "directory":
        target = tmp_path / "site"
        target.mkdir()
    elif where == "unwritable":
        if os.geteuid() == 0:
            target = Path("/proc/lerobench-report.html")  # root writes anywhere but /proc
        else:
            locked = tmp_path / "locked"
            locked.mkdir(mode=0o500)
            target = locked / "r.html"
    else:
        target = run / "results.json"
    before = target.read_bytes() if target.is_file() else None
    result = runner.invoke(app, ["report", str(run), "-o", str(target)])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: cannot write the report") and len(result.output.splitlines()) == 1
    assert "Traceback" not in result.output
    if before is not None:
        assert target.read_bytes() == before  # nothing overwritten


def test_compare_rows_stay_distinct_in_80_columns_with_full_names_in_json(tmp_path):
    """In an 80-column terminal names are shortened to fit (piped output keeps them whole: test_display.py)."""
    a = libero_run(tmp_path / "a", 12)
    b = libero_run(tmp_path / "b", 12, policy="other", flip=1)
    # a terminal, as a user at a shell has (rich reads TTY_COMPATIBLE when it prints)
    result = runner.invoke(app, ["compare", str(a), str(b)], env={"COLUMNS": "80", "TTY_COMPATIBLE": "1"})
    assert result.exit_code == 0, result.output
    rows = [line.split()[0:2] for line in result.output.splitlines() if re.match(r"\s*\d+: ", line)]
    assert [r[0] for r in rows] == [f"{i}:" for i in range(12)]
    assert len({tuple(r) for r in rows}) == 12
    assert max(len(line) for line in result.output.splitlines()) <= 80
    data = json.loads(runner.invoke(app, ["compare", str(a), str(b), "--json"]).output)
    names = json.loads((a / "results.json").read_text())["config"]["tasks"]
    assert [t["task"] for t in data["tasks"]] == names and [t["index"] for t in data["tasks"]] == list(range(12))
