"""Pictures for the HTML report: matplotlib charts as inline SVG and video thumbnails as inline PNG.

matplotlib is imported lazily (extra ``report``) and used through its object API (``Figure``), never pyplot:
no global backend is selected and nothing opens a window, so it runs headless and in threads.
"""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lerobench.errors import MissingDependencyError

COLORS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C")
"""One colour per run, in the order the runs were given."""


def _figure(width: float, height: float) -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise MissingDependencyError("lerobench report needs matplotlib: pip install 'lerobench[report]'") from exc
    return Figure(figsize=(width, height), layout="constrained")


def _svg(fig: Any) -> str:
    """The figure as an inline ``<svg>`` element (text kept as text: smaller and searchable)."""
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "lerobench"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    text = buffer.getvalue()
    return re.sub(r"<metadata>.*?</metadata>", "", text[text.index("<svg"):], flags=re.S)


HORIZONTAL_ABOVE = 10
"""Above this many tasks (or with long names) the task chart turns horizontal: one labelled row per task."""

LABEL_WIDTH = 38
"""Characters per line of a task label in the horizontal chart (two lines at most, elided in the middle)."""


def short_label(label: str, width: int = LABEL_WIDTH) -> str:
    """``label`` on at most two lines of about ``width`` characters, elided in the middle when longer.

    LIBERO task names run to 90 characters and differ at both ends ("KITCHEN_SCENE3_turn_on_the_stove..."):
    the start names the scene and the end the goal, so the middle is what goes. Snake_case names break
    after underscores, like words.
    """
    lines = [""]
    for token in re.findall(r"[^_ ]+[_ ]*|[_ ]+", label):  # words with their trailing separator
        if lines[-1] and len(lines[-1]) + len(token.rstrip()) > width:
            lines.append("")
        lines[-1] += token
    half = width // 2
    lines = [line if len(line) <= width + 8 else f"{line[:half]}…{line[-half:]}" for line in map(str.rstrip, lines)]
    if len(lines) <= 2:
        return "\n".join(lines)
    rest = label[len(lines[0]):]
    tail = rest[-(width - 1):]
    cut = tail.find("_")
    if 0 <= cut < width // 3:  # start the tail at a word
        tail = tail[cut + 1:]
    return f"{lines[0]}\n…{tail}"


def _hover_titles(svg: str, titles: Sequence[str]) -> str:
    """Give each task label (``<g id="task-label-i">``) an SVG ``<title>``: the full name shows on hover."""
    import html

    for i, title in enumerate(titles):
        svg = svg.replace(f'<g id="task-label-{i}">', f'<g id="task-label-{i}"><title>{html.escape(title)}</title>', 1)
    return svg


def task_bar_chart(tasks: Sequence[str], runs: Sequence[dict[str, Any]], labels: Sequence[str],
                   significant: Sequence[set[str]], tick_labels: Sequence[str] | None = None) -> str:
    """Per-task success rates of every run side by side, with 95% CI whiskers, as inline SVG.

    ``runs[i]`` is run i's ``results.json``; ``significant[i]`` names the tasks where run i differs
    significantly from run 0 (marked with a star beside its bar). ``tick_labels`` (default: the names) label
    the tasks; hovering one shows the full name. Up to ``HORIZONTAL_ABOVE`` short-named tasks are columns;
    more (a LIBERO suite: 10 to 90 names of 60-90 characters) are rows, one per task, top to bottom in
    suite order, so labels never overlap and the plot keeps its width whatever the task count.
    """
    import numpy as np

    ticks = list(tick_labels or tasks)
    horizontal = len(tasks) > HORIZONTAL_ABOVE or max(len(t) for t in ticks) > 24
    width = 0.8 / len(runs)
    if horizontal:
        fig = _figure(11.0, 1.2 + len(tasks) * (0.22 + 0.1 * len(runs)))
    else:
        fig = _figure(max(6.0, 0.45 * len(tasks) * len(runs) + 1.5), 3.8)
    ax = fig.add_subplot()
    x = np.arange(len(tasks))
    for i, (results, label) in enumerate(zip(runs, labels, strict=True)):
        by_task = {t["task"]: t for t in results.get("tasks", [])}
        rates, low, high, stars = [], [], [], []
        for name in tasks:
            entry = by_task.get(name)
            rate = entry["success_rate"] if entry and entry["success_rate"] is not None else np.nan
            lo, hi = entry["ci95"] if entry else (np.nan, np.nan)
            rates.append(100 * rate)
            low.append(100 * (rate - lo))
            high.append(100 * (hi - rate))
            stars.append(100 * hi if name in significant[i] else None)
        xs = x - 0.4 + width * (i + 0.5)
        style = {"color": COLORS[i % len(COLORS)], "label": label, "capsize": 3,
                 "error_kw": {"elinewidth": 1, "ecolor": "#333333"}}
        if horizontal:
            ax.barh(xs, rates, width * 0.92, xerr=[low, high], **style)
        else:
            ax.bar(xs, rates, width * 0.92, yerr=[low, high], **style)
        for xi, top in zip(xs, stars, strict=True):
            if top is not None:
                if horizontal:
                    ax.text(top + 1.5, xi, "*", ha="left", va="center", fontsize=12, fontweight="bold")
                else:
                    ax.text(xi, top + 2, "*", ha="center", va="bottom", fontsize=14, fontweight="bold")
    if horizontal:
        ax.set_yticks(x, [short_label(t) for t in ticks], fontsize=9)
        ax.set_ylim(len(tasks) - 0.5, -0.5)  # suite order from the top, as in the tables
        ax.set_xlim(0, 108)
        ax.set_xlabel("success rate (%)")
        ax.grid(axis="x", alpha=0.3)
        ax.xaxis.set_ticks_position("both")
        ax.tick_params(axis="x", labeltop=True)  # a 90-row chart is tall: read the scale at either end
        ax.legend(fontsize=9, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncols=min(4, len(runs)), frameon=False,
                  borderaxespad=1.6)
        tick_texts = ax.get_yticklabels()
    else:
        ax.set_xticks(x, ticks, rotation=30 if len(tasks) > 4 else 0, ha="right" if len(tasks) > 4 else "center")
        ax.set_ylim(0, 112)
        ax.set_ylabel("success rate (%)")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        tick_texts = ax.get_xticklabels()
    for i, text in enumerate(tick_texts):
        text.set_gid(f"task-label-{i}")
    return _hover_titles(_svg(fig), tasks)


def trial_curves(runs: Sequence[dict[str, Any]], labels: Sequence[str]) -> str:
    """Overall success per trial index and success within k trials, for runs with ``trials`` > 1."""
    fig = _figure(6.5, 3.4)
    ax = fig.add_subplot()
    for i, (results, label) in enumerate(zip(runs, labels, strict=True)):
        overall = results.get("overall", {})
        color = COLORS[i % len(COLORS)]
        for key, style, name in (("per_trial", "-o", "trial k"), ("success_within_k", "--s", "within k trials")):
            rows = overall.get(key) or []
            if not rows:
                continue
            ks = [row["trial"] for row in rows]
            rates = [100 * (row["success_rate"] or 0.0) for row in rows]
            ax.plot(ks, rates, style, color=color, label=f"{label}: {name}")
            ax.fill_between(ks, [100 * row["ci95"][0] for row in rows], [100 * row["ci95"][1] for row in rows],
                            color=color, alpha=0.12)
    ax.set_xlabel("trial index k")
    ax.set_ylabel("success rate (%)")
    ax.set_ylim(0, 105)
    ax.set_title("Success per trial and within k trials (bands: 95% CI)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.xaxis.get_major_locator().set_params(integer=True)
    return _svg(fig)


def delay_curve(points: Sequence[dict[str, Any]], label: str) -> str:
    """Success against inference delay (``robustness.json`` ``delay_curve``): rates with their exact 95% intervals.

    Every point runs the same episodes as d = 0; the paired drop and its interval are in the table beside it.
    """
    fig = _figure(5.5, 3.2)
    ax = fig.add_subplot()
    ds = [p["delay_steps"] for p in points]
    rates = [100 * (p["rate"] or 0.0) for p in points]
    low = [r - 100 * p["ci95"][0] for r, p in zip(rates, points, strict=True)]
    high = [100 * p["ci95"][1] - r for r, p in zip(rates, points, strict=True)]
    ax.errorbar(ds, rates, yerr=[low, high], fmt="-o", color=COLORS[0], capsize=3, label=label)
    ax.set_xlabel("inference delay d (control steps)")
    ax.set_ylabel("success rate (%)")
    ax.set_ylim(0, 105)
    ax.set_xticks(ds)
    ax.set_title("Success vs inference delay (bars: exact 95% CI; same episodes at every d)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    return _svg(fig)


def video_thumbnail(path: Path, width: int = 160) -> str | None:
    """First frame of an MP4 as a ``data:image/png`` URI (decoded with PyAV), or None if it is unreadable."""
    import av

    try:
        with av.open(str(path)) as container:
            frame = next(container.decode(video=0))
            height = max(1, round(width * frame.height / frame.width))
            pixels = frame.reformat(width=width, height=height, format="rgb24").to_ndarray()
    except (OSError, StopIteration, av.error.FFmpegError):
        return None
    from matplotlib.image import imsave

    buffer = io.BytesIO()
    imsave(buffer, pixels, format="png")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def drop_heatmap(tasks: Sequence[str], families: Sequence[str], drops: Sequence[Sequence[float | None]]) -> str:
    """Task x family heatmap of success drops (control - perturbed, points) as inline SVG; blank: not run.

    A diverging map centred on 0 (red: the perturbation hurts, blue: it helps), the number printed in each cell.
    """
    import numpy as np
    from matplotlib.colors import TwoSlopeNorm

    grid = np.array([[np.nan if d is None else 100 * d for d in row] for row in drops], dtype=float)
    fig = _figure(max(4.5, 0.9 * len(families) + 3.5), max(2.5, 0.32 * len(tasks) + 1.5))
    ax = fig.add_subplot()
    image = ax.imshow(np.ma.masked_invalid(grid), cmap="RdBu_r", norm=TwoSlopeNorm(0.0, -100.0, 100.0),
                      aspect="auto")
    for (i, j), value in np.ndenumerate(grid):
        if np.isfinite(value):
            ax.text(j, i, f"{round(value):+d}", ha="center", va="center", fontsize=8,
                    color="white" if abs(value) > 60 else "black")
    ax.set_xticks(range(len(families)), families, rotation=30 if len(families) > 3 else 0,
                  ha="right" if len(families) > 3 else "center")
    ax.set_yticks(range(len(tasks)), [t if len(t) <= 48 else t[:46] + "…" for t in tasks], fontsize=8)
    fig.colorbar(image, ax=ax, label="success drop (points)")
    return _svg(fig)
