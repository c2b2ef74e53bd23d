"""Robustness evaluation: a policy's success drop under each perturbation family, against a matched control arm.

A *family* is either a LIBERO-PRO suite family (``lan``, ``object``, ``swap``, ``task``, ``with_mug``, ...: the
suite ``<base>_<family>``) or a generic perturbation (``action_noise=0.1``, any ``--perturb`` setting). Each
family has two arms, both ordinary runs (resumable, shardable, mergeable) in ``<output>/<family>/``:

- *perturbed*: the perturbed suite, or the base suite with ``--perturb``;
- *control*: the base task from the *same starts with the same seeds*. For a generic perturbation that is the
  base suite unperturbed (``--perturb`` never moves a start; one control run serves every generic family). For a
  LIBERO-PRO family it is the shipped suite ``<base>_<family>_control``: the original task run from the perturbed
  suite's init states, projected onto the original's state layout (``lerobench.envs.libero``).

Episodes pair by (task position, episode index); ``start_digest`` says whether the two starts were bit-identical.
A family without a control suite (``swap`` where the swap cannot be undone for every task) is compared
against the base suite's own starts, *unpaired*, and says why.

The drop is ``control - perturbed`` success, with the paired 95% CI and exact McNemar p of
``lerobench.stats.binomial`` (Holm-adjusted across families), or Newcombe / Boschloo for an unpaired family.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lerobench.analysis.compare import Run, load_run
from lerobench.core.delay import parse_delay
from lerobench.core.trials import is_whole
from lerobench.envs.perturb import PERTURBATIONS, Perturbation, describe, parse_perturbations
from lerobench.errors import ConfigError, UnknownNameError
from lerobench.stats.binomial import (
    compare_paired,
    holm,
    paired_difference_exact,
    rate_block,
    unpaired_difference_ci,
    unpaired_exact,
)
from lerobench.suite.config import Suite

ROBUSTNESS_FILE = "robustness.json"
DELAY_FAMILY = "delay_steps"
"""``--families delay_steps=2,delay_steps=4``: arms at those inference delays (``--delay-steps``) against d = 0."""
CONTROL_SUFFIX = "_control"

UNPAIRED_REASONS = {
    "swap": "the swap cannot be undone for every task of this base (more than one pair moved, objects on different "
            "surfaces, or something standing on a swapped object; see `lerobench show` of the suite): compared "
            "with the original suite's own starts (unpaired)",
}
"""Why a LIBERO-PRO family has no matched control arm (shown in ``robustness.json``)."""


@dataclass(frozen=True)
class Arm:
    """One run of a robustness evaluation."""

    suite: Suite
    perturb: Perturbation
    output: Path
    delay_steps: int = 0
    """``--delay-steps`` of the arm (a ``delay_steps=K`` family; its control is the same run at d = 0)."""


@dataclass(frozen=True)
class Family:
    """One perturbation family: its perturbed arm, its control arm and whether they pair episode by episode."""

    name: str
    kind: str
    """``perturbation`` (generic ``--perturb``) or the perturbed suite's family (``libero-pro``)."""
    perturbed: Arm
    control: Arm
    paired: bool
    reason: str | None = None
    """Why the family is unpaired (None when paired)."""


def _matching(perturbed: Suite, control: Suite | None, base: Suite) -> tuple[Suite, Suite | None]:
    """The perturbed (and control) suite narrowed to ``base``'s tasks, in the same order as each other.

    A control suite lists, at position i, the original task of the perturbed suite's task i (``with_*`` suites
    rename and reorder tasks), so positions found in it select both. Without one, the perturbed suite's tasks
    are matched by name (LIBERO-PRO keeps the original file names), else by index.
    """
    wanted = {t.name for t in base.tasks}
    if control is not None:
        if len(control.tasks) != len(perturbed.tasks):
            raise ConfigError(f"suite {control.name!r} has {len(control.tasks)} tasks and {perturbed.name!r} "
                              f"{len(perturbed.tasks)}: a control suite lists one task per perturbed task")
        positions = [i for i, t in enumerate(control.tasks) if t.name in wanted]
    elif wanted & {t.name for t in perturbed.tasks}:
        positions = [i for i, t in enumerate(perturbed.tasks) if t.name in wanted]
    else:
        positions = [t.index for t in base.tasks if t.index < len(perturbed.tasks)]
    if not positions:
        raise ConfigError(f"suite {perturbed.name!r} has none of the selected tasks of {base.name!r}")

    def narrowed(suite: Suite) -> Suite:
        return suite.select_tasks([suite.tasks[i].name for i in positions])

    return narrowed(perturbed), narrowed(control) if control is not None else None


def plan_families(base: Suite, full_base: Suite, families: Sequence[str], output: Path,
                  load: Callable[[str], Suite]) -> list[Family]:
    """The arms of each family; ``base`` is narrowed to ``--tasks``, ``full_base`` is the whole base suite.

    Raises:
        ConfigError: No family, a family given twice, or an unknown one (names the suites it looked for).
    """
    if not families:
        raise ConfigError("--families needs at least one family, e.g. lan,object or action_noise=0.1")
    shipped_control = Arm(base, (), output / "control")
    planned: list[Family] = []
    for raw in families:
        name = raw.strip()
        if name.partition("=")[0].strip() == DELAY_FAMILY:
            steps = parse_delay(name.partition("=")[2].strip())
            if not isinstance(steps, int) or steps == 0:
                raise ConfigError(f"--families {name}: a delay family needs a whole number of steps > 0 (d = 0 is "
                                  f"the control arm; 'measured' is not reproducible)")
            label = f"{DELAY_FAMILY}={steps}"
            planned.append(Family(label, "delay", Arm(base, (), output / label, delay_steps=steps), shipped_control,
                                  paired=True))
            continue
        if "=" in name:
            perturbation = parse_perturbations(name)
            if not perturbation:
                raise ConfigError(f"--families {name}: this value perturbs nothing")
            label = describe(perturbation)
            planned.append(Family(label, "perturbation", Arm(base, perturbation, output / label), shipped_control,
                                  paired=True))
            continue
        try:
            suite = load(f"{full_base.name}_{name}")
        except UnknownNameError:
            raise ConfigError(f"--families {name}: no suite {full_base.name}_{name} ships and it is not a "
                              f"perturbation NAME=VALUE ({', '.join(PERTURBATIONS)})") from None
        try:
            control: Suite | None = load(f"{suite.name}{CONTROL_SUFFIX}")
        except UnknownNameError:
            control = None
        perturbed_suite, control_suite = _matching(suite, control, base)
        perturbed = Arm(perturbed_suite, (), output / name / "perturbed")
        if control_suite is None:
            reason = UNPAIRED_REASONS.get(name, f"no control suite {suite.name}{CONTROL_SUFFIX} ships: compared "
                                                f"with the original suite's own starts (unpaired)")
            planned.append(Family(name, suite.family or "suite", perturbed, Arm(base, (), output / name / "control"),
                                  paired=False, reason=reason))
            continue
        planned.append(Family(name, suite.family or "suite", perturbed,
                              Arm(control_suite, (), output / name / "control"), paired=True))
    names = [f.name for f in planned]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"--families lists {', '.join(dupes)} twice")
    return planned


def unique_arms(families: Sequence[Family]) -> list[Arm]:
    """Every run to make, once each (generic families share one control run), perturbed arms first."""
    arms: dict[Path, Arm] = {}
    for family in families:
        arms.setdefault(family.perturbed.output, family.perturbed)
    for family in families:
        arms.setdefault(family.control.output, family.control)
    return list(arms.values())


# -- analysis ------------------------------------------------------------------------------------------------


def _episodes(run: Run) -> dict[tuple[int, int], tuple[bool, str | None, str]]:
    """(task position, episode) -> (success at trial 0, start digest, task name) for finished episodes."""
    order = list(run.config.get("tasks") or [])
    lines: dict[tuple[str, int], list[Any]] = {}
    for r in run.records:
        lines.setdefault((r.task, r.episode), []).append(r)
    found = {}
    for (task, episode), records in lines.items():
        records.sort(key=lambda r: r.trial)
        if task in order and is_whole(records, run.trials):
            first = records[0]
            found[(order.index(task), episode)] = (first.success and first.error is None, first.start_digest, task)
    return found


def _rate(successes: int, n: int) -> dict[str, Any]:
    return rate_block(successes, n, key="rate")


def _drop(control: list[bool], perturbed: list[bool], paired: bool) -> dict[str, Any]:
    """Control minus perturbed success, its 95% CI and exact p.

    Paired (the same starts): the exact unconditional interval ``compare`` pools with (Suissa-Shuster with
    Berger-Boos: it covers whatever the discordance) and the exact McNemar p. The two are different exact tests,
    so at the margin one can leave 0 out while the other does not. Unpaired: Newcombe's interval, Boschloo's p.
    """
    if paired:
        result = compare_paired(control, perturbed)  # difference = perturbed - control
        exact, _ = paired_difference_exact(result.gained, result.lost, result.n)
        return {"drop": 0.0 - result.delta if result.delta is not None else None,  # 0.0 - x: never -0.0
                "drop_ci95": [round(0.0 - exact[1], 6), round(0.0 - exact[0], 6)],
                "interval": "exact unconditional (paired)", "p_value": result.p_value, "test": "exact McNemar",
                "lost": result.lost, "gained": result.gained}
    sc, nc, sp, np_ = sum(control), len(control), sum(perturbed), len(perturbed)
    ci = unpaired_difference_ci(sp, np_, sc, nc)  # perturbed - control
    p_value, test = unpaired_exact(sc, nc, sp, np_)
    return {"drop": sc / nc - sp / np_ if nc and np_ else None,
            "drop_ci95": [round(0.0 - ci[1], 6), round(0.0 - ci[0], 6)], "interval": "Newcombe hybrid score",
            "p_value": p_value, "test": {"boschloo": "Boschloo exact", "fisher": "Fisher exact"}.get(test, test)}


def analyze_family(family: Family, perturbed: Run, control: Run) -> dict[str, Any]:
    """One family's block of ``robustness.json``: overall and per-task perturbed/control success and drop."""
    p_eps, c_eps = _episodes(perturbed), _episodes(control)
    keys = sorted(set(p_eps) & set(c_eps)) if family.paired else []
    digests_equal = sum(1 for k in keys if p_eps[k][1] is not None and p_eps[k][1] == c_eps[k][1])
    block: dict[str, Any] = {
        "family": family.name, "kind": family.kind, "paired": family.paired, "unpaired_reason": family.reason,
        "perturbed_run": str(family.perturbed.output), "control_run": str(family.control.output),
        "perturbed_suite": family.perturbed.suite.name, "control_suite": family.control.suite.name,
        "perturb": dict(family.perturbed.perturb) or None,
    }
    if family.paired:
        block.update(n_pairs=len(keys), start_digests_equal=digests_equal,
                     unmatched={"perturbed": len(set(p_eps) - set(keys)), "control": len(set(c_eps) - set(keys))})
        ctl, per = [c_eps[k][0] for k in keys], [p_eps[k][0] for k in keys]
    else:
        ctl, per = [v[0] for _, v in sorted(c_eps.items())], [v[0] for _, v in sorted(p_eps.items())]
    block.update(perturbed=_rate(sum(per), len(per)), control=_rate(sum(ctl), len(ctl)))
    block.update(_drop(ctl, per, family.paired) if ctl and per else {"drop": None, "drop_ci95": None,
                                                                      "p_value": None})
    tasks = []
    positions = sorted({k[0] for k in (keys if family.paired else set(p_eps) | set(c_eps))})
    for position in positions:
        if family.paired:
            mine = [k for k in keys if k[0] == position]
            tc, tp = [c_eps[k][0] for k in mine], [p_eps[k][0] for k in mine]
        else:
            tc = [v[0] for k, v in sorted(c_eps.items()) if k[0] == position]
            tp = [v[0] for k, v in sorted(p_eps.items()) if k[0] == position]
        if not tc or not tp:
            continue
        name = next(v[2] for k, v in sorted(c_eps.items()) if k[0] == position)
        perturbed_name = next(v[2] for k, v in sorted(p_eps.items()) if k[0] == position)
        tasks.append({"position": position, "task": name, "perturbed_task": perturbed_name,
                      "control": _rate(sum(tc), len(tc)), "perturbed": _rate(sum(tp), len(tp)),
                      **_drop(tc, tp, family.paired)})
    block["tasks"] = tasks
    return block


def analyze(families: Sequence[Family], base: Suite, policy: str, alpha: float = 0.05) -> dict[str, Any]:
    """``robustness.json``: every family's drop, Holm-adjusted across families, read from the arms' run dirs."""
    blocks = [analyze_family(f, load_run(f.perturbed.output), load_run(f.control.output)) for f in families]
    tested = [b for b in blocks if b["p_value"] is not None]
    for block, adjusted in zip(tested, holm([b["p_value"] for b in tested]), strict=True):
        block["p_holm"] = adjusted
        block["significant"] = adjusted < alpha
    return {"base": base.name, "policy": policy, "alpha": alpha, "tasks": [t.name for t in base.tasks],
            "families": blocks, "delay_curve": delay_curve(families, blocks)}


def delay_curve(families: Sequence[Family], blocks: Sequence[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """Success against inference delay: d = 0 (the control arm) then each delay family's arm, with paired drops.

    None without a delay family. Every point has the same episodes (same starts, same seeds) as d = 0.
    """
    found = [(f.perturbed.delay_steps, b) for f, b in zip(families, blocks, strict=True) if f.kind == "delay"]
    if not found:
        return None
    points = [{"delay_steps": 0, **found[0][1]["control"], "drop": 0.0, "drop_ci95": None, "p_value": None,
               "p_holm": None, "n_pairs": found[0][1].get("n_pairs"), "run": found[0][1]["control_run"]}]
    for steps, block in sorted(found, key=lambda x: x[0]):
        points.append({"delay_steps": steps, **block["perturbed"], "drop": block["drop"],
                       "drop_ci95": block["drop_ci95"], "p_value": block["p_value"], "p_holm": block.get("p_holm"),
                       "n_pairs": block.get("n_pairs"), "run": block["perturbed_run"]})
    return points


