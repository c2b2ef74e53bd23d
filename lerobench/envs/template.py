"""One task's scene built once, in a template process its workers fork from (issue 30).

Without it every worker of a task builds the whole task from scratch: imports, BDDL parsing, robosuite's
objects, the compiled MuJoCo model (LIBERO: 271 MB, 189 MB of it textures) and a GL context, ~1.5 GB PSS per
LIBERO worker with two 256x256 cameras. Here a per-task *template* process, started like multiprocessing's
forkserver (a fresh interpreter, so no GL context, torch threads or locks of the driver), imports the backend,
builds the task's simulator without any GL (``Backend.make_template``), runs ``gc.freeze()`` (so the
collector's writes to object headers do not copy the shared pages) and then serves fork requests exactly as
a forkserver does (``multiprocessing.forkserver.main``). Each worker forked from it shares the model, the
textures, the meshes and robosuite's objects copy-on-write and makes only what is its own: its data as it
steps, its controller state and its GL context (``Simulator.from_template`` runs in the worker). Where the
workers render with one thread each, LIBERO's template also makes the GL context and they all draw with it
(``shares_renderer``): Mesa's copies of the textures and its compiled shaders are then shared too.

The vector env's pipes and shared observation memory reach the workers through the forkserver's own
file-descriptor passing, so the vector env's workers (``envs/workers.py``) start on the ``TemplateContext`` as on
any multiprocessing context.

Sharing is the run setting ``share_task`` (``--share-task/--no-share-task``, default on); the environment variable
``LEROBENCH_SHARE_TASK=0|1`` overrides it (for a CI job or a bisect that cannot change the command line).

Interpreter internals: the template process speaks multiprocessing's forkserver protocol, so it uses private
parts of ``multiprocessing`` (``forkserver.main``, ``util.spawnv_passfds``, ``popen_forkserver.Popen``'s
launch). They are confined to this module (``serve``, ``TemplateServer``, ``TemplatePopen._launch``), which
``vector.py`` enters only when ``sharing`` says yes, i.e. on interpreters whose forkserver protocol is known
(``KNOWN_PYTHONS``: 3.10 to 3.13 have the same one; 3.14 added an authentication handshake). On any other
interpreter ``sharing`` answers False with a one-line notice and each worker builds its own task, as
before: same episodes, more memory.
"""

from __future__ import annotations

import atexit
import base64
import gc
import io
import os
import pickle
import signal
import socket
import sys
import threading
from dataclasses import replace
from multiprocessing import connection, popen_forkserver, process, resource_tracker, spawn, util
from multiprocessing import forkserver as mp_forkserver
from multiprocessing.context import BaseContext, reduction, set_spawning_popen
from typing import Any

from lerobench import environment
from lerobench.envs.base import EnvSpec

ENV_OVERRIDE = environment.SHARE_TASK
"""``0`` or ``1`` overrides the run's ``share_task`` setting (docs/scaling.md)."""

KNOWN_PYTHONS = ((3, 10), (3, 11), (3, 12), (3, 13))
"""Interpreters whose multiprocessing forkserver internals ``_Internals`` was written against (read in their
sources; CI runs 3.11). Anything else: workers build their own task."""

_template: tuple[EnvSpec, Any] | None = None
"""In a template process and its workers: (the spec it was built for, slot 0; the built template)."""


def internals_known(version: tuple[int, int] | None = None) -> bool:
    """Whether this interpreter's (or ``version``'s) forkserver protocol is one the template process speaks."""
    return (version or (sys.version_info[0], sys.version_info[1])) in KNOWN_PYTHONS


def sharing(requested: bool) -> bool:
    """Whether a task's vector workers fork from its template.

    ``requested`` is the run's ``share_task`` setting; ``LEROBENCH_SHARE_TASK=0|1`` overrides it; an interpreter
    whose internals are not known never shares (``unknown_interpreter_notice`` says so).
    """
    override = environment.share_task_override()
    wanted = requested if override is None else override
    return wanted and internals_known()


def unknown_interpreter_notice(requested: bool) -> str | None:
    """The one line a run shows when it would share but this interpreter's internals are not known."""
    if internals_known() or not (requested or environment.share_task_override()):
        return None
    v = sys.version_info
    return (f"notice: Python {v[0]}.{v[1]} is not one whose multiprocessing internals the task template knows "
            f"({', '.join(f'{a}.{b}' for a, b in KNOWN_PYTHONS)}): each worker builds its own task (same "
            f"episodes, more memory)")


GPU_DEVICES = ("/dev/dri", "/dev/nvidiactl", "/dev/nvidia0")
"""Device nodes of a GPU: where one exists EGL may pick its driver, whose state cannot cross a fork."""


def software_gl_only() -> bool:
    """Whether GL here can only be Mesa's software renderer, decided before any GL is initialised.

    ``MUJOCO_GL`` egl or osmesa (not an X11 connection, which processes cannot share) and no GPU device node.
    """
    backend = (environment.get(environment.MUJOCO_GL) or "").strip().lower()
    return backend in ("egl", "osmesa") and not any(os.path.exists(node) for node in GPU_DEVICES)


def shares_renderer(render_threads: int | None) -> bool:
    """Whether a template makes the GL context its workers render with, instead of one per worker.

    Why: a LIBERO worker's own context holds ~0.6 GB (Mesa's copies of the model's textures, its compiled
    shaders); made once in the template, the workers share those pages copy-on-write and write only their
    framebuffers. Only where each worker renders with one thread: the shared context rasterises in the calling
    thread (``LP_NUM_THREADS=0``), since a forked worker has none of the template's other threads. Only where
    no GPU can be in use (``software_gl_only``): a GPU driver's state cannot cross a fork, and it would be loaded
    in the template before anything could tell. The template further checks that the context is a software one
    (``LiberoSimulator.share_renderer``). ``LEROBENCH_SHARE_RENDERER=0`` turns it off. Same images either way
    (compared in tests/test_task_template.py).
    """
    return render_threads == 1 and environment.share_renderer_allowed() and software_gl_only()


def _key(spec: EnvSpec) -> EnvSpec:
    return replace(spec, slot=0)


def take(spec: EnvSpec, backend: Any) -> Any | None:
    """In a worker: the simulator made from the template it was forked from, if it was built for ``spec``.

    Taken once (a second env in the same process builds its own).
    """
    global _template
    if _template is None or _template[0] != _key(spec):
        return None
    built, _template = _template[1], None
    return backend.from_template(built, spec)


class FromTemplate:
    """A backend whose ``make_simulator`` first takes the template's simulator (in a worker forked from one)."""

    def __init__(self, backend: Any):
        self._backend = backend

    def __getattr__(self, name: str) -> Any:
        if name == "_backend":  # not set yet (a copy being built): no recursion
            raise AttributeError(name)
        return getattr(self._backend, name)

    def make_simulator(self, spec: EnvSpec) -> Any:
        """The template's simulator for ``spec`` if this process was forked from one, else a new one."""
        built = take(spec, self._backend)
        return built if built is not None else self._backend.make_simulator(spec)


def serve(listener_fd: int, alive_r: int, blob: str, preload: list[str], **kwargs: Any) -> None:
    """The template process: import, build the task (its GL context only where shared), freeze, then fork workers."""
    global _template
    import sys

    # Exec keeps the signal mask of the thread that started this process (a pool thread, one a library made with
    # signals blocked: SIGALRM was seen blocked here). Workers fork from here and inherit it; a worker holding
    # SIGTERM could never be terminated, and closing its vector env would wait for it forever.
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    if kwargs.get("sys_path") is not None:  # the driver's (a backend module it found on a path it added)
        sys.path[:] = kwargs["sys_path"]
    built = None
    try:
        for name in preload:
            __import__(name)
        spec, share_renderer = pickle.loads(base64.b64decode(blob))
        from lerobench.envs.compile_memory import no_asset_cache
        from lerobench.suite.registry import get_backend

        backend = get_backend(spec.backend)
        if "mujoco" in backend.packages:  # one compile in a fresh interpreter: MuJoCo's asset cache only holds memory
            import mujoco  # noqa: F401 - before the backend's first compile, which the cache must not have seen

            no_asset_cache()
        built = backend.make_template(spec, share_renderer)
    except Exception:  # noqa: BLE001 - each worker then builds its own, and reports the error where it always did
        built = None
    if built is not None:
        _template = (_key(spec), built)
    gc.collect()
    gc.freeze()
    mp_forkserver.main(listener_fd, alive_r, [], **kwargs)


class TemplateServer(mp_forkserver.ForkServer):
    """A forkserver whose server process first builds one task's template (``serve``)."""

    def __init__(self, spec: EnvSpec, preload: list[str], share_renderer: bool):
        super().__init__()
        self._spec = _key(spec)
        self._preload = preload
        self._share_renderer = share_renderer

    def ensure_running(self) -> None:
        """Start the template process (once); same protocol as ``ForkServer.ensure_running``."""
        if not internals_known():  # ``sharing`` said no: never reached; a clear error if a caller skipped it
            raise RuntimeError(unknown_interpreter_notice(True) or "unknown interpreter")
        with self._lock:
            resource_tracker.ensure_running()
            if self._forkserver_pid is not None:
                return
            blob = base64.b64encode(pickle.dumps((self._spec, self._share_renderer))).decode()
            data = spawn.get_preparation_data("ignore")
            data = {x: y for x, y in data.items() if x in ("main_path", "sys_path")}
            data["main_path"] = None  # never re-import the driver's __main__ in the template
            cmd = (f"from lerobench.envs.template import serve; "
                   f"serve(%d, %d, {blob!r}, {self._preload!r}, **{data!r})")
            with socket.socket(socket.AF_UNIX) as listener:
                address = connection.arbitrary_address("AF_UNIX")
                listener.bind(address)
                if not util.is_abstract_socket_namespace(address):
                    os.chmod(address, 0o600)
                listener.listen()
                alive_r, alive_w = os.pipe()
                try:
                    exe = spawn.get_executable()
                    args = [exe, *util._args_from_interpreter_flags(), "-c",
                            cmd % (listener.fileno(), alive_r)]
                    pid = util.spawnv_passfds(exe, args, [listener.fileno(), alive_r])
                except BaseException:
                    os.close(alive_w)
                    raise
                finally:
                    os.close(alive_r)
                self._forkserver_address = address
                self._forkserver_alive_fd = alive_w
                self._forkserver_pid = pid

    def alive(self) -> bool:
        """Whether the template process is still running (a kept one may have been killed meanwhile)."""
        pid = self._forkserver_pid
        if pid is None:
            return False
        try:
            return os.waitpid(pid, os.WNOHANG) == (0, 0)
        except ChildProcessError:
            return False

    def stop(self) -> None:
        """End the template process (its workers are closed already; any left keep running until closed)."""
        with self._lock:
            pid, self._forkserver_pid = self._forkserver_pid, None
            if pid is None:
                return
            os.close(self._forkserver_alive_fd)
            self._forkserver_alive_fd = None
            try:
                os.kill(pid, signal.SIGTERM)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            if not util.is_abstract_socket_namespace(self._forkserver_address):
                try:
                    os.unlink(self._forkserver_address)
                except OSError:
                    pass
            self._forkserver_address = None


_servers: dict[str, TemplateServer] = {}
_servers_lock = threading.Lock()

_kept: tuple[Any, TemplateContext] | None = None
"""The last task's template, kept for the next run in this process while ``keeping`` (at most one)."""
_keeping = 0
"""Open ``keeping()`` blocks: ``lerobench.evaluate`` keeps a template for the next call, the CLI does not."""
counts = {"started": 0, "reused": 0}
"""Templates this process started, and lookups that found one kept or prewarmed (read by tests and benchmarks)."""


IGNORED_VARIABLES = ("TORCHINDUCTOR_", "HF_", environment.CUBLAS_WORKSPACE, "TOKENIZERS_")
"""Prefixes of environment variables a kept template may differ in: the policy side sets them while it loads
(torch's inductor its cache directory, the LeRobot adapter ``HF_HUB_OFFLINE``, the numerics cuBLAS's workspace),
and no simulator reads them."""


def _reuse_key(spec: EnvSpec, preload: list[str], share_renderer: bool) -> Any:
    """What a template's build and its workers depend on: the spec, the imports, the environment, the path."""
    environ = sorted((k, v) for k, v in environment.snapshot().items() if not k.startswith(IGNORED_VARIABLES))
    return (pickle.dumps(_key(spec)), tuple(preload), tuple(environ), tuple(sys.path), share_renderer)


def context_for(spec: EnvSpec, preload: list[str], share_renderer: bool = False) -> TemplateContext:
    """The kept template when it was built for the same spec in the same environment, else a new context.

    Why: a training loop evaluating every few thousand steps would otherwise rebuild the same scene each time
    (LIBERO: 4-6 s). Workers fork from a template that never steps, so a kept one gives what a new one gives.
    """
    global _kept
    key = _reuse_key(spec, preload, share_renderer)
    with _servers_lock:
        kept, _kept = _kept, None
    if kept is not None:
        if kept[0] == key and kept[1].server.alive():
            counts["reused"] += 1
            return kept[1]
        kept[1].close()
    ctx = TemplateContext(spec, preload, share_renderer)
    ctx.reuse_key = key
    counts["started"] += 1
    return ctx


def _keep(ctx: TemplateContext) -> None:
    """Make ``ctx`` the kept template (the one ``context_for`` looks at), stopping the one kept before."""
    global _kept
    with _servers_lock:
        old, _kept = _kept, (ctx.reuse_key, ctx)
    if old is not None and old[1] is not ctx:
        old[1].close()


def release(ctx: TemplateContext) -> None:
    """A vector env is done with ``ctx``: keep it for the next run (inside ``keeping``), else stop it."""
    if _keeping:
        _keep(ctx)
    else:
        ctx.close()


def prewarm(spec: EnvSpec, preload: list[str], share_renderer: bool = False) -> None:
    """Start building ``spec``'s template now, in its own process, while this one goes on (loading the policy).

    The run's ``context_for`` then finds it kept when its spec turned out the same; any other spec stops it.
    """
    ctx = context_for(spec, preload, share_renderer)
    ctx.server.ensure_running()
    _keep(ctx)


def stop_unless_keeping() -> None:
    """At a run's end outside ``keeping``: stop a template that was started for it and never used."""
    if not _keeping:
        stop_kept()


def stop_kept() -> bool:
    """Stop the kept template process, if any (``lerobench.release_simulators``); whether one was running."""
    global _kept
    with _servers_lock:
        kept, _kept = _kept, None
    if kept is not None:
        kept[1].close()
    return kept is not None


class keeping:  # noqa: N801 - used as a context manager, like contextlib's
    """Within this block a finished task's template is kept for the next run in this process."""

    def __enter__(self) -> None:
        global _keeping
        _keeping += 1

    def __exit__(self, *exc: Any) -> None:
        global _keeping
        _keeping -= 1


atexit.register(stop_kept)


class TemplatePopen(popen_forkserver.Popen):
    """``popen_forkserver.Popen`` that asks the process's template server instead of the global forkserver."""

    def _launch(self, process_obj: Any) -> None:
        server = _servers[process_obj._template_key]
        prep_data = spawn.get_preparation_data(process_obj._name)
        prep_data.pop("init_main_from_path", None)  # the template never imports the driver's __main__
        prep_data.pop("init_main_from_name", None)
        buf = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            set_spawning_popen(None)
        self.sentinel, w = server.connect_to_new_process(self._fds)
        _parent_w = os.dup(w)
        self.finalizer = util.Finalize(self, util.close_fds, (_parent_w, self.sentinel))
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = mp_forkserver.read_signed(self.sentinel)


class TemplateProcess(process.BaseProcess):
    """A worker forked from a task's template process."""

    _start_method = "forkserver"
    _template_key = ""

    @staticmethod
    def _Popen(process_obj: Any) -> Any:  # noqa: N802 - multiprocessing's name
        return TemplatePopen(process_obj)


class TemplateContext(BaseContext):
    """A multiprocessing context whose processes fork from one task's template (pipes, arrays as forkserver's)."""

    _name = "forkserver"

    reuse_key: Any = None
    """What it was built for (``context_for``)."""

    def __init__(self, spec: EnvSpec, preload: list[str], share_renderer: bool = False):
        self.key = f"lerobench-template-{id(self)}"
        self.server = TemplateServer(spec, preload, share_renderer)
        with _servers_lock:
            _servers[self.key] = self.server

    def Process(self, *args: Any, **kwargs: Any) -> TemplateProcess:  # noqa: N802 - multiprocessing's name
        """A process that forks from this context's template."""
        proc = TemplateProcess(*args, **kwargs)
        proc._template_key = self.key
        return proc

    def get_context(self, method: str | None = None) -> BaseContext:
        """This context (``method`` None) or a standard one."""
        return self if method is None else super().get_context(method)

    def get_start_method(self, allow_none: bool = False) -> str:
        """'forkserver': pipes, locks and arrays are passed to workers as to forkserver's."""
        return self._name

    def close(self) -> None:
        """Stop the template process."""
        self.server.stop()
        with _servers_lock:
            _servers.pop(self.key, None)
