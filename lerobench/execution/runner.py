"""Runs a suite: validate a plan, pick an executor, stream its episode records into the sink.

``Evaluation`` is the one place these meet: ``plan.py`` validates settings, ``execution/`` runs
episodes (inline, vector, processes, Ray), ``sink.py`` writes everything. Whatever the executor, an
episode's outcome is a pure function of (seed, task, episode), so the numbers never depend on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from lerobench.core.call_stats import CallStats
from lerobench.core.delay import check_horizon
from lerobench.core.executors import EXECUTORS
from lerobench.core.results import IDENTITY_FILE, RESULTS_FILE
from lerobench.envs.fingerprint import checked_fingerprint, require_renderer
from lerobench.envs.template import stop_unless_keeping
from lerobench.errors import ConfigError, PolicyError, RunError
from lerobench.execution.base import ExecutionChoice, Executor, RunIO
from lerobench.execution.compute import budget_for
from lerobench.output.directory import OutputDir, check_writable
from lerobench.output.media import RunMedia
from lerobench.output.progress import Reporter, SilentReporter
from lerobench.output.sink import EpisodeSink, ResultBlocks, load_previous, write_identity
from lerobench.plan.planner import FORMATS, RunPlan, RunSettings, make_plan
from lerobench.plan.stopping import Ledger, NoStopping
from lerobench.plan.versus import BaselineRun
from lerobench.policies.base import Policy, PolicyContext, close_policy, policy_traits
from lerobench.policies.builtin import BUILTIN
from lerobench.policies.loading import expected_needs, load_policy, observation_needs, prepare_policy
from lerobench.policies.width import call_cores_for_run
from lerobench.suite.registry import get_backend
from lerobench.system import usable_cores

__all__ = ["FORMATS", "Evaluation", "RunSettings"]


class Evaluation:
    """One evaluation run; ``run()`` returns the final results dict (also written to disk)."""

    def __init__(self, settings: RunSettings, reporter: Reporter | None = None, policy: Any = None,
                 adapt: Callable[[PolicyContext], Any] | None = None):
        """Validate everything that can refuse the run, then claim the output directory.

        ``policy``: an in-memory policy object (``lerobench.evaluate``) instead of loading ``settings.policy``,
        which then only names it; it runs in this process and is never closed here (its owner closes it).
        ``adapt``: builds that object from the run's policy context instead (a LeRobot policy object's adapter
        needs the context), so the plan is made once.
        """
        self.s = settings
        self.in_memory = policy is not None or adapt is not None
        self.reporter = reporter or SilentReporter()
        plan = make_plan(settings)
        if adapt is not None:
            policy = adapt(plan.context())
        self.s = settings = plan.settings  # as planned: --versus has set the episode count
        # Everything that can refuse the run happens here, before progress is drawn or any env starts; the
        # output directory is made only once all of it passed (a failed launch leaves no empty directory).
        check_writable(settings.output)
        # The golden-state check before the scene's head start: on a fresh install it runs in a child process (LIBERO:
        # ~1.5 GB) that, beside the template's build, raised the first run's peak above every later run's (2.38 vs
        # 1.98 GB measured); after it, the cached result takes ~1 ms and the head start is not delayed.
        backend = get_backend(settings.suite.backend)
        simulator = checked_fingerprint(settings.suite.backend, backend.packages, settings.allow_sim_drift)
        if not self.in_memory:
            if (guess := expected_needs(settings.policy, plan.context())) is not None:
                plan.image_size_for(guess)  # a size its config.json declares and the run cannot render: refused now
            self._prewarm(plan)
        self.policy = (prepare_policy(policy, plan.context(), settings.policy) if self.in_memory
                       else load_policy(settings.policy, plan.context()))
        self.output: OutputDir | None = None
        try:
            # what the policy makes of the run (executed chunk length, traits) is part of its identity: known
            # before a --resume compares it; a --replan-steps conflict fails here, before any work
            facts = policy_config(self.policy, settings.replan_steps)
            needs = observation_needs(self.policy)
            facts["image_size"] = list(plan.image_size_for(needs))  # the size its cameras declare, or refused here
            if plan.video_camera in needs.cameras:  # the video's frames are the policy's images
                facts["video_size"] = facts["image_size"]
            check_horizon(int(plan.delay.steps), facts["replan_steps_executed"], needs.chunk_length, settings.policy)
            why = rendering_need(plan, needs.cameras)
            if why:  # before any worker starts: no GL means one line, not a FatalError halfway (fingerprint.py)
                require_renderer(simulator, why)
            self.plan: RunPlan = replace(plan, simulator=simulator, policy_facts=facts)
            self.recorded = self._load_versus()  # after the fingerprint: run A's simulator must be this one
            self.design, self.design_summary = self._design()
            self.fresh_resume = self.s.resume and not any((self.s.output / f).exists()
                                                          for f in (RESULTS_FILE, IDENTITY_FILE))
            """``--resume`` found no results.json (killed before the first was written, or no directory): starts."""
            self.output = OutputDir.claim(self.s.output, unique=self.s.unique_output)  # locked: one writer
            if self.output.path != self.s.output:  # a default name taken in the same second: the next free one
                self.s = replace(self.s, output=self.output.path)
                self.plan = replace(self.plan, settings=self.s)
            self.previous, repaired = load_previous(self.plan)
            write_identity(self.plan)
            self.output.mark()
        except BaseException:
            self._close_policy()
            self._release(failed=True)
            raise
        self.choice: ExecutionChoice | None = None
        self.notes: list[str] = [f"resume: {note}" for note in repaired]
        """Warnings about settings that have no effect, and what ``--resume`` repaired; shown by ``run``."""
        from lerobench.envs.template import unknown_interpreter_notice

        if (notice := unknown_interpreter_notice(settings.share_task)) is not None:
            self.notes.append(notice)
        if settings.device != "cpu" and settings.policy in BUILTIN:
            self.notes.append(f"warning: --device {settings.device} has no effect: the built-in policy "
                              f"{settings.policy!r} computes its actions with NumPy on the CPU")
        self._ran = False
        self.episodes_errored_at_any_trial = 0
        """Episodes (at any trial) that ended in an error, set by ``run``; results' ``n_errors`` counts trial 0 only."""

    def run(self) -> dict[str, Any]:
        """Evaluate every task; write results as they come; return the final results."""
        if self._ran:  # its policy is closed and its output directory now holds the run's episodes
            raise RunError("this Evaluation has already run; build a new Evaluation(settings) to run again "
                           "(with resume=True and the same output to continue that run)")
        self._ran = True
        failed = True
        try:
            results = self._run()
            failed = False
            return results
        finally:
            self._release(failed)

    @staticmethod
    def _prewarm(plan: RunPlan) -> None:
        """Start building the first task's scene while the policy loads, where the run will fork workers from it.

        Only for a policy that says what it reads before it is loaded (``expected_needs``); the env the run then
        makes uses the template if its spec is the same (``envs/vector.py``), so a wrong guess costs time only.
        """
        from lerobench.envs.vector import prewarm_template
        from lerobench.execution.auto import batched_choice
        from lerobench.execution.compute import budget_for
        from lerobench.system import usable_cores

        s = plan.settings
        needs = expected_needs(s.policy, plan.context())
        units = plan.work_units()
        if needs is None or not units or s.executor not in ("auto", "vector") or s.parallel_tasks > 1:
            return
        choice = batched_choice(plan, needs.cameras)
        if choice.executor != "vector":
            return  # one env in this process: no worker forks from a template
        threads = budget_for("vector", choice.batch_size, 0, False, usable_cores()).render_threads
        prewarm_template(plan.env_spec(units[0].task, needs, plan.video_camera), s.share_task, threads or 1)

    def _release(self, failed: bool) -> None:
        """Unlock the output directory; a failed run that made it and wrote nothing of value removes it."""
        stop_unless_keeping()
        output, self.output = getattr(self, "output", None), None
        if output is not None:
            output.release(failed)

    def _run(self) -> dict[str, Any]:
        from lerobench.execution.auto import choose

        for note in self.notes:
            self.reporter.message(note)
        plan, policy = self.plan, self.policy
        stopping = self._ledger() or NoStopping()
        calls = CallStats(control_fps=plan.control_fps)  # the driver's policy calls (workers keep their own)
        sink = EpisodeSink(plan, self.reporter, self.previous, ResultBlocks(overall=calls.summary,
                                                                            stopping=stopping.block))
        io = RunIO(sink, stopping, RunMedia(plan, sink.put_trajectory), calls)
        io.replay(self.previous)
        done = sink.done()
        todo = sum(len(u.episodes) for u in plan.work_units(done))
        try:
            choice = choose(plan, policy, observation_needs(policy).cameras, todo, in_memory=self.in_memory)
            if choice.parallel_tasks > 1 and not policy_traits(policy).copy_safe:
                self.reporter.message(f"policy {self.s.policy!r} declares copy_safe = False: running tasks "
                                      f"one at a time")
                choice = replace(choice, batch_size=choice.batch_size * choice.parallel_tasks, parallel_tasks=1)
            entry = EXECUTORS[choice.executor]
            budget = budget_for(choice.executor, choice.batch_size, choice.workers, entry.own_policy, usable_cores())
            choice = self.choice = replace(choice, compute=budget)
            self.reporter.message(choice.reason)
            if self.s.episode_timeout is not None and not (choice.executor == "vector" and choice.batch_size > 1):
                self.reporter.message("note: --episode-timeout needs vector-env worker processes (at least 2 envs "
                                      "per task); here the simulator runs in the process that steps it and cannot "
                                      "be timed out")
            executor = self._executor(choice)
            if entry.own_policy:
                self._close_policy()  # every worker builds its own copy; the driver's is not used
            sink.execution = {"executor_used": choice.executor, "workers_used": choice.in_flight,
                              "batch_size_used": 1 if entry.own_policy else choice.batch_size,
                              "parallel_tasks_used": choice.parallel_tasks,
                              "simulator_invariance": simulator_claim(plan), "compute": budget.record()}
            units = plan.work_units(done, size=self._unit_size(choice))
            sink.expect(units)
            sink.open()
            ok = False
            try:
                io.media.open()
                pending = {u.task.name for u in units}
                for task in plan.suite.tasks:  # finished before a --resume: shown as complete at once
                    if task.name not in pending and any(r.task == task.name for r in self.previous):
                        sink.task_started(task)
                        sink.task_finished(task)
                try:
                    with call_cores_for_run(budget.driver_call_cores):  # put back after the run
                        executor.run(plan, units, io)
                except PolicyError as exc:
                    sink.fail(exc)
                    raise
                ok = True
            finally:
                try:
                    io.media.close(ok)  # videos finished (or deleted) before the final results name them
                finally:
                    results = sink.close(ok)
                # an error ends its episode: one error line per episode (results' n_errors counts trial 0 only)
                self.episodes_errored_at_any_trial = sum(r.error is not None for r in sink.records)
            return results
        finally:
            self._close_policy()

    def _load_versus(self) -> BaselineRun | None:
        """Run A of ``--versus``: its identity checked; its episode count is this run's cap (lerobench.plan.versus)."""
        if self.s.versus is None:
            return None
        from lerobench.plan.versus import load_recorded

        recorded = load_recorded(self.s.versus, self.plan.config())
        if self.s.metric == "progress":
            recorded.progress()  # refused here, before B runs, when run A carries no progress
        return recorded

    def _design(self) -> tuple[Any, dict[str, Any] | None]:
        """``--effect``: the designed sequential test, planned on run A's success rate over the pairs to run.

        Run A's rate is known before any pair runs and does not depend on B, so planning on it leaves the
        design's type-I error exact (stats/design.py). Its exact operating characteristics are printed before
        the run and written to results.json; a cap too small for the power is refused.
        """
        recorded = self.recorded
        if recorded is None or self.s.effect is None:
            return None, None
        from lerobench.stats.planning import plan_design

        tasks = [t.name for t in self.plan.suite.tasks]
        episodes = self.plan.episodes_per_task
        if self.s.metric == "progress":
            return self._progress_design(recorded, tasks, episodes)
        outcomes = [recorded.outcomes[(task, i)] for task in tasks for i in range(episodes)]
        base = sum(outcomes) / len(outcomes)
        if not 0 <= base + self.s.effect <= 1:
            raise ConfigError(f"--effect {self.s.effect:g}: run A succeeded in {100 * base:.1f}% of the pairs to "
                              f"run, so rate(B) = {100 * (base + self.s.effect):.1f}% is impossible")
        design, summary = plan_design(base, self.s.effect, None, self.s.alpha, self.s.power, len(outcomes))
        if design is None:
            raise ConfigError(f"--effect {self.s.effect:g} at --power {self.s.power:g}: {summary['reason']} "
                              f"(run A: {len(tasks)} tasks x {episodes} episodes, {100 * base:.1f}% success; the "
                              f"design needs up to {summary.get('fixed_n')} x 1.5 pairs): record more episodes "
                              f"of A or plan a larger effect")
        return design, summary

    def _progress_design(self, recorded: Any, tasks: list[str], episodes: int) -> tuple[Any, dict[str, Any]]:
        """``--metric progress --effect``: the designed progress test, planned on run A's progress over the pairs.

        Like the success design, it reads run A only (known before any pair runs, independent of B); its type-I
        bound is Ville's whatever the plan, the plan sets the bets, the futility exit and the cap
        (stats/progress_design.py).
        """
        from lerobench.stats.progress_design import design_progress_test

        progress = recorded.progress()
        values = [progress[(task, i)] for task in tasks for i in range(episodes)]
        mean = sum(values) / len(values)
        effect = float(self.s.effect or 0.0)  # set: _design calls this only with --effect
        if not 0 <= mean + effect <= 1 or (effect > 0 and mean >= 1) or (effect < 0 and mean <= 0):
            raise ConfigError(f"--metric progress --effect {effect:g}: run A's mean progress over the pairs to run "
                              f"is {mean:.3f}, so a mean of {mean + effect:.3f} for B is impossible")
        design, summary = design_progress_test(values, effect, self.s.alpha, self.s.power, len(values))
        if design is None:
            raise ConfigError(f"--metric progress --effect {effect:g} at --power {self.s.power:g}: "
                              f"{summary['reason']} (run A: {len(tasks)} tasks x {episodes} episodes, mean progress "
                              f"{mean:.3f}): record more episodes of A or plan a larger effect")
        return design, summary

    def _ledger(self) -> Ledger | None:
        """The ``--until`` rule's index-order ledger, or None for a fixed-n run."""
        until = self.plan.until
        if until is None:
            return None
        recorded = self.recorded
        return Ledger(until, [t.name for t in self.plan.suite.tasks], self.plan.episodes_per_task, self.s.alpha,
                      self.s.margin, recorded.outcomes if recorded else None,
                      str(recorded.path) if recorded else None, self.design, self.design_summary,
                      recorded.records if recorded else None, self.s.metric,
                      recorded.progress() if recorded and self.s.metric == "progress" else None)

    def _unit_size(self, choice: ExecutionChoice) -> int | None:
        """Episodes per work unit: one for episode workers, a batch per round when tasks are interleaved.

        Ray also gets one-episode units under a stopping rule, so a decided task stops at its next episode;
        otherwise the vector executor's unit is a whole task.
        """
        if choice.executor == "processes" or (choice.executor == "ray" and self.plan.until is not None):
            return 1
        return choice.in_flight if self.plan.interleaved else None

    def _executor(self, choice: ExecutionChoice) -> Executor:
        return EXECUTORS[choice.executor].load().create(self.plan, choice, self.policy)

    def _close_policy(self) -> None:
        policy, self.policy = self.policy, None
        if not self.in_memory:  # an in-memory policy belongs to its caller
            close_policy(policy)


def rendering_need(plan: RunPlan, cameras: tuple[str, ...]) -> str | None:
    """What in this run renders images (for ``require_renderer``'s message), or None: nothing does."""
    s = plan.settings
    if s.videos > 0 and s.suite.video_camera is not None:
        return f"--videos {s.videos}"
    if cameras:
        return f"the policy reads camera{'s' * (len(cameras) > 1)} {', '.join(cameras)}"
    return None


def simulator_claim(plan: RunPlan) -> dict[str, Any]:
    """The simulator side of the run's invariance claim, beside ``batch_invariant`` (the policy's numerics).

    ``resets``: what ``lerobench check-resets`` found for this suite's tasks on this simulator stack (``verified``,
    ``failed`` or ``unchecked``); ``observation_digests``: every record carries one, but one run cannot check
    them, so ``unchecked`` here; ``compare`` / ``merge`` check them against another run.
    """
    from lerobench.envs.resets import reset_claim

    suite = plan.settings.suite
    return {"resets": reset_claim(suite.name, suite.backend, [t.name for t in plan.suite.tasks]),
            "observation_digests": {"status": "unchecked", "reason": "recorded per episode (obs_digest); checked "
                                    "against another run by lerobench compare"}}


PRIVILEGED_KIND = "privileged expert"
"""``config.policy_kind`` of a policy that reads the simulator's state (``ObservationNeeds.privileged``)."""


def policy_config(policy: Policy, replan_steps: int) -> dict[str, Any]:
    """What the policy makes of the run, for ``results.json`` ``config``: the executed chunk length and its traits.

    ``replan_steps_executed`` is what runs (a policy's own chunking wins over the CLI default of 1);
    ``batch_invariant`` starts ``unchecked``: the sink replaces it with what the run's own check found
    (``lerobench.policies.invariance``); the policy's declaration is ``batch_invariance.declared``.
    ``numerics`` and ``call_width`` (torch policies) fix a row's bits; None for other policies.
    ``policy_kind`` says ``privileged expert`` for a policy that reads the simulator's state (no robot could):
    its numbers measure the environment side, never a learned policy. ``committed_prefix`` says how a policy
    uses the actions committed under ``--delay-steps`` when it does (LeRobot's RTC prefix); None otherwise.
    """
    from lerobench.policies.base import policy_numerics
    from lerobench.policies.invariance import summarize_checks

    needs, traits = observation_needs(policy), policy_traits(policy)
    numerics = policy_numerics(policy)
    invariance = {**summarize_checks([]), "declared": traits.batch_invariant,
                  "checkable": traits.checkable}
    return {"replan_steps_executed": needs.executed_steps(replan_steps), "every_frame": needs.every_frame,
            "policy_kind": PRIVILEGED_KIND if needs.privileged else "policy", "privileged_state": needs.privileged,
            "batch_invariant": invariance["status"], "batch_invariance": invariance,
            "stochastic_policy": traits.stochastic, "numerics": numerics,
            "committed_prefix": getattr(policy, "committed_prefix", None),
            "call_width": numerics.get("call_width") if numerics else None}
