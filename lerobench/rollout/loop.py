"""Runs one task's episodes on one vector env. No file I/O, no printing: results go to callbacks.

Shape: ``Rollout.run`` resets every slot, then repeats a short ``_tick`` (land resets, take answers, send
calls, step) until every slot is idle. Each slot is in one named state (``lerobench.rollout.slots.SlotState``:
IDLE, RESETTING, DRY, WAITING, READY) and every move between states is checked, so a slot stepped while
resetting or sent twice raises at once. ``EpisodeBook`` (``lerobench.rollout.episode_book``) keeps which episode and
trial each slot runs and reports records; ``Schedule`` decides when to call and which rows to step;
``PolicyCaller`` (``lerobench.rollout.inference``) runs the calls. The vector env is a ``RolloutEnv``
(``lerobench.envs.protocols``); ``tests/fake_env.py`` is a scripted one for testing all this without MuJoCo.

Slots of the vector env take episodes from an ``EpisodeSource`` (by default the task's episodes in index
order); when an episode ends its slot is reset to the next one, in the background (``venv.reset_one``: a
worker resets its env while the others keep stepping; the slot is held until its first observation
lands). The very first reset of all slots is one blocking call (it builds the simulators). With
``trials`` > 1 an episode is that
many attempts at the same start on the same slot, in order: when a trial ends and trials remain, the
slot is reset to the same episode's start (the policy is not reset; lerobench's pending actions are
dropped). An episode's trial records are reported together once the episode is over, so a consumer only
ever sees whole episodes.

Episode outcomes cannot depend on batch size, finish order or call timing because each episode's
start state and seed are pure functions of (run seed, task, episode), a policy sees only the rows it
acts on, and built-in policies key their randomness on (episode seed, trial, call index).

Each env keeps its own queue of actions from the policy's last chunk. The policy reads an env's
observation only when that queue runs dry, so every step tells its env whether the next observation
will be read (``env_action``); envs render the policy's cameras only then (see ``LazyTaskEnv``).

Continuous batching (the policy asked only for dry rows, calls beside the stepping, envs out of phase where that
pays) is explained once, in docs/policies.md ("Continuous batching"); ``Schedule`` below holds its decisions.
"""
from __future__ import annotations

import multiprocessing
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait
from typing import Any

import numpy as np

from lerobench.core.call_stats import CallStats
from lerobench.core.delay import measured_steps
from lerobench.core.records import EpisodeRecord
from lerobench.core.task_run import ScheduleRules, TaskRun
from lerobench.envs.base import NO_EPISODE, READ, READ_ALWAYS, UNREAD, env_action
from lerobench.envs.protocols import RolloutEnv
from lerobench.errors import STOP_REQUESTED, PolicyError
from lerobench.output.trajectories import NULL_TRAJECTORIES, Trajectories
from lerobench.policies.actions import ActionError, action_chunk
from lerobench.policies.base import Policy, policy_traits
from lerobench.rollout.deadline import CallDeadline
from lerobench.rollout.delay import chunk_too_short, committed_fields
from lerobench.rollout.episode_book import EpisodeBook, NoVideos, Recording, VideoCapture
from lerobench.rollout.inference import (
    Average,
    CallOverdue,
    EpisodeQueue,
    EpisodeSource,
    PolicyCaller,
    should_call,
    worth_spreading,
)
from lerobench.rollout.slots import Slots, SlotState

__all__ = ["STOP_GRACE_S", "Cancelled", "NoVideos", "VideoCapture", "Recording", "Rollout",
           "Schedule", "TaskRun", "WorkerFailure", "run_dry_first", "run_episodes", "settle"]

STOP_GRACE_S = 1.0
"""How long a worker failure seen after Ctrl-C/SIGTERM (``STOP_REQUESTED``) waits for the driver's stop to land."""


IDLE, RESETTING, DRY, WAITING, READY, COASTING = (SlotState.IDLE, SlotState.RESETTING, SlotState.DRY,
                                                  SlotState.WAITING, SlotState.READY, SlotState.COASTING)


class Cancelled(Exception):
    """Another task thread failed or the run was interrupted: stop stepping, keep what finished."""


class WorkerFailure(Exception):
    """A simulator worker died or hung; ``in_flight`` episodes were lost and must be recorded as errors."""

    def __init__(self, message: str, hung: bool = False):
        super().__init__(message)
        self.in_flight: list[int] = []
        self.hung = hung


def run_episodes(
    venv: RolloutEnv,
    policy: Policy,
    run: TaskRun,
    episodes: Sequence[int] | EpisodeSource,
    on_episode: Callable[[EpisodeRecord], None],
    on_steps: Callable[[int], None] = lambda n: None,
    recorder: VideoCapture | None = None,
    trajectories: Trajectories = NULL_TRAJECTORIES,
    stats: CallStats | None = None,
) -> None:
    """Run ``episodes`` of ``run.task`` on ``venv`` until each is recorded through ``on_episode``.

    ``episodes`` is a list (run in order) or an ``EpisodeSource`` asked for each slot's next episode.
    ``stats`` counts the policy calls. Raises ``PolicyError`` for an invalid action (naming suite, task and
    episode) and ``WorkerFailure`` if the vector env breaks; episodes finished before either are reported.
    """
    source = episodes if isinstance(episodes, EpisodeSource) else EpisodeQueue(episodes, run.wants)
    Rollout(venv, policy, run, source, on_episode, on_steps=on_steps, recorder=recorder,
            trajectories=trajectories, stats=stats).run()


class Schedule:
    """When dry rows go to the policy and which ready rows step; owns the step timings it decides from.

    The rules are pure functions, ``should_call``, ``worth_spreading`` and ``run_dry_first`` unless the task run
    passes others (``ScheduleRules``: a benchmark's lockstep baseline, a test forcing envs out of phase). A call's
    cost is the caller's (``PolicyCaller.call_s``, measured where the call runs); a step's cost is measured here.
    """

    def __init__(self, caller: PolicyCaller, width: int, replan_steps: int,
                 rules: ScheduleRules = ScheduleRules()):
        self.caller, self.width, self.replan_steps = caller, width, replan_steps
        self.should_call = rules.should_call or should_call
        self.worth_spreading = rules.worth_spreading or worth_spreading
        self.run_dry_first = rules.run_dry_first
        self.step_s = Average()
        """Time of one step of the rows stepped (whatever their number)."""
        self.wave_s = Average()
        """Time of one step per ``width`` rows stepped (a wave): what stepping every env costs per wave."""

    def record_step(self, took: float, stepped: int) -> None:
        """One step of ``stepped`` rows took ``took`` seconds."""
        self.step_s.add(took)
        self.wave_s.add(took / -(-stepped // self.width))

    def spread(self, slots: Slots) -> bool:
        """Run envs out of phase now (``worth_spreading``, for overlapping calls only)."""
        return self.run_dry_first and self.caller.concurrency > 1 and self.worth_spreading(
            self.caller.call_s.value, self.wave_s.value, -(-slots.running() // self.width), self.replan_steps)

    def rows_to_step(self, ready: np.ndarray, queues: Sequence[deque[np.ndarray]], spread: bool) -> np.ndarray:
        """The ready rows to step: all, or when spreading only the ``width`` nearest to running dry."""
        return run_dry_first(ready, queues, self.width) if spread and ready.sum() > self.width else ready

    def call_limit(self, spread: bool) -> int:
        """Calls that may be in flight: one, or the policy's ``concurrent_calls`` when spreading."""
        return self.caller.concurrency if spread else 1

    def send_now(self, steps_to_next_dry: int | None, waited_s: float, spread: bool) -> bool:
        """Send the dry rows now, or wait for more to run dry (``should_call``); spreading sends at once."""
        return spread or self.should_call(steps_to_next_dry, self.step_s.value, self.caller.budget_s, waited_s)


class Rollout:
    """One task's episodes on one vector env: a loop of ``_tick``s over the slots' state machine (``Slots``).

    Each tick lands finished resets, takes the policy's answers, sends dry rows to the policy and steps
    the ready rows (or waits for an answer or a reset when none can step). ``EpisodeBook`` keeps the
    episodes' facts and reports their records; ``Schedule`` decides when to call and what to step.
    A worker failure records the lost slots' episodes as errors and drops the others (rerun by the
    executor); any other exception drops the partial videos. Either way no call or reset outlives ``run``.
    """

    def __init__(self, venv: RolloutEnv, policy: Policy, run: TaskRun, source: EpisodeSource,
                 on_episode: Callable[[EpisodeRecord], None], *, on_steps: Callable[[int], None] = lambda n: None,
                 recorder: VideoCapture | None = None, trajectories: Trajectories = NULL_TRAJECTORIES,
                 stats: CallStats | None = None):
        n = venv.num_envs
        self.venv, self.task_run, self.on_steps = venv, run, on_steps
        self.caller = PolicyCaller(policy, stats, concurrency=policy_traits(policy).concurrent_calls,
                                   check=run.checked.first(policy), deadline=CallDeadline(run.policy_timeout_s),
                                   describe=self._call_place)
        self.delay = run.delay
        self.slots = Slots(n, due=self.delay.due)
        self.epoch = np.zeros(n, dtype=np.int64)
        """Bumped when a slot restarts: a call sent before (its episode ended while COASTING) is answered to no one."""
        self.flights: dict[int, tuple[np.ndarray, np.ndarray, float]] = {}
        """Per call in flight (keyed by its rows array's id): its rows' epochs, their committed counts, when sent."""
        self.reserve: list[np.ndarray] = [np.zeros((0, run.action_dim), np.float32) for _ in range(n)]
        """``--delay-steps measured``: each slot's actions of its chunk after the executed ones (committed next)."""
        self.book = EpisodeBook(n, run, source, on_episode, recorder or NoVideos(), trajectories,
                                self.caller.take_check)
        self.schedule = Schedule(self.caller, max(1, int(venv.concurrent_steps)), run.replan_steps, run.schedule)
        self.resets: dict[int, Future[Any]] = {}
        """Slots whose reset runs in the background (``venv.reset_one``): RESETTING until it lands."""
        self.ended = np.zeros(n, dtype=bool)
        """Slots whose trial ended at the last step: reset at the next tick."""
        self.actions = np.zeros((n, run.action_dim), dtype=np.float32)
        self.observe_all = run.every_frame or trajectories.enabled
        self.obs: dict[str, Any] = {}

    def run(self) -> None:
        """Reset every slot, then tick until every slot is idle (every episode reported)."""
        try:
            self._reset_all()
            while self._tick():
                pass
        except WorkerFailure as failure:
            self._lost_workers(failure)
            raise
        except CallOverdue as overdue:
            self._abandon()
            raise self._overdue(overdue) from None
        except BaseException:
            self._abandon()
            raise
        finally:
            self.caller.close()

    def _tick(self) -> bool:
        """One round: resets, answers, calls, one step (or a wait). False once every slot is idle."""
        if self.ended.any():
            ended, self.ended = self.ended, np.zeros_like(self.ended)
            self._restart(ended)
        if self.resets:
            self._land_resets()
        if self.slots.all_idle():
            return False
        if self.task_run.stop is not None and self.task_run.stop.is_set():
            raise Cancelled(f"task {self.task_run.task.name!r} cancelled")
        self.caller.collect(self._answer)
        ready, dry = self.slots.stepping(), self.slots.mask(DRY)
        now = time.perf_counter()
        self.slots.stamp_dry(now)
        spread = self.schedule.spread(self.slots)
        stepping = self.schedule.rows_to_step(ready, self.slots.queues, spread)
        if dry.any() and self.caller.slots_free(self.schedule.call_limit(spread)):
            if self._send(np.flatnonzero(dry), stepping, spread, now):
                return True
        if not stepping.any():
            self.caller.collect(self._answer, block=True, also=list(self.resets.values()))
            return True
        self._step(stepping)
        return True

    def _reset_all(self) -> None:
        """The first reset: every slot at once, blocking (it builds the simulators)."""
        everyone = np.arange(self.slots.n)
        self.slots.move(everyone, RESETTING, expect=IDLE)
        options = self.book.begin(everyone)
        self.obs, infos = _call(self.venv.reset, seed=self.book.seeds(), options=options)
        self.ended = self._landed(everyone, infos)

    def _restart(self, mask: np.ndarray) -> None:
        """Begin the next trial, episode or idleness of the slots in ``mask``; reset them in the background."""
        rows = np.flatnonzero(mask)
        self.slots.move(rows, RESETTING, expect=(DRY, READY, COASTING, WAITING) if self.delay.on else (DRY, READY))
        self.epoch[rows] += 1
        for i in rows.tolist():
            self.reserve[i] = self.reserve[i][:0]
        options = self.book.begin(rows)
        for i in rows.tolist():
            self.resets[i] = _call(self.venv.reset_one, i, self.book.seed_of(int(self.book.episode[i])), options)

    def _land_resets(self) -> None:
        """Take the finished background resets; a reset that ended its episode (an error) restarts the slot."""
        for i in [i for i, future in self.resets.items() if future.done()]:
            result = _call(self.resets.pop(i).result)
            self.obs, infos = self.venv.reset_landed(i, result)
            again = self._landed(np.array([i]), infos)
            if again.any():
                self._restart(again)

    def _landed(self, rows: np.ndarray, infos: dict[str, Any]) -> np.ndarray:
        """RESETTING ``rows`` got their first observation: DRY (or IDLE without an episode). Returns ended slots."""
        going = self.book.episode[rows] != NO_EPISODE
        self.slots.move(rows[going], DRY, expect=RESETTING)
        self.slots.move(rows[~going], IDLE, expect=RESETTING)
        return self.book.observe(self.obs, infos, rows)

    def _send(self, rows: np.ndarray, stepping: np.ndarray, spread: bool, now: float) -> bool:
        """Send the dry ``rows`` to the policy if it is time; True if the call ran inline (nothing could step)."""
        if not stepping.any() and not self.caller.busy:  # nothing can step meanwhile: no thread hop
            batch = self._sent(rows)
            self.caller.call(rows, batch, self._descriptions(rows), self._answer)
            return True
        next_dry = self.slots.next_dry(np.flatnonzero(stepping))
        if self.schedule.send_now(next_dry, self.slots.waited(rows, now), spread):
            batch = self._sent(rows)
            self.caller.submit(rows, batch, self._descriptions(rows))
        return False

    def _sent(self, rows: np.ndarray) -> dict[str, Any]:
        """The DRY ``rows`` go to the policy: WAITING, or COASTING with committed actions left. Returns their batch."""
        committed = np.array([len(self.slots.queues[i]) for i in rows.tolist()], dtype=np.int64)
        self.slots.move(rows[committed == 0], WAITING, expect=DRY)
        self.slots.move(rows[committed > 0], COASTING, expect=DRY)
        batch = self.book.batch(self.obs, rows)
        if self.delay.on:
            if self.delay.measured:  # the rest of the last chunk is what may run; how much of it, the latency says
                batch.update(committed_fields(self.reserve, rows, max(1, max(len(self.reserve[i]) for i in rows)),
                                              self.task_run.action_dim))
                batch["delay_steps"] = np.where(batch["delay_steps"] > 0, -1, 0)  # unknown until the call returns
            else:
                batch.update(committed_fields(self.slots.queues, rows, self.delay.steps, self.task_run.action_dim))
        self.flights[id(rows)] = (self.epoch[rows].copy(), committed, time.perf_counter())
        return batch

    def _answer(self, rows: np.ndarray, raw: Any, exc: BaseException | None) -> None:
        """A finished call: queue each row's chunk (``replan_steps`` actions of it), or raise ``PolicyError``."""
        run, first = self.task_run, int(self.book.episode[int(rows[0])])
        if exc is not None:
            raise PolicyError(run.where(first, f"policy raised {type(exc).__name__}: {exc}"),
                              failure={"type": type(exc).__name__, "message": str(exc), "task": run.task.name,
                                       "episode": first},
                              traceback_text="".join(traceback.format_exception(exc))) from exc
        epochs, start, sent = self.flights.pop(id(rows))
        try:
            chunk = action_chunk(raw, len(rows), run.action_dim)
        except ActionError as error:
            episode = first if error.row is None else int(self.book.episode[int(rows[error.row])])
            raise PolicyError(run.where(episode, str(error))) from error
        if not self.delay.on:
            self.slots.fill(rows, chunk, run.replan_steps)
            return
        live = self.epoch[rows] == epochs  # a row whose episode ended while COASTING: its answer goes to no one
        rows, chunk, start = rows[live], chunk[live], start[live]
        if self.delay.measured:
            start = self._commit_measured(rows, chunk, time.perf_counter() - sent)
        short = chunk_too_short(start, run.replan_steps, chunk.shape[1])
        if short is not None:
            raise PolicyError(run.where(int(self.book.episode[int(rows[short])]), (
                f"the policy returned chunks of {chunk.shape[1]} actions; --delay-steps {self.delay.label()} with "
                f"{run.replan_steps} executed per chunk needs {int(start[short]) + run.replan_steps}")))
        self.slots.fill(rows, chunk, run.replan_steps, start)
        if self.delay.measured:
            for k, i in enumerate(rows.tolist()):
                self.reserve[i] = chunk[k, int(start[k]) + run.replan_steps:]

    def _commit_measured(self, rows: np.ndarray, chunk: np.ndarray, latency_s: float) -> np.ndarray:
        """``measured``: the call covered ⌈latency × rate⌉ steps; queue that many committed actions. Returns starts.

        The committed actions are the rest of each row's previous chunk (its last one repeated if too few: the
        robot keeps its last command); a trial's first call has none (the env waited), so its chunk runs from 0.
        The new chunk runs from the action the delay reached (at most its last).
        """
        steps = measured_steps(latency_s, self.delay.control_fps)
        start = np.zeros(len(rows), dtype=np.int64)
        for k, i in enumerate(rows.tolist()):
            first_call = self.book.calls[i] == 1  # nothing was committed before it: the env waited
            d = 0 if first_call else min(steps, chunk.shape[1] - 1)
            if d:
                held = self.reserve[i] if len(self.reserve[i]) else self.actions[i][None]
                committed = np.concatenate([held, np.repeat(held[-1:], max(0, d - len(held)), axis=0)])[:d]
                self.slots.queues[i].extend(committed)
            start[k] = d
            self.book.note_delay(i, d)
        return start

    def _step(self, stepping: np.ndarray) -> None:
        """Step the ``stepping`` rows (one queued action each); the others are held."""
        rows = np.flatnonzero(stepping)
        dried = self.slots.pop(rows, self.actions)
        # the policy reads a row's next observation (READ: unless the step ends the episode; READ_ALWAYS: even then)
        observe = np.where(stepping, READ_ALWAYS, UNREAD) if self.observe_all else np.where(dried, READ, UNREAD)
        started = time.perf_counter()
        self.obs, rewards, _, _, infos = _call(self.venv.step_within, env_action(self.actions, observe, hold=~stepping),
                                               self.task_run.step_timeout_s, timeout=self.task_run.step_timeout_s)
        self.schedule.record_step(time.perf_counter() - started, len(rows))
        self.on_steps(len(rows))
        self.book.stepped(stepping, self.actions, rewards, infos)
        self.ended = self.book.observe(self.obs, infos, rows)

    def _call_place(self, rows: np.ndarray) -> str:
        """Which episodes a call is for, in words (the progress line's note on a waiting call)."""
        episodes = sorted({int(e) for e in self.book.episode[rows].tolist()})
        more = f" and {len(episodes) - 1} more" if len(episodes) > 1 else ""
        return f"task {self.task_run.task.name!r}, episode {episodes[0]}{more}"

    def _overdue(self, overdue: CallOverdue) -> PolicyError:
        """The run-ending error for a call past its deadline: it names the call; finished episodes are kept."""
        run, first = self.task_run, int(self.book.episode[int(overdue.rows[0])])
        message = f"{overdue}; the run stops, finished episodes are kept (--resume runs the rest)"
        return PolicyError(run.where(first, message),
                           failure={"type": "PolicyTimeout", "message": str(overdue), "task": run.task.name,
                                    "episode": first, "call": overdue.number, "waited_s": round(overdue.waited_s, 1),
                                    "deadline_s": overdue.limit_s},
                           traceback_text=(f"The policy call's thread, when its deadline passed:\n{overdue.stack}"
                                           if overdue.stack else None))

    def _descriptions(self, rows: np.ndarray) -> list[str]:
        return [self.task_run.task.description] * len(rows)

    def _lost_workers(self, failure: WorkerFailure) -> None:
        """Record the lost slots' episodes as errors; drop the bystanders' (the executor reruns them)."""
        self.caller.close()
        settle(self.resets)
        if STOP_REQUESTED.is_set():  # Ctrl-C / SIGTERM stopped the workers too: the driver's own stop (its
            time.sleep(STOP_GRACE_S)  # exception) lands here, before episodes are recorded as failures
        culprits = self.venv.failed_slots(self.book.running(), failure.hung)
        failure.in_flight = [int(self.book.episode[i]) for i in culprits]
        self.book.fail(culprits, f"worker failure: {failure}")
        self.book.drop_running()
        self.slots.drop_all()

    def _abandon(self) -> None:
        """Any other failure: wait out calls and resets, drop the partial videos."""
        self.caller.close()
        settle(self.resets)
        self.book.abort_recordings()
        self.slots.drop_all()


def settle(resets: dict[int, Future[Any]], timeout: float = 30.0) -> None:
    """Wait (bounded) for background resets still running, so none touches an env being closed."""
    if resets:
        wait(list(resets.values()), timeout=timeout)


def run_dry_first(ready: np.ndarray, queues: Sequence[deque[np.ndarray]], width: int) -> np.ndarray:
    """The ``width`` ready rows with the fewest queued actions (ties: lower slot), to step now; the rest wait.

    Why: stepping every ready row together keeps envs in phase, so they all run dry at once and nothing
    steps while their calls are in flight. Running a few envs' chunks out first sends them to the policy
    while the others still step, and the phases stay apart. A held env's simulated time stands still, so
    no outcome changes; only when calls may overlap is it worth it (one call at a time would serve
    the rows one by one).
    """
    rows = np.flatnonzero(ready)
    order = sorted(rows.tolist(), key=lambda i: (len(queues[i]), i))
    chosen = np.zeros_like(ready)
    chosen[order[:width]] = True
    return chosen


def _call(method: Callable[..., Any], *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
    """Call a vector env method (``lerobench.envs.vector``); turn a dead or hung worker into ``WorkerFailure``.

    ``timeout`` only names the limit in the message: ``step_within`` enforces it.
    """
    try:
        return method(*args, **kwargs)
    except (EOFError, BrokenPipeError, ConnectionResetError) as exc:
        raise WorkerFailure(f"a simulator worker died ({type(exc).__name__})") from exc
    except multiprocessing.TimeoutError as exc:
        raise WorkerFailure(f"a simulator step took longer than --episode-timeout {timeout} s",
                            hung=True) from exc

