"""`lerobench report`: one self-contained HTML file, rendered in a real headless Chromium."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lerobench.cli import app

pytest.importorskip("matplotlib")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")


def chromium(*args, cwd):
    result = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
                            capture_output=True, text=True, timeout=180, cwd=cwd)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def write(tmp_path, *runs):
    out = tmp_path / "site" / "report.html"
    result = CliRunner().invoke(app, ["report", *map(str, runs), "--output", str(out)])
    assert result.exit_code == 0, result.output
    return out


@needs_chromium
def test_report_renders_with_charts_tables_and_thumbnails(tmp_path, real_runs):
    out = write(tmp_path, real_runs["expert"], real_runs["random"])
    text = out.read_text()
    assert not re.search(r"(src|href)=['\"]?(https?:|//)|<link|<script|@import|url\((?!#)", text)  # nothing fetched
    dom = chromium("--dump-dom", out.as_uri(), cwd=tmp_path)
    chart = dom[dom.index("id=\"task-chart\""):]
    assert "<svg" in chart[:500] and "reach-v3" in chart and "push-v3" in chart
    assert dom.count("class=\"tasks\"") == 2 and dom.count("class=\"comparison\"") == 1
    assert "B worse than A" in dom and "paired on 12 episodes" in dom
    thumbs = re.findall(r"<a href=\"([^\"]+\.mp4)\"><img src=\"data:image/png;base64,", dom)
    assert len(thumbs) == 4  # --videos 1: one per task and run
    assert [Path(h).parts[-2] for h in thumbs] == ["reach-v3", "push-v3"] * 2  # suite order, as the tables
    for href in thumbs:
        assert not Path(href).is_absolute() and (out.parent / href).is_file()  # relative links that work
    shot = tmp_path / "shot.png"
    chromium(f"--screenshot={shot}", "--window-size=1100,1400", out.as_uri(), cwd=tmp_path)
    from matplotlib.image import imread

    pixels = imread(shot)[..., :3]
    assert pixels.shape[:2] == (1400, 1100)
    ink = (pixels < 0.9).any(axis=2).mean()
    blue = ((pixels[..., 2] > 0.55) & (pixels[..., 0] < 0.4)).mean()  # the first run's bars (#4C72B0)
    assert 0.02 < ink < 0.9 and blue > 0.005 and pixels.std() > 0.05


def test_report_headline_errors_and_provenance(tmp_path, real_runs):
    out = write(tmp_path, real_runs["expert"])
    text = out.read_text()
    assert "metaworld-expert" in text and "MUJOCO_GL=egl" in text and "mujoco 3.3.0" in text
    assert "No episode ended with an error" in text and "class=\"comparison\"" not in text


@pytest.mark.slow
def test_report_draws_per_trial_curves_and_lists_errors(tmp_path):
    from helpers import write_trial_run

    run = write_trial_run(tmp_path / "k3", {"t1": [[False, True, True]] * 4, "t2": [[True, False, True]] * 4},
                          "trial-policy", errors={("t2", 3): 1})
    out = write(tmp_path, run)
    text = out.read_text()
    curves = text[text.index("id='trial-chart'"):]
    assert "<svg" in curves[:300] and "within k trials" in curves and "trial index k" in curves
    assert "simulator step failed" in text and "No videos were recorded" in text


def test_report_of_a_missing_run_is_one_line(tmp_path):
    result = CliRunner().invoke(app, ["report", str(tmp_path / "none"), "--output", str(tmp_path / "r.html")])
    assert result.exit_code == 2 and "results.json does not exist" in result.output
    assert not (tmp_path / "r.html").exists()
