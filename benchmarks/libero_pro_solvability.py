"""Is each LIBERO-PRO perturbation still solvable? The privileged expert on every perturbed suite and its control.

A perturbed suite on which ``libero-expert`` fails while it solves the matched control arm (same scenes, starts
restored) is possibly broken: an object placed where no hand can take it, a target region that moved off the
table, a swap that leaves two objects overlapping. Such suites are named in docs/robustness.md with a picture of
their first frame. A few episodes per task are enough to tell 0% from ~100%.

    python benchmarks/libero_pro_solvability.py --episodes 3 --out runs/pro_solvability
    python benchmarks/libero_pro_solvability.py --suites libero_spatial_swap,libero_goal_task --episodes 2

Prints a table (suite, perturbed rate, control rate, verdict) and writes ``solvability.json`` and, for each
flagged suite, ``<suite>_first_frame.png`` (the first frame of its first recorded episode) under ``--out``.
Not part of CI: 51 suites x 10 tasks take hours on 2 cores.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SUITES = Path(__file__).resolve().parent.parent / "suites" / "libero_pro"


def run(suite: Path, episodes: int, out: Path, max_steps: int | None) -> dict:
    """The expert on ``suite``: overall rate and per-task rates (one recorded episode per task)."""
    import lerobench

    result = lerobench.evaluate("libero-expert", suite, episodes=episodes, videos=1, video_size=128,
                                max_steps=max_steps, output=out / suite.stem)
    data = json.loads((result.run_dir / "results.json").read_text())
    return {"rate": data["overall"]["success_rate"], "n": data["overall"]["n_episodes"],
            "errors": data["overall"]["n_errors"], "dir": str(result.run_dir),
            "tasks": {t["task"]: t["success_rate"] for t in data["tasks"]}}


def first_frame(run_dir: str, target: Path) -> None:
    """Save the first frame of the run's first video as ``target`` (PNG)."""
    import av
    from PIL import Image

    videos = sorted(Path(run_dir, "videos").rglob("*.mp4"))
    if not videos:
        return
    with av.open(str(videos[0])) as container:
        frame = next(container.decode(video=0)).to_ndarray(format="rgb24")
    Image.fromarray(frame).save(target)


def verdict(perturbed: float | None, control: float | None) -> str:
    """``possibly broken`` where the expert solves the control (>= 50%) and not the perturbed suite (<= 20%)."""
    if perturbed is None:
        return "no episodes"
    if control is None:
        return "solvable" if perturbed > 0.5 else "unsolved (no control arm)"
    if control >= 0.5 and perturbed <= 0.2:
        return "possibly broken"
    return "solvable" if perturbed >= 0.5 else "harder"


def main() -> None:
    """Run every perturbed suite (or ``--suites``) and its control; print and save the verdicts.

    Suites already in ``--out``'s ``solvability.json`` are kept, not run again: a sweep cut short goes on.
    """
    from lerobench.errors import ConfigError

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=3, help="episodes per task (default 3)")
    parser.add_argument("--suites", default=None, help="comma-separated perturbed suites (default: all)")
    parser.add_argument("--max-steps", type=int, default=None, help="override the step limit")
    parser.add_argument("--out", type=Path, default=Path("runs/pro_solvability"))
    args = parser.parse_args()
    names = args.suites.split(",") if args.suites else sorted(
        p.stem for p in SUITES.glob("*.toml") if not p.stem.endswith("_control"))
    args.out.mkdir(parents=True, exist_ok=True)
    saved = args.out / "solvability.json"
    rows = json.loads(saved.read_text()) if saved.exists() else {}  # a sweep cut short goes on where it stopped
    for name in names:
        if name in rows:
            continue
        try:
            perturbed = run(SUITES / f"{name}.toml", args.episodes, args.out, args.max_steps)
        except ConfigError as exc:  # the expert refuses a goal it has no skill for, before the run: say which
            rows[name] = {"perturbed": None, "control": None, "verdict": f"refused by the expert: {exc}"}
            print(f"{name:40s} refused by the expert: {exc}", flush=True)
            saved.write_text(json.dumps(rows, indent=1))
            continue
        control_file = SUITES / f"{name}_control.toml"
        control = run(control_file, args.episodes, args.out, args.max_steps) if control_file.exists() else None
        rows[name] = {"perturbed": perturbed, "control": control,
                      "verdict": verdict(perturbed["rate"], control["rate"] if control else None)}
        if rows[name]["verdict"] == "possibly broken":
            first_frame(perturbed["dir"], args.out / f"{name}_first_frame.png")
        control_text = "-" if control is None else f"{100 * control['rate']:.0f}%"
        print(f"{name:40s} perturbed {100 * (perturbed['rate'] or 0):5.1f}%  control {control_text:>6s}  "
              f"{rows[name]['verdict']}", flush=True)
        saved.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
