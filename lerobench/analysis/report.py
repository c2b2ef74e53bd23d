"""One HTML report for one or more runs: readable offline, attachable to a PR (the videos stay linked).

Everything is inline (CSS, SVG charts, PNG thumbnails); the only links are the thumbnails' links to the MP4
files, written relative to the report's folder so the report keeps working next to the run directories.
The first run is the baseline: significance marks come from ``lerobench.analysis.compare`` against it.
"""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lerobench.analysis import charts
from lerobench.analysis.compare import Run, compare_runs, differences, load_run, suite_indices
from lerobench.core.files import write_text_atomic
from lerobench.core.progress import PROGRESS_NOTE
from lerobench.errors import CompareError, ConfigError, MissingDependencyError
from lerobench.output.rerun import rrd_path
from lerobench.plan.planner import protocol_label
from lerobench.plan.stopping import FIXED_N_NOTE, stopping_line
from lerobench.stats.intervals import percent_interval, points_interval, unit_interval

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:1200px;
color:#222;padding:0 16px}
h1{font-size:22px;margin-bottom:4px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin-bottom:6px}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:right}th{background:#f4f4f4}
td:first-child,th:first-child{text-align:left}
.tasks td:nth-child(2),.tasks th:nth-child(2){text-align:left}
.cards{display:flex;flex-wrap:wrap;gap:12px}
.card{border:1px solid #ddd;border-radius:6px;padding:10px 14px;min-width:260px;flex:1}
.big{font-size:26px;font-weight:600}.dim{color:#666;font-size:12px}.bad{color:#b00020}.good{color:#1b7a1b}
.thumbs{display:flex;flex-wrap:wrap;gap:8px}.thumbs figure{margin:0;font-size:11px;text-align:center}
.thumbs img{display:block;border:1px solid #ccc}
code{font-size:12px;word-break:break-all}
.chart svg{max-width:100%;height:auto}
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def _ci(ci: Sequence[float]) -> str:
    return percent_interval(ci)


def _steps(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}"


def _label(run: Run, index: int) -> str:
    return f"#{index + 1} {run.results.get('policy')}"


def _privileged(run: Run) -> str:
    """A line on the card of a run whose policy read the simulator's state."""
    if not run.config.get("privileged_state"):
        return ""
    return ("<div class='bad'><b>privileged expert</b>: reads the simulator's state (object poses, "
            "joints), not a learned policy</div>")


def _headline(run: Run, index: int) -> str:
    r, o = run.results, run.results.get("overall", {})
    prov = r.get("provenance", {})
    versions = ", ".join(f"{k} {v}" for k, v in (prov.get("versions") or {}).items() if v)
    stopping = r.get("stopping")
    state = "complete" if r.get("complete") else "<span class='bad'>incomplete (complete: false)</span>"
    if stopping and r.get("complete"):  # a run its rule stopped is complete, but not at its episode count
        cap = stopping.get("cap")
        state = (f"stopped early by --until {_e(stopping.get('rule'))}"
                 + (f" (cap {_e(cap)} episodes per task)" if cap is not None else ""))
    wall = o.get("eval_s")
    protocol = protocol_label(run.config.get("protocol") or "", run.config.get("protocol_changes"))
    stop = (f"<div><b>{_e(stopping_line(stopping))}</b></div><div class='dim'>95% CI: {_e(FIXED_N_NOTE)}</div>"
            if stopping else "")
    return f"""<div class="card"><h3>{_e(_label(run, index))} on {_e(r.get('suite'))}</h3>
<div class="big">{_pct(o.get('success_rate'))}</div>{stop}{_privileged(run)}
<div>95% CI {_ci(o.get('ci95', [0, 1]))} · {o.get('n_episodes', 0)} episodes · {o.get('n_errors', 0)} errors ·
{'–' if wall is None else f'{wall:.1f} s'} · {state}</div>
<div class="dim">protocol {_e(protocol)}, max steps
{_e((run.config.get('protocol_settings') or {}).get('max_steps'))}, seed {_e(run.config.get('seed'))},
trials {run.trials}<br>lerobench {_e(prov.get('lerobench'))}, python {_e(prov.get('python'))}, {_e(versions)},
MUJOCO_GL={_e(prov.get('MUJOCO_GL'))}<br>{_e(prov.get('platform'))}<br>
started {_e(prov.get('started'))}<br>run: <code>{_e(run.path)}</code><br>
command: <code>{_e(' '.join(prov.get('command') or []))}</code></div></div>"""


def _progress_cells(block: dict[str, Any], shown: bool) -> str:
    """Mean task progress and its 95% interval (only for a run whose backend defines progress)."""
    if not shown:
        return ""
    progress = block.get("progress")
    if not progress or progress.get("mean") is None:
        return "<td>–</td><td>–</td>"
    return f"<td>{progress['mean']:.2f}</td><td>{unit_interval(progress['ci95'])}</td>"


def _task_table(run: Run) -> str:
    position = {name: i for i, name in enumerate(run.config.get("tasks") or [])}
    o = run.results.get("overall", {})
    shown = bool(o.get("progress"))
    rows = "".join(
        f"<tr><td>{_e(t.get('index', position.get(t['task'], '')))}</td><td>{_e(t['task'])}</td>"
        f"<td>{_e(t.get('group') or '')}</td><td>{t['n_episodes']}</td>"
        f"<td>{_pct(t['success_rate'])}</td><td>{_ci(t['ci95'])}</td>{_progress_cells(t, shown)}"
        f"<td>{t['n_errors']}</td><td>{_steps(t.get('mean_steps'))}</td></tr>"
        for t in run.results.get("tasks", []))
    groups = "".join(
        f"<tr><td></td><td><i>group {_e(g)}</i></td><td></td><td>{b['n_episodes']}</td>"
        f"<td>{_pct(b['success_rate'])}</td>"
        f"<td>{_ci(b['ci95'])}</td>{_progress_cells(b, shown)}<td>{b['n_errors']}</td><td></td></tr>"
        for g, b in run.results.get("groups", {}).items())
    overall = (f"<tr><td></td><td><b>overall</b></td><td></td><td>{o.get('n_episodes', 0)}</td>"
               f"<td><b>{_pct(o.get('success_rate'))}</b></td><td>{_ci(o.get('ci95', [0, 1]))}</td>"
               f"{_progress_cells(o, shown)}<td>{o.get('n_errors', 0)}</td><td></td></tr>")
    head = "<th>progress</th><th>progress 95% CI</th>" if shown else ""
    note = (f"<div class='dim'>{_e(PROGRESS_NOTE)}</div>" if shown else "")
    return ("<table class='tasks'><tr><th>#</th><th>task</th><th>group</th><th>episodes</th><th>success</th>"
            f"<th>95% CI</th>{head}"
            f"<th>errors</th><th>mean steps</th></tr>{rows}{groups}{overall}</table>{note}")


def _floor_mark(block: dict[str, Any]) -> str:
    """``≤`` before a p-value at its test's floor (``p_value_floor``): the data say more than the number."""
    floor = block.get("p_value_floor")
    return "≤" if floor is not None and block["p_value"] <= floor * (1 + 1e-6) else ""


def _comparison_table(c: dict[str, Any]) -> str:
    def row(label: str, b: dict[str, Any], holm: str) -> str:
        mark = ""
        if b["significant"]:
            mark = "<span class='good'>better</span>" if b["difference"] > 0 else "<span class='bad'>worse</span>"
        return (f"<tr><td>{label}</td><td>{b['n_a']}</td><td>{_pct(b['rate_a'])}</td><td>{_pct(b['rate_b'])}</td>"
                f"<td>{100 * b['difference']:+.1f}</td><td>{points_interval(b['ci95'], ' to ')}"
                f"</td><td>{_floor_mark(b)}{b['p_value']:.3g}</td><td>{holm}</td><td>{mark}</td></tr>")

    body = "".join(row(_e(t["task"]), t, f"{t['p_holm']:.3g}") for t in c["tasks"])
    body += "".join(row(f"<i>group {_e(g)}</i>", b, "") for g, b in c["groups"].items())
    body += row("<b>overall</b>", c["overall"], "")
    kind = f"paired on {c['matched_episodes']} episodes" if c["paired"] else "UNPAIRED (no episode matches)"
    sequential = c.get("sequential")
    rule = ""
    if sequential:  # the rule that stopped a run is the analysis; the fixed-n table is descriptive
        rule = f"<p class='rule'><b>{_e(sequential['line'])}</b></p>"
        kind += "; <span class='bad'>DESCRIPTIVE</span>: fixed-n figures after a sequential stop"
    notes = "".join(f"<li>{_e(n)}</li>" for n in c["notes"])
    differs = "".join(f"<li>{_e(n)}</li>" for n in c["differences"])
    compared = "; ".join(c.get("treatment", [])) or "nothing recorded differs (same policy and settings)"
    return ((f"<p class='bad'>These runs ran different episodes (--allow-different):</p><ul class='bad'>{differs}"
             "</ul>" if differs else "")
            + f"<p class='dim'>Compared: {_e(compared)}</p>{rule}"
            f"<p><b>{_e(c['verdict'])}</b>, by {_e(c['verdict_by'])} — {kind}; "
            f"tasks: {_e(c['tasks'][0]['test'])} (Holm-adjusted), "
            f"overall: {_e(c['overall']['test'])}, CI: {_e(c['overall'].get('ci95_method', ''))}.</p>"
            "<table class='comparison'><tr><th>task</th><th>n</th><th>A</th><th>B</th><th>B − A (points)</th>"
            f"<th>95% CI</th><th>p</th><th>Holm p</th><th></th></tr>{body}</table>"
            + (f"<ul class='dim'>{notes}</ul>" if notes else ""))


def paired_bars(c: dict[str, Any]) -> list[dict[str, Any]]:
    """A's and B's per-task rates on the episodes they share (the chart's input), each with its exact interval."""
    from lerobench.stats.binomial import exact_interval

    def side(key: str) -> dict[str, Any]:
        return {"tasks": [{"task": t["task"], "n_episodes": t[f"n_{key}"], "success_rate": t[f"rate_{key}"],
                           "ci95": exact_interval(t[f"successes_{key}"], t[f"n_{key}"])} for t in c["tasks"]]}

    return [side("a"), side("b")]


def paired_note(c: dict[str, Any]) -> str:
    """What the paired bars leave out: each side's episodes without a partner."""
    left = c.get("unmatched_episodes") or {}
    extra = (f" (left out, without a partner: {left.get('a', 0)} of A's, {left.get('b', 0)} of B's)"
             if left.get("a") or left.get("b") else "")
    return f"the {c['matched_episodes']} paired episodes only{extra}"


def _suite_order(run: Run) -> Any:
    """Sort key: tasks in the run's suite order (as in its tables), then episode and trial."""
    position = {name: i for i, name in enumerate(run.config.get("tasks") or [])}
    return lambda r: (position.get(r.task, len(position)), r.task, r.episode, r.trial)


def _errors(run: Run) -> str:
    failed = [r for r in run.records if r.error]
    if not failed:
        return "<p class='dim'>No episode ended with an error.</p>"
    rows = "".join(f"<tr><td>{_e(r.task)}</td><td>{r.episode}</td><td>{r.trial}</td><td>{_e(r.error)}</td></tr>"
                   for r in sorted(failed, key=_suite_order(run)))
    return ("<table class='errors'><tr><th>task</th><th>episode</th><th>trial</th><th>error</th></tr>"
            f"{rows}</table>")


def _videos(run: Run, folder: Path) -> str:
    items = []
    for r in sorted(run.records, key=_suite_order(run)):
        if not r.video:
            continue
        mp4 = run.path / r.video
        src = charts.video_thumbnail(mp4)
        href = Path(os.path.relpath(mp4.resolve(), folder.resolve())).as_posix()
        image = f"<img src='{src}' alt='first frame of {_e(r.video)}'>" if src else "<div class='dim'>unreadable</div>"
        trial = f", trial {r.trial}" if run.trials > 1 else ""
        items.append(f"<figure><a href='{_e(href)}'>{image}</a><figcaption><b>{_e(r.task)}</b><br>episode "
                     f"{r.episode}{trial}, {'success' if r.success else 'failure'}"
                     f"{_rrd_link(run, r, folder)}</figcaption></figure>")
    if not items:
        return "<p class='dim'>No videos were recorded (--videos 0).</p>"
    return f"<div class='thumbs'>{''.join(items)}</div>"


def _rrd_link(run: Run, record: Any, folder: Path) -> str:
    """A link to the episode's Rerun recording (``--rerun``; opened with ``rerun <file>``), where there is one."""
    rrd = run.path / rrd_path(record.task, record.episode, record.trial if run.trials > 1 else None)
    if not rrd.is_file():
        return ""
    href = Path(os.path.relpath(rrd.resolve(), folder.resolve())).as_posix()
    return f"<br><a href='{_e(href)}' title='open with: rerun {_e(rrd.name)}'>.rrd</a>"


def check_one_suite(runs: Sequence[Run]) -> None:
    """Refuse runs of different suites: their tasks would be mixed on one chart as if comparable."""
    suites = {str(run.results.get("suite")) for run in runs}
    if len(suites) > 1:
        named = ", ".join(f"{run.path} ({run.results.get('suite')})" for run in runs)
        raise ConfigError(f"the runs are of different suites: {named}; a report covers one suite (write one "
                          f"report per suite)")


def task_labels(runs: Sequence[Run], tasks: Sequence[str]) -> list[str]:
    """Short, unique labels: the task's index in its suite, then its name (LIBERO names run to 90 characters)."""
    index = suite_indices(*runs)
    return [f"{index[t]}: {t}" if t in index else t for t in tasks]


def render_report(runs: Sequence[Run], folder: Path, alpha: float = 0.05) -> str:
    """The report's HTML; ``folder`` is where it will be saved (video links are relative to it)."""
    labels = [_label(run, i) for i, run in enumerate(runs)]
    comparisons: list[dict[str, Any]] = []
    sections: list[str] = []
    significant: list[set[str]] = [set() for _ in runs]
    for i, run in enumerate(runs[1:], start=1):
        try:
            c = compare_runs(runs[0], run, alpha=alpha, allow_different=True)
        except CompareError as exc:
            sections.append(f"<p class='dim'>{_e(labels[i])} vs {_e(labels[0])}: not comparable ({_e(exc)})</p>")
            continue
        significant[i] = {t["task"] for t in c["tasks"] if t["significant"]}
        comparisons.append(c)
        sections.append(f"<h3>A = {_e(labels[0])}, B = {_e(labels[i])}</h3>{_comparison_table(c)}")
    tasks: list[str] = []
    for run in runs:
        tasks += [t["task"] for t in run.results.get("tasks", []) if t["task"] not in tasks]
    parts = [f"<h1>lerobench report: {_e(', '.join(sorted({str(r.results.get('suite')) for r in runs})))}</h1>",
             "<div class='cards'>" + "".join(_headline(run, i) for i, run in enumerate(runs)) + "</div>"]
    if tasks:
        bars, on = [r.results for r in runs], "each run's own episodes"
        paired = [c for c in comparisons if isinstance(c, dict) and c["paired"]]
        if len(runs) == 2 and paired:  # A against B: both bars on the same (paired) episodes
            bars, on = paired_bars(paired[0]), paired_note(paired[0])
        chart = charts.task_bar_chart(tasks, bars, labels, significant, task_labels(runs, tasks))
        star = ("*: differs significantly from the first run (exact test, Holm-adjusted across tasks, "
                f"alpha {alpha}). " if len(runs) > 1 else "")
        parts.append(f"<h2>Success per task</h2><p class='dim'>Bars: success rate with its 95% interval, on {on}. "
                     f"{star}Tasks by their index in the suite (the tables list them the same way; hover a "
                     f"label for the full name).</p><div class='chart' id='task-chart'>{chart}</div>")
    multi = [(run.results, label) for run, label in zip(runs, labels, strict=True) if run.trials > 1]
    if multi:
        curves = charts.trial_curves([m[0] for m in multi], [m[1] for m in multi])
        parts.append(f"<h2>Success per trial</h2><div class='chart' id='trial-chart'>{curves}</div>")
    if sections:
        parts.append("<h2>Comparisons with the first run</h2>" + "".join(sections))
    for i, run in enumerate(runs):
        parts.append(f"<h2>{_e(labels[i])}</h2><h3>Per task</h3>{_task_table(run)}"
                     f"<h3>Episodes that ended with an error</h3>{_errors(run)}"
                     f"<h3>Videos (first frame; click for the MP4)</h3>{_videos(run, folder)}")
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>lerobench report</title>"
            f"<style>{CSS}</style></head><body>{''.join(parts)}</body></html>\n")


def check_report_path(output: Path) -> None:
    """Refuse, before any work, an ``-o`` that is a directory, not HTML, or in a folder that cannot be written."""
    if output.is_dir():
        raise ConfigError(f"cannot write the report to {output}: it is a directory (give a file, e.g. "
                          f"{output / 'report.html'})")
    if output.exists() and output.suffix.lower() not in (".html", ".htm"):
        raise ConfigError(f"cannot write the report to {output}: the file exists and is not an HTML file "
                          f"(not overwritten; choose a .html path)")
    folder = next((p for p in (output.parent, *output.parent.parents) if p.exists()), Path("."))
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot write the report to {output}: {folder} is not a writable directory")


def robustness_section(data: dict[str, Any]) -> str:
    """A ``lerobench robustness`` directory: the task x family heatmap of drops and the per-family table."""
    families = [f["family"] for f in data["families"]]
    tasks: list[str] = []
    for f in data["families"]:
        tasks += [t["task"] for t in f["tasks"] if t["task"] not in tasks]
    drops = [[next((t["drop"] for t in f["tasks"] if t["task"] == task), None) for f in data["families"]]
             for task in tasks]
    def number(value: float | None, form: str) -> str:
        return "" if value is None else format(value, form)

    def row(f: dict[str, Any]) -> str:
        ci = f["drop_ci95"]
        cells = [_e(f["family"]), str(f["perturbed"]["n"]), _pct(f["control"]["rate"]), _pct(f["perturbed"]["rate"]),
                 number(None if f["drop"] is None else 100 * f["drop"], "+.1f"),
                 "" if ci is None else points_interval(ci, " to "),
                 number(f["p_value"], ".3g"), number(f.get("p_holm"), ".3g"),
                 "paired" if f["paired"] else _e(f"unpaired: {f['unpaired_reason']}")]
        return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"

    rows = "".join(row(f) for f in data["families"])
    heatmap = charts.drop_heatmap(tasks, families, drops) if tasks else ""
    if data.get("delay_curve"):  # delay_steps=K families: the success-vs-delay curve (docs/latency.md)
        curve = charts.delay_curve(data["delay_curve"], data["policy"])
        heatmap += f"<div class='chart' id='delay-curve'>{curve}</div>"
    return (f"<h2>Robustness of {_e(data['policy'])} on {_e(data['base'])}</h2>"
            "<p class='dim'>Drop = control − perturbed success (points), control = the original task from the same "
            "starts with the same seeds; p: exact McNemar on the pairs, Holm across families.</p>"
            f"<div class='chart' id='drop-heatmap'>{heatmap}</div>"
            "<table><tr><th>family</th><th>n</th><th>control</th><th>perturbed</th><th>drop</th>"
            f"<th>95% CI</th><th>p</th><th>Holm p</th><th>pairing</th></tr>{rows}</table>")


def write_report(run_dirs: Sequence[Path], output: Path, alpha: float = 0.05, allow_different: bool = False) -> Path:
    """Read the runs (and ``lerobench robustness`` directories), render the report, write it atomically.

    Runs whose episodes differ from the first run's (``lerobench.core.identity``) are refused, naming the field
    and both values, unless ``allow_different``; then the report lists the differences above each table.
    """
    if not run_dirs:
        raise ConfigError("report needs at least one run directory")
    import importlib.util
    import json

    if importlib.util.find_spec("matplotlib") is None:
        raise MissingDependencyError("lerobench report needs matplotlib: pip install 'lerobench[report]'")
    check_report_path(output)
    robust = [Path(p) for p in run_dirs if (Path(p) / "robustness.json").is_file()]
    runs = [load_run(Path(p)) for p in run_dirs if Path(p) not in robust]
    if runs:
        check_one_suite(runs)
    for run in runs[1:]:
        found = differences(runs[0], run)
        if found and not allow_different:
            raise CompareError(f"{runs[0].path} and {run.path} ran different episodes ({'; '.join(found)}); "
                               f"pass --allow-different to report them together anyway")
    sections = "".join(robustness_section(json.loads((p / "robustness.json").read_text(encoding="utf-8")))
                       for p in robust)
    if runs:
        text = render_report(runs, output.parent, alpha=alpha).replace("</body>", f"{sections}</body>", 1)
    else:
        text = ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>lerobench report</title>"
                f"<style>{CSS}</style></head><body><h1>lerobench robustness report</h1>{sections}</body></html>\n")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(output, text)
    except OSError as exc:  # a race with the checks above, a full disk, a read-only mount
        raise ConfigError(f"cannot write the report to {output}: {exc.strerror or exc}") from exc
    return output
