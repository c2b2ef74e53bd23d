"""Evaluate until decided: the ``--until`` rules and the index-order ledger that applies them.

Episodes finish in an outcome-dependent order (a success ends early), so a rule updated as episodes
*complete* sees successes first and is biased however sound its statistic (docs/statistics.md). The
ledger therefore takes outcomes in a fixed order only: per task in episode-index order (``halfwidth``),
or round by round across tasks, episode k of every task before episode k+1 of any (``suite-halfwidth``,
``decided``). An outcome that arrives before a lower-numbered one waits. When a rule is met the ledger
says so through ``wants``: executors start no further episode of a decided task (those already running
finish and are recorded), and the sink writes the ``stopping`` block of results.json.

Thread-safe: the sink calls ``add`` from executor threads.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from lerobench.errors import ConfigError

METRICS = ("success", "progress")
"""``--metric``: what ``--until decided`` decides about: success (discordant pairs) or mean highest progress."""

KINDS = ("halfwidth", "suite-halfwidth", "decided")
"""``--until`` rules: a task's interval half-width, the suite mean's, or a paired decision (``--versus``)."""


@dataclass(frozen=True)
class Until:
    """A parsed ``--until`` value."""

    kind: str
    target: float | None = None
    """Half-width to reach (``halfwidth``, ``suite-halfwidth``)."""

    def __str__(self) -> str:
        return self.kind if self.target is None else f"{self.kind}={self.target:g}"

    @property
    def interleaved(self) -> bool:
        """Whether tasks run round by round (episode k of every task before k+1 of any)."""
        return self.kind != "halfwidth"


def parse_until(text: str) -> Until:
    """``halfwidth=H``, ``suite-halfwidth=H`` (0 < H < 0.5) or ``decided``; ``ConfigError`` otherwise."""
    kind, _, value = text.strip().partition("=")
    if kind not in KINDS:
        from lerobench.errors import unknown

        raise unknown("--until", kind, KINDS)
    if kind == "decided":
        if value:
            raise ConfigError(f"--until decided takes no value, got {text!r}")
        return Until(kind)
    try:
        target = float(value)
    except ValueError:
        raise ConfigError(f"--until {kind}=H needs a half-width H, e.g. {kind}=0.1; got {text!r}") from None
    if not 0 < target < 0.5:
        raise ConfigError(f"--until {kind}=H needs 0 < H < 0.5 (a half-width of a rate), got {target:g}")
    return Until(kind, target)


def _rounded(interval: tuple[float, float]) -> list[float]:
    return [round(float(interval[0]), 6), round(float(interval[1]), 6)]


class NoStopping:
    """The ledger of a run without ``--until``: every episode is wanted, nothing is recorded."""

    active = False

    def add(self, task: str, episode: int, success: bool, progress: float | None = None) -> None:
        """Nothing to update."""

    def same_inputs(self, record: Any) -> str | None:
        """No run A to compare the inputs with."""
        return None

    def wants(self, task: str, episode: int) -> bool:
        """Always."""
        return True

    def block(self) -> dict[str, Any] | None:
        """No ``stopping`` block."""
        return None


class Ledger:
    """Outcomes in index order and the rule's state; ``wants`` tells executors what is still worth running.

    ``recorded`` maps (task, episode) to run A's success for ``--versus`` (B is the run being evaluated).
    ``design`` (``analysis.design.Design``, from ``--effect``) replaces the e-process in the effect's direction
    and the equivalence margin; ``design_summary`` (its exact operating characteristics) goes to results.json.
    ``metric="progress"`` decides on each pair's highest-progress difference instead (``recorded_progress``: run
    A's per (task, episode); ``stats/paired_progress.py``); success is then counted for the record only.
    """

    active = True

    def __init__(self, until: Until, tasks: list[str], cap: int, alpha: float = 0.05, margin: float = 0.1,
                 recorded: dict[tuple[str, int], bool] | None = None, versus: str | None = None,
                 design: Any = None, design_summary: dict[str, Any] | None = None,
                 recorded_records: dict[tuple[str, int], Any] | None = None, metric: str = "success",
                 recorded_progress: dict[tuple[str, int], float] | None = None):
        self.until, self.tasks, self.cap, self.alpha, self.margin = until, list(tasks), cap, alpha, margin
        self.metric, self.recorded_progress = metric, recorded_progress or {}
        self._progress: dict[tuple[str, int], float] = {}
        self._differences: list[float] = []
        """``--metric progress``: progress(B) - progress(A) per pair, in the round-robin order."""
        self.recorded, self.versus = recorded or {}, versus
        self.recorded_records = recorded_records or {}
        """Run A's trial-0 records (``--versus``): each pair's first observation is compared (``same_inputs``)."""
        self._inputs: dict[str, Any] = {"identical": 0, "different": 0, "unknown": 0, "first": None}
        self.design, self.design_summary = design, design_summary
        self._designed: str | None = None
        """The designed test's decision once made (``--effect``)."""
        self._lock = threading.Lock()
        self._outcomes: dict[tuple[str, int], bool] = {}
        self._received: dict[str, int] = dict.fromkeys(self.tasks, 0)
        # halfwidth: one position per task; the others: one position in the round-robin order.
        self._next: dict[str, int] = dict.fromkeys(self.tasks, 0)
        self._successes: dict[str, int] = dict.fromkeys(self.tasks, 0)
        self._stops: dict[str, dict[str, Any]] = {}
        self._position = 0
        self._totals = {"successes": 0, "gained": 0, "lost": 0}
        self._run_stop: dict[str, Any] | None = None
        if until.kind == "suite-halfwidth":
            from lerobench.stats.sequential import optimal_rho

            # Tuned (before any data) to the episode count at which a fixed-n Hoeffding interval has the target.
            self._rho = optimal_rho(_hoeffding_n(until.target or 0.1, alpha), alpha)

    # -- updates ------------------------------------------------------------------------------------
    def same_inputs(self, record: Any) -> str | None:
        """``--versus``: B's trial-0 ``record`` against A's from the same start; a sentence if their first reads differ.

        Different first observations from the same start mean a simulator that does not reset the same. The pair
        still counts (the rule is about outcomes); the difference is named, never silent (in results.json
        ``stopping.versus.same_first_observation``, and the caller warns).
        """
        from lerobench.core.digest_compare import first_read_differs

        a = self.recorded_records.get((record.task, record.episode))
        if a is None or record.trial != 0:
            return None
        with self._lock:
            if a.obs_read_digests is None or record.obs_read_digests is None or a.start_digest is None:
                self._inputs["unknown"] += 1
                return None
            where = first_read_differs(a, record)
            if where is None:
                self._inputs["identical"] += 1
                return None
            self._inputs["different"] += 1
            said = f"task {record.task!r} episode {record.episode}: {where.describe()}"
            if self._inputs["first"] is None:
                self._inputs["first"] = {"task": record.task, "episode": record.episode, "call": where.read,
                                         "part": where.part, "where": where.describe()}
            return (f"{said}: same start as the --versus run, but the policy's first observation differs: the "
                    f"simulator does not show the same inputs (lerobench check-resets)")

    def add(self, task: str, episode: int, success: bool, progress: float | None = None) -> None:
        """Take one episode's outcome (trial 0) and highest progress; update the rule over everything in index order.

        ``progress`` is read only with ``metric="progress"`` (None there counts 0, as an error does).
        """
        with self._lock:
            if task not in self._received or (task, episode) in self._outcomes or episode >= self.cap:
                return
            self._outcomes[(task, episode)] = bool(success)
            self._progress[(task, episode)] = float(progress or 0.0)
            self._received[task] += 1
            if self.until.kind == "halfwidth":
                self._advance_task(task)
            else:
                self._advance_rounds()

    def _advance_task(self, task: str) -> None:
        from lerobench.stats.sequential import beta_binomial_cs

        while (task, self._next[task]) in self._outcomes and task not in self._stops:
            self._successes[task] += self._outcomes[(task, self._next[task])]
            self._next[task] += 1
            n = self._next[task]
            cs = beta_binomial_cs(self._successes[task], n, self.alpha)
            if (cs[1] - cs[0]) / 2 <= (self.until.target or 0):
                self._stops[task] = {"episodes": n, "reason": "target", "cs": _rounded(cs)}
            elif n >= self.cap:
                self._stops[task] = {"episodes": n, "reason": "cap", "cs": _rounded(cs)}

    def _order(self, position: int) -> tuple[str, int]:
        return self.tasks[position % len(self.tasks)], position // len(self.tasks)

    def _advance_rounds(self) -> None:
        total = self.cap * len(self.tasks)
        while self._run_stop is None and self._position < total:
            key = self._order(self._position)
            if key not in self._outcomes:
                return
            task, _ = key
            success = self._outcomes[key]
            self._next[task] += 1
            self._successes[task] += success
            self._totals["successes"] += success
            self._position += 1
            if self.until.kind == "decided":
                a = self.recorded[key]
                self._totals["gained"] += success and not a
                self._totals["lost"] += a and not success
                if self.metric == "progress":
                    self._differences.append(self._progress[key] - self.recorded_progress[key])
                self._check_pair()
            elif self._position % len(self.tasks) == 0:  # the suite mean is defined at complete rounds only
                self._check_suite()
            if self._run_stop is None and self._position == total:
                self._run_stop = {"reason": "cap", **self._run_state()}

    def _check_suite(self) -> None:
        from lerobench.stats.sequential import subgaussian_cs

        cs = subgaussian_cs(self._totals["successes"], self._position, self.alpha, rho=self._rho)
        if (cs[1] - cs[0]) / 2 <= (self.until.target or 0):
            self._run_stop = {"reason": "target", **self._run_state()}

    def _check_pair(self) -> None:
        from lerobench.stats.sequential import paired_decision, paired_difference_cs

        g, lost, n = self._totals["gained"], self._totals["lost"], self._position
        if self.metric == "progress" and self.design is not None:
            from lerobench.stats.progress_design import decide

            self._designed = decide(self._differences, self.design)
            if self._designed is not None:
                self._run_stop = {"reason": "max pairs" if self._designed == "undecided" else "decided",
                                  **self._run_state()}
            return
        if self.metric == "progress":
            from lerobench.stats.paired_progress import decision

            if decision(self._differences, self.alpha)[0] is not None:
                self._run_stop = {"reason": "decided", **self._run_state()}
            return
        if self.design is not None:
            self._designed = designed_decision(self.design, self.design_summary or {}, g, lost, n, self.alpha)
            if self._designed is not None:
                self._run_stop = {"reason": "max pairs" if self._designed == "undecided" else "decided",
                                  **self._run_state()}
            return
        if paired_decision(g, lost, self.alpha) is not None:
            self._run_stop = {"reason": "decided", **self._run_state()}
            return
        low, high = paired_difference_cs(g, lost, n, self.alpha)
        if -self.margin <= low and high <= self.margin:
            self._run_stop = {"reason": "decided", **self._run_state()}

    def _run_state(self, at_stop: bool = True) -> dict[str, Any]:
        """A snapshot of the round-robin rule's statistics now (the stop's figures).

        The rule's own interval is computed at the stop only (a designed test's takes up to a second at large
        designs; results.json is rewritten after every episode); ``compare`` recomputes it for a run that never
        stopped (interrupted).
        """
        n = self._position
        state: dict[str, Any] = {"episodes": n, "per_task": dict(self._next)}
        if self.until.kind == "suite-halfwidth":
            from lerobench.stats.sequential import subgaussian_cs

            state["cs"] = _rounded(subgaussian_cs(self._totals["successes"], n, self.alpha, rho=self._rho))
        elif self.metric == "progress":
            from lerobench.stats.paired_progress import progress_state

            state.update(progress_state(self._differences, self._totals["gained"], self._totals["lost"],
                                        self._successes_a(), self.alpha, at_stop, self.design))
        else:
            from lerobench.stats.sequential import paired_decision, paired_difference_cs, paired_evalues

            g, lost = self._totals["gained"], self._totals["lost"]
            e_b, e_a = paired_evalues(g, lost)
            low, high = paired_difference_cs(g, lost, n, self.alpha)
            decision = paired_decision(g, lost, self.alpha) if self.design is None else self._designed
            if self.design is None and decision is None and -self.margin <= low and high <= self.margin:
                decision = f"equivalent within ±{self.margin:g}"
            state.update(decision=decision or "undecided", pairs=n, gained=g, lost=lost,
                         e_value_b_better=round(float(e_b), 6), e_value_a_better=round(float(e_a), 6),
                         difference_cs=_rounded((low, high)))
            if at_stop:
                state["decision_interval"] = self._interval(g, lost, n)
        return state

    def _successes_a(self) -> int:
        """Run A's successes over the pairs taken so far (the descriptive success rates of a progress decision)."""
        return sum(self.recorded[self._order(i)] for i in range(self._position))

    def _interval(self, gained: int, lost: int, pairs: int) -> dict[str, Any]:
        """The stopping rule's own interval (``rule_interval``)."""
        positive = (self.design_summary or {}).get("effect", 1) > 0
        actions = self.design.actions if self.design is not None else None
        return rule_interval(actions, self.alpha, gained, lost, pairs, positive)

    # -- what executors ask ---------------------------------------------------------------------------
    def wants(self, task: str, episode: int) -> bool:
        """False once ``task`` (or, round by round, the whole run) is decided: start nothing more of it."""
        with self._lock:
            if self.until.kind == "halfwidth":
                return task not in self._stops
            return self._run_stop is None

    # -- results.json ---------------------------------------------------------------------------------
    def block(self) -> dict[str, Any]:
        """The ``stopping`` block of results.json (docs/results.md)."""
        with self._lock:
            out: dict[str, Any] = {
                "rule": str(self.until), "alpha": self.alpha, "cap": self.cap,
                "order": "episode index per task" if self.until.kind == "halfwidth" else
                         "round robin: episode k of every task before episode k+1 of any",
                "method": _METHODS[self.until.kind],
                "fixed_n_intervals": "ci95 elsewhere in this file is fixed-n (Clopper-Pearson): after a sequential "
                                     "stop it is descriptive only; the confidence sequence here is the valid one",
            }
            tasks = {}
            for task in self.tasks:
                if self.until.kind == "halfwidth":
                    entry = dict(self._stops.get(task) or {"episodes": self._next[task], "reason": None})
                    if "cs" not in entry:
                        from lerobench.stats.sequential import beta_binomial_cs

                        entry["cs"] = _rounded(beta_binomial_cs(self._successes[task], self._next[task], self.alpha))
                else:
                    stop = self._run_stop
                    entry = {"episodes": (stop["per_task"] if stop else self._next)[task],
                             "reason": stop["reason"] if stop else None}
                entry["recorded"] = self._received[task]
                tasks[task] = entry
            out["tasks"] = tasks
            if self.until.kind != "halfwidth":
                stop = self._run_stop
                state = dict(stop) if stop else {"reason": None, **self._run_state(at_stop=False)}
                state.pop("per_task", None)
                if self.until.kind == "decided" and self.metric == "progress":
                    out["method"] = _PROGRESS_METHOD if self.design is None else _PROGRESS_DESIGNED_METHOD
                    state.update(margin=None, versus=self.versus, same_first_observation=dict(self._inputs))
                    if self.design_summary is not None:
                        state["design"] = _rounded_figures(self.design_summary)
                    out["versus"] = state
                elif self.until.kind == "decided":
                    state["margin"] = self.margin if self.design is None else None
                    if self.design_summary is not None:
                        out["method"] = _DESIGNED_METHOD
                        state["design"] = _rounded_figures(self.design_summary)
                    state["versus"] = self.versus
                    if self.design_summary is None:  # with a design, its fixed_n (at the effect) is the one figure
                        state["fixed_n_at_observed_rates"] = _fixed_n(state["gained"], state["lost"], state["pairs"],
                                                                      self.alpha)
                    state["same_first_observation"] = dict(self._inputs)  # the pairing check: same or named
                    out["versus"] = state
                else:
                    out["suite"] = state
            return out


_METHODS = {
    "halfwidth": "Robbins beta-binomial mixture confidence sequence per task, Jeffreys prior Beta(1/2, 1/2)",
    "suite-halfwidth": "Robbins normal-mixture (sub-Gaussian) confidence sequence for the suite mean",
    "decided": "one-sided mixture likelihood-ratio e-processes on the discordant pairs (uniform prior on each "
               "half), level alpha two-sided; beta-binomial confidence sequences for the gain and loss rates",
}


_PROGRESS_METHOD = ("--metric progress: two one-sided betting e-processes on each pair's highest-progress difference "
                    "max_progress(B) - max_progress(A) (stats/paired_progress.py), level alpha two-sided; their "
                    "confidence sequence for the mean difference; success counted beside it, descriptive only")

_PROGRESS_DESIGNED_METHOD = ("--metric progress --effect: a designed betting e-process on each pair's highest-progress "
                             "difference with bets planned for the effect, one-sided at alpha/2, a futility exit "
                             "against the effect and a pair cap (stats/progress_design.py); the other direction by "
                             "the anytime-valid betting e-process at alpha/2; success counted beside it, descriptive "
                             "only")

_DESIGNED_METHOD = ("designed truncated sequential test on the discordant pairs (--effect; stats/design.py), "
                    "one-sided at alpha/2 in the effect's direction with exact operating characteristics; the "
                    "other direction by the one-sided mixture e-process at alpha/2; beta-binomial confidence "
                    "sequences for the gain and loss rates")


def rule_interval(actions: Any, alpha: float, gained: int, lost: int, pairs: int,
                  positive: bool = True) -> dict[str, Any]:
    """The ``--until decided`` rule's own interval: the design's stagewise one, or the e-processes' sequence.

    ``actions`` is the design's table (None without a design). The ledger at the stop and ``compare`` afterwards
    both call it.
    """
    if actions is not None:
        from lerobench.stats.stagewise import decision_interval

        return decision_interval(actions, alpha, gained, lost, pairs, positive)
    from lerobench.stats.sequential import paired_decision_interval

    return paired_decision_interval(gained, lost, pairs, alpha)


def designed_decision(design: Any, summary: dict[str, Any], gained: int, lost: int, pairs: int,
                      alpha: float) -> str | None:
    """The ``--effect`` rule after ``pairs`` pairs: a decision, ``"undecided"`` at the design's cap, or None.

    The design decides its direction ("B better" for a positive effect): better, or *not better by the
    effect* (H0's side: the planned difference is ruled out at the design's power). The other direction is
    the anytime-valid e-process at alpha/2 (valid at any stop, so the design's stopping cannot bias it). At
    ``max_pairs`` without a decision: undecided (never a rejection, so type-I stays the design's).
    """
    from lerobench.stats.sequential import paired_evalues

    positive = summary.get("effect", 1) > 0
    ahead, behind = (gained, lost) if positive else (lost, gained)
    better, worse = ("B better", "A better") if positive else ("A better", "B better")
    e_b, e_a = paired_evalues(gained, lost)
    if (e_a if positive else e_b) >= 2 / alpha:
        return worse
    verdict = design.decide(ahead, behind)
    if verdict == "better":
        return better
    if verdict is not None:
        return f"{better[0]} not better by {abs(summary.get('effect', 0)):g}"
    return "undecided" if pairs >= design.max_pairs else None


def _rounded_figures(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 6) if isinstance(v, float) else v for k, v in summary.items()}


def _hoeffding_n(halfwidth: float, alpha: float) -> float:
    """Episodes at which a fixed-n Hoeffding interval has ``halfwidth``: log(2/alpha) / (2 h^2)."""
    import math

    return math.log(2 / alpha) / (2 * halfwidth * halfwidth)


def _fixed_n(gained: int, lost: int, pairs: int, alpha: float) -> dict[str, Any]:
    """Pairs a fixed-n exact McNemar test needs for 80% power at the gain and loss rates observed at the stop."""
    from lerobench.stats.validity import fixed_n_for_power

    if pairs == 0:
        return {"pairs_for_80pct_power": None, "at": None}
    p_gain, p_lost = gained / pairs, lost / pairs
    return {"pairs_for_80pct_power": fixed_n_for_power(p_gain, p_lost, 0.8, alpha, max_n=100_000),
            "at": {"p_gain": round(p_gain, 6), "p_lost": round(p_lost, 6)},
            "note": "the effect must be known before a fixed-n run; the sequential test needed no such guess"}


FIXED_N_NOTE = ("fixed-n Clopper-Pearson, descriptive only after a sequential stop (the stopping rule's own "
                "interval, in results.json's stopping block and the decision's line, is the valid one)")
"""How the terminal summary and the report label a sequentially stopped run's fixed-n intervals."""


def stopping_line(stopping: dict[str, Any]) -> str:
    """The ``--until`` outcome in one line: the decision (``--versus``) or where each task stopped and why.

    The counts are the rule's (outcomes used, in index order); where more episodes were recorded (they
    were running when the task was decided), the line says so and gives the recorded count, the table's n.
    """
    return _decision(stopping) + _late(stopping)


def _late(stopping: dict[str, Any]) -> str:
    """Why a table's n can exceed where the rule stopped: episodes already running at the stop were recorded.

    The table (and ``n_episodes``) count every recorded episode; the rule's count is the one it used. Said
    here, once, so the two numbers never appear side by side unexplained.
    """
    late = {name: t["recorded"] for name, t in stopping["tasks"].items()
            if t.get("recorded", 0) > t.get("episodes", 0)}
    if not late:
        return ""
    counts = ", ".join(f"{name} {n}" for name, n in late.items())
    return (f"; episodes already running at the stop were finished and are counted in the table's n too "
            f"({counts})")


def interval_phrase(interval: dict[str, Any] | None) -> str:
    """The stopping rule's own interval in words: P(B wins | discordant), its mapping, the p-value (if decided)."""
    from lerobench.stats.intervals import points_interval

    if not interval:
        return "no interval recorded"
    lo, hi = interval["theta_b"]
    d_lo, d_hi = interval["difference_at_observed_discordance"]
    level = f"{100 * interval['level']:g}%"
    kind = "stagewise, the designed test's own" if "stagewise" in interval["method"] else "anytime-valid"
    p = interval.get("p_value")
    return (f"{level} interval ({kind}): P(B wins | discordant) in [{lo:.3f}, {hi:.3f}], i.e. rate(B) - rate(A) "
            f"in [{points_interval((d_lo, d_hi), ', ', 1)}] pp at the observed discordance "
            f"{100 * interval['observed_discordance']:.1f}%" + (f"; p {p:.3g}" if p is not None else ""))


def _decision(stopping: dict[str, Any]) -> str:
    """The decision or the per-task stops, in the rule's own episode counts."""
    from lerobench.stats.intervals import percent_interval, points_interval

    if "versus" in stopping and stopping["versus"].get("metric") == "progress":
        return progress_line(stopping)
    if "versus" in stopping:
        v = stopping["versus"]
        lo, hi = v["difference_cs"]
        e = max(v["e_value_b_better"], v["e_value_a_better"])
        fixed = (v.get("fixed_n_at_observed_rates") or {}).get("pairs_for_80pct_power")
        counts = f"B-only {v['gained']}, A-only {v['lost']}"
        own = interval_phrase(v.get("decision_interval"))
        if v.get("design"):
            d = v["design"]
            return (f"{v['decision']} after {v['pairs']} of at most {d['max_pairs']} pairs ({counts}); {own}; "
                    f"designed test for an effect of {d['effect']:+g}: expected {d['expected_pairs_effect']:.0f} "
                    f"pairs at the effect, exact type-I {d['type_i']:.4f}, power {100 * d['power']:.1f}%, against "
                    f"the {d['fixed_n']} pairs a fixed-n exact McNemar test needs at that effect, alpha and power")
        if v["decision"].startswith("equivalent"):
            own = f"rate(B) - rate(A) in [{points_interval((lo, hi), ', ', 1)}] pp, anytime-valid"
        return (f"{v['decision']} after {v['pairs']} of {stopping['cap'] * len(stopping['tasks'])} pairs "
                f"({counts}; e-value {e:.3g}, decides at {2 / stopping['alpha']:g}); {own}"
                + (f"; a fixed-n McNemar test would need {fixed} pairs for 80% power at the rates observed at the "
                   f"stop" if fixed else ""))
    if "suite" in stopping:
        s = stopping["suite"]
        lo, hi = s["cs"]
        return (f"until {stopping['rule']}: {s['reason'] or 'not reached'} after {s['episodes']} episodes "
                f"(suite mean in {percent_interval((lo, hi), 1)}, anytime-valid)")
    parts = [f"{name} {t['episodes']} ({t['reason'] or 'running'})" for name, t in stopping["tasks"].items()]
    return f"until {stopping['rule']} (cap {stopping['cap']}): stopped at " + ", ".join(parts)


def progress_line(stopping: dict[str, Any]) -> str:
    """A ``--metric progress`` decision in words: what it decided about, its own interval, success beside it."""
    from lerobench.stats.intervals import points_interval

    v = stopping["versus"]
    e = max(v["e_value_b_better"], v["e_value_a_better"])
    mean = v.get("mean_difference")
    d = v.get("design")
    most = f"at most {d['max_pairs']}" if d else f"{stopping['cap'] * len(stopping['tasks'])}"
    head = (f"{v['decision']} on mean progress (each episode's highest, max_progress) after {v['pairs']} of "
            f"{most} pairs (mean progress(B) - progress(A) "
            f"{'n/a' if mean is None else f'{mean:+.3f}'}; e-value {e:.3g}, decides at {2 / stopping['alpha']:g})")
    own = v.get("decision_interval")
    if own:
        lo, hi = own["mean_difference"]
        kind = "the designed test's own, anytime-valid" if d else "anytime-valid"
        head += (f"; {100 * own['level']:g}% interval ({kind}): mean progress difference in "
                 f"[{lo:+.3f}, {hi:+.3f}]; p {own['p_value']:.3g}")
    else:
        head += "; no interval recorded"
    if d:
        head += (f"; designed test for a mean progress difference of {d['effect']:+g}: expected "
                 f"{d['expected_pairs_effect']:.0f} pairs at the effect, power {100 * d['power']:.1f}% (simulated "
                 f"under its planning model), type-I <= {d['type_i_bound']:g} a side whatever the distribution")
    s = v.get("success_descriptive") or {}
    if s.get("rate_a") is not None:
        head += (f". Success, descriptive only (not what was decided): A {100 * s['rate_a']:.1f}%, B "
                 f"{100 * s['rate_b']:.1f}% (B-only {v['gained']}, A-only {v['lost']}), rate(B) - rate(A) in "
                 f"[{points_interval(tuple(s['difference_ci']), ', ', 1)}] pp (exact paired, fixed-n)")
    return head
