"""``--policy lerobot:<dir>``: a LeRobot policy saved on disk, run with its own pre/post-processors.

The directory is what LeRobot's ``save_pretrained`` writes (lerobot 0.4.x): ``config.json`` and
``model.safetensors`` of the policy, plus ``policy_preprocessor.json`` / ``policy_postprocessor.json``
and their state files (normalization statistics, ...). Nothing is downloaded: ``HF_HUB_OFFLINE=1`` is
set before LeRobot is imported and the path must be a local directory.

Observation mapping (lerobench -> LeRobot keys), decided by the policy config's ``input_features``:

- ``state`` -> ``observation.state`` (float32 (B, D)). On Meta-World a 4-D ``observation.state`` gets
  ``state[:, :4]`` (LeRobot's Meta-World env exposes ``agent_pos = obs[:4]``); a 39-D one the full state.
- ``state`` -> ``observation.environment_state`` when its size matches the suite's state.
- ``images[cam]`` -> ``observation.images.<name>`` / ``observation.image`` (float32 (B, 3, H, W) in
  [0, 1]); see ``camera_for_feature`` for the names understood. Each camera is declared at the (H, W) of its
  feature's shape (``ObservationNeeds.image_sizes``): the run renders it at that size, except under a protocol
  picked with ``--protocol`` (lerobot-eval's LIBERO 360x360), which keeps its own size for the policies that take
  any (``_exact_image_sizes``) and refuses the others before the run (``RunPlan.image_size_for``).
- the task's language description -> ``task`` (a list of strings, one per env).

Episode boundaries and chunks. LeRobot policies keep one action queue for the whole batch; lerobench
restarts envs one at a time. So for the policies whose ``predict_action_chunk`` is stateless (ACT
without temporal ensembling, pi0, pi0.5, SmolVLA) this adapter returns the first ``n_action_steps``
actions of each predicted chunk, (B, n_action_steps, A), and declares ``replan_steps = n_action_steps``:
lerobench's own per-env queues (emptied at each env's episode start, refilled when they run dry)
execute them in order, which is exactly LeRobot's per-episode behaviour, and lerobench renders the
cameras only at the steps where a queue runs dry. A run that needs more actions per call (``--delay-steps``, or
``--replan-steps`` above ``n_action_steps``) gets the whole predicted chunk instead (``_horizon``,
docs/latency.md). Other policies (VQ-BeT, TD-MPC, ...) run through their own ``select_action`` at every step
(they keep an observation history, so they read every frame); ``policy.reset()`` is called whenever an env starts
an episode, so a new episode never inherits actions or observation history from the previous one, but
the envs of the batch still mid-episode lose their queue and history too (they re-plan early). With
``--batch-size 1`` the behaviour is exactly LeRobot's.

Diffusion (per-row history). A diffusion policy reads its last ``n_obs_steps`` observations at every step and
re-plans when its queue of ``n_action_steps`` runs dry. LeRobot keeps one history and one queue for the whole
batch; this adapter keeps them per row (keyed by ``row_ids``, emptied at the row's episode or trial start, as
LeRobot's ``populate_queues`` does for a fresh episode), sends only the rows whose queue ran dry to the model,
and draws each row's initial noise and every DDPM step's noise from the row's own random stream
(``row_seeds``). A row's actions are then those of a one-env LeRobot rollout with that noise, at any batch size.

ACT with temporal ensembling (per-row ensemblers). ``temporal_ensemble_coeff`` set (LeRobot's ALOHA ACT can run so,
with ``n_action_steps`` 1): the policy predicts a whole chunk at every step and averages, for the next step, every
chunk's prediction of it. LeRobot keeps one running average for the whole batch; this adapter keeps one
``ACTTemporalEnsembler`` per row (``row_ids``, dropped at the row's episode or trial start) and asks at every step
(``replan_steps`` None: the camera is read every step), so a row's actions are those of LeRobot's ``select_action``
on a one-env rollout, at any batch size (``_select_ensembled``).

Batch invariance and noise. Every model call has the same shape (``--call-width``, ``lerobench.policies.width``):
on the CPU one row by default (rows side by side on the call pool, one intra-op thread each; the
pre/post-processors run under a lock, their steps keep state in ``self``), else the rows padded to the call width.
Chunk mode (ACT, pi0, pi0.5, SmolVLA), diffusion and ACT's temporal ensembling are then batch-invariant, and
each run checks it on its first call (``results.json`` ``config.batch_invariant``): ACT is deterministic, and
pi0, pi0.5 and SmolVLA get their initial flow-matching noise from each row's own random stream (``row_noise``).
The remaining ``select_action`` mode (VQ-BeT, TD-MPC) is not: LeRobot keeps one queue and one noise draw for the
whole batch.

Trials (``--trials``). At a trial start (``observation["trial_start"]``) the env jumps back to the
episode's start: lerobench drops that env's pending chunk itself; policies run through their own
``select_action`` get ``reset()``, since their queues (pending actions, the last few observations) all
describe the previous attempt. LeRobot policies keep no other memory, so nothing else is lost; policies
with longer memory use lerobench's own interface and keep it across trials.
"""

from __future__ import annotations

import copy
import json
import threading
import warnings
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from lerobench.errors import ConfigError
from lerobench.policies.base import ObservationNeeds, PolicyContext, PolicyTraits, row_ids, row_noise, row_seeds
from lerobench.policies.batch import PolicyBatch
from lerobench.policies.lerobot_import import import_lerobot as _import_lerobot
from lerobench.policies.lerobot_rtc import RTC_PREFIX, PrefixMemory, check_committed, prefix_groups, rtc_enabled
from lerobench.policies.width import (
    PADDING_SLOT,
    CallKey,
    call_at_width,
    call_pool,
    pad_rows,
    resolve_call_width,
    take_rows,
)

PREFIX = "lerobot:"

# Policy types whose predict_action_chunk keeps no state between calls: per-env queues are exact.
_CHUNK_TYPES = ("act", "pi0", "pi05", "smolvla")
# Flow-matching types: they draw an initial noise tensor (B, chunk_size, max_action_dim) and accept it as
# predict_action_chunk(batch, noise=...): the adapter passes each row's own (``row_noise``).
_FLOW_TYPES = ("pi0", "pi05", "smolvla")
# Types run with per-row observation history and action queues (see "Diffusion (per-row history)").
_HISTORY_TYPES = ("diffusion",)
# Types that draw random numbers at inference (the flow types, and diffusion's DDPM/DDIM sampling).
_STOCHASTIC_TYPES = (*_FLOW_TYPES, "diffusion", "vqbet")




def make_lerobot_policy(spec: str, context: PolicyContext) -> LeRobotPolicy:
    """Build the adapter for ``lerobot:<dir>``."""
    path = Path(spec[len(PREFIX):]).expanduser()
    if not str(spec[len(PREFIX):]).strip():
        raise ConfigError("--policy lerobot:<dir> needs the directory of a saved LeRobot policy")
    if not path.is_dir() or not (path / "config.json").is_file():
        raise ConfigError(
            f"--policy {spec!r}: {path} is not a directory holding a saved LeRobot policy (config.json, "
            "model.safetensors); lerobench loads LeRobot policies from disk only, never from the hub")
    return LeRobotPolicy(path, context)


_kept: dict[str, tuple] = {}
"""The last policy loaded from disk, for the next load of the same files in this process (``_files_key``)."""


def _files_key(path: Path, device: str) -> tuple | None:
    """What a kept policy must match to be reused: the directory, its files' sizes and times, the device.

    A checkpoint written again into the same directory changes it; None if the directory can't be read.
    """
    try:
        stats = [(f.name, f.stat()) for f in path.iterdir() if f.is_file()]
        files = sorted((name, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) for name, st in stats)
        return (str(path.resolve()), tuple(files), device)
    except OSError:
        return None


def release_kept() -> bool:
    """Drop the kept policy (its weights are freed once no run holds them); True if one was kept."""
    return _kept.pop("loaded", None) is not None


def _saved_config(path: Path) -> dict[str, Any] | None:
    """A saved policy's ``config.json`` as plain JSON, LeRobot not imported (None if unreadable or not an object)."""
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def _saved_type(path: Path) -> str | None:
    """The ``type`` a saved policy's ``config.json`` names (None if unreadable: the config's own load says why)."""
    kind = (_saved_config(path) or {}).get("type")
    return kind if isinstance(kind, str) else None


def _fixed_delay(context: PolicyContext) -> int:
    """The run's ``--delay-steps`` in steps; 0 for none or ``measured`` (known only after each call)."""
    from lerobench.core.delay import MEASURED, parse_delay

    delay = parse_delay(context.delay_steps)
    return 0 if delay == MEASURED else int(delay)


def _newer_hint(exc: BaseException) -> str:
    """What to do when a config names fields the installed LeRobot does not know: it was saved by a newer one."""
    if "not valid for" not in str(exc):
        return ""
    from importlib.metadata import version

    return (f"; it was saved by a newer LeRobot than the installed {version('lerobot')}: evaluate it where that "
            "LeRobot is installed (LeRobot 0.5+ needs Python 3.12; docs/lerobot.md)")


def camera_for_feature(key: str, aliases: Mapping[str, str], cameras: tuple[str, ...]) -> str | None:
    """The lerobench camera feeding LeRobot image feature ``key``, or None if none fits.

    ``observation.images.<cam>`` with a lerobench camera name is that camera; the backend's ``camera_aliases``
    (LeRobot's simulator names: LIBERO's ``image`` = agentview, ``image2`` = wrist; Meta-World's ``image`` =
    corner2) are mapped; a single ``observation.image`` is the backend's main camera (its alias ``image``) or
    else the first.
    """
    if key == "observation.image":
        default = aliases.get("image")
        return default if default in cameras else (cameras[0] if cameras else None)
    if key.startswith("observation.images."):
        name = key[len("observation.images."):]
        if name in cameras:
            return name
        alias = aliases.get(name)
        return alias if alias in cameras else None
    return None


def _exact_image_sizes(kind: Any, setting: Any) -> bool:
    """Whether a policy of type ``kind`` fails on images of another size than its features declare.

    Diffusion and VQ-BeT size their spatial-softmax head from the declared shape unless they crop (``crop_shape``)
    or resize (``resize_shape``, diffusion) first: another size is a shape error at the first call (480x480 for a
    64x64 head: "shape '[-1, 32, 2]' is invalid for input of size 7200"). TD-MPC's image encoder ends in a linear
    layer sized the same way. ACT (2-D sine embeddings over any feature map), pi0, pi0.5 and SmolVLA (which resize
    with padding) take any size. ``setting(name)`` reads a config field (None when absent).
    """
    if kind == "tdmpc":
        return True
    return kind in ("diffusion", "vqbet") and setting("crop_shape") is None and setting("resize_shape") is None


def _image_sizes(shapes: Mapping[str, Any], cameras: Mapping[str, str]) -> dict[str, tuple[int, int]]:
    """Camera -> (height, width) of the (C, H, W) ``shapes`` of the image features ``cameras`` maps (key -> camera).

    Two features on one camera keep the first one's size (``RunPlan.image_size_for`` renders one size per camera).
    """
    sizes: dict[str, tuple[int, int]] = {}
    for key, camera in cameras.items():
        shape = tuple(int(x) for x in shapes[key])
        if len(shape) == 3:
            sizes.setdefault(camera, (shape[1], shape[2]))
    return sizes


def declared_needs(spec: str, context: PolicyContext) -> ObservationNeeds | None:
    """The cameras a saved LeRobot policy will read, from its ``config.json`` alone (LeRobot not imported).

    Why: importing LeRobot and loading the policy take seconds; the run builds the task's scene meanwhile. Only a
    guess for that head start: the loaded policy's own ``observation_needs`` decide the run. None when unsure.
    """
    path = Path(spec[len(PREFIX):]).expanduser()
    config = _saved_config(path)
    if config is None:
        return None
    try:
        features = config.get("input_features") or {}
        visual = {key: feature.get("shape") or () for key, feature in features.items()
                  if feature.get("type") == "VISUAL"}
        cameras = {key: camera_for_feature(key, context.camera_aliases, context.cameras) for key in visual}
        found = {key: camera for key, camera in cameras.items() if camera is not None}
        if len(found) < len(cameras):
            return None
        sizes = _image_sizes(visual, found)
    except (AttributeError, TypeError, ValueError):  # not the objects LeRobot writes
        return None
    return ObservationNeeds(cameras=tuple(dict.fromkeys(found.values())), image_sizes=sizes,
                            exact_image_sizes=_exact_image_sizes(config.get("type"), config.get))


class LeRobotPolicy:
    """A LeRobot ``PreTrainedPolicy`` behind lerobench's policy interface (see the module docstring)."""

    def __init__(self, path: Path, context: PolicyContext):
        from lerobench.policies.torch_policy import resolve_device

        lr = _import_lerobot(_saved_type(path))

        self.path = path
        self.context = context
        device = resolve_device(context.device)
        key = _files_key(path, device)
        kept = _kept.get("loaded") if key is not None else None
        if kept is not None and kept[0] != key:
            kept = None
            release_kept()  # its weights go before the next model's are loaded
        try:
            config = kept[1] if kept else lr["PreTrainedConfig"].from_pretrained(str(path))
        except Exception as exc:  # noqa: BLE001 - draccus/json errors: name the file
            raise ConfigError(f"lerobot policy {path}: cannot read config.json ({type(exc).__name__}: {exc})"
                              + _newer_hint(exc)) from exc
        config.device = device
        self.config = config
        self.type = config.type
        self.call_width = resolve_call_width(context.call_width, device)
        self._plan_features(config, context)
        if kept:  # a shallow copy (shared weights): a policy keeping its queues on the module keeps them per run
            self.module, self.preprocessor, self.postprocessor = copy.copy(kept[2]), kept[3], kept[4]
        else:
            self._load(lr, path, config, device)
        self._finish(device)
        if kept:  # the same model: its thread check and its processors' lock are the same too
            self.call_key, self._processing = kept[5:7]
        elif key is not None:
            _kept["loaded"] = (key, config, self.module, self.preprocessor, self.postprocessor, self.call_key,
                               self._processing)

    def _load(self, lr: dict[str, Any], path: Path, config: Any, device: str) -> None:
        """The model and its pre/post-processors, from ``path``."""
        try:
            self.module = lr["get_policy_class"](config.type).from_pretrained(str(path), config=config)
        except Exception as exc:  # noqa: BLE001
            raise ConfigError(f"lerobot policy {path}: cannot load the {config.type!r} policy "
                              f"({type(exc).__name__}: {exc})") from exc
        if not (path / "policy_preprocessor.json").is_file():
            raise ConfigError(
                f"lerobot policy {path}: no policy_preprocessor.json (a checkpoint from before lerobot 0.4?). "
                "Convert it with `python -m lerobot.processor.migrate_policy_normalization`")
        try:
            self.preprocessor, self.postprocessor = lr["make_pre_post_processors"](
                config, pretrained_path=str(path),
                preprocessor_overrides={"device_processor": {"device": device}})
        except Exception as exc:  # noqa: BLE001
            raise ConfigError(f"lerobot policy {path}: cannot load its pre/post-processors "
                              f"({type(exc).__name__}: {exc})") from exc

    @classmethod
    def from_objects(cls, module: Any, preprocessor: Any, postprocessor: Any, context: PolicyContext) -> LeRobotPolicy:
        """The adapter around a LeRobot policy already in memory (a training loop's), with its processors.

        Nothing is copied or reloaded: the module is used as it is (``lerobench.evaluate`` puts it in eval mode
        for the run and restores its mode afterwards).
        """
        from lerobench.policies.torch_policy import resolve_device

        _import_lerobot()
        self = object.__new__(cls)
        self.path = Path(f"<in-memory {type(module).__name__}>")
        self.context = context
        device = resolve_device(context.device)
        self.config = module.config
        self.type = module.config.type
        self.call_width = resolve_call_width(context.call_width, device)
        self._plan_features(self.config, context)
        self.module, self.preprocessor, self.postprocessor = module, preprocessor, postprocessor
        self._finish(device)
        return self

    def _finish(self, device: str) -> None:
        """Eval mode, deterministic numerics and traits: the part shared by both constructors."""
        import torch

        self.module.eval()
        self.device = torch.device(device)
        from lerobench.policies.numerics import deterministic_torch, numerics_record

        deterministic_torch()
        dtype = next((p.dtype for p in self.module.parameters()), torch.float32)
        self.numerics = numerics_record(self.device, dtype, self.call_width if self.per_row else 0)
        # select_action mode shares the module's batch-wide state; chunk, history and ensembling modes keep it per
        # row and draw noise per row: the same episode gets the same actions at any batch size.
        self.traits = PolicyTraits(copy_safe=self.per_row, batchable=self.per_row,
                                   stochastic=self.type in _STOCHASTIC_TYPES, batch_invariant=self.per_row)
        self._warned_partial_reset = False
        self._rows: tuple[int, ...] = ()
        self.call_key = CallKey()
        """The model's identity for the call pool's thread check: shared by shallow copies (one check)."""
        self._processing = threading.Lock()
        """Held while LeRobot's pre/post-processors run: their steps keep the transition in ``self`` (not
        thread-safe), while model calls on disjoint rows run side by side; shared by every shallow copy."""
        self.reset()

    # -- feature mapping ---------------------------------------------------------------------------
    def _plan_features(self, config: Any, context: PolicyContext) -> None:
        """Decide which lerobench observation feeds each LeRobot input feature; fail early if one can't."""
        where = f"lerobot policy {self.path} ({config.type})"
        action = (config.output_features or {}).get("action")
        if action is None:
            raise ConfigError(f"{where}: its config has no 'action' output feature")
        if tuple(action.shape)[-1] != context.action_dim:
            raise ConfigError(f"{where} outputs {tuple(action.shape)[-1]}-D actions, but suite "
                              f"{context.suite!r} expects {context.action_dim}-D actions")
        self.state_slices: dict[str, int] = {}  # feature key -> number of leading state dims
        self.image_keys: dict[str, str] = {}  # feature key -> lerobench camera
        for key, feature in (config.input_features or {}).items():
            kind = getattr(feature.type, "value", str(feature.type))
            shape = tuple(feature.shape)
            if kind == "VISUAL":
                camera = camera_for_feature(key, context.camera_aliases, context.cameras)
                if camera is None:
                    raise ConfigError(
                        f"{where} consumes image {key!r}, which matches no camera of suite {context.suite!r} "
                        f"({list(context.cameras) or 'none'}); name it observation.images.<camera>")
                self.image_keys[key] = camera
            elif kind in ("STATE", "ENV") and key in ("observation.state", "observation.environment_state"):
                dim = shape[-1] if shape else 0
                if dim == context.state_dim or (key == "observation.state" and dim in context.partial_states):
                    self.state_slices[key] = dim
                else:
                    raise ConfigError(f"{where} consumes a {dim}-D {key!r}, but suite {context.suite!r} "
                                      f"gives a {context.state_dim}-D state")
            else:
                raise ConfigError(f"{where} consumes {key!r} ({kind}), which lerobench cannot provide "
                                  "(it provides observation.state, observation.environment_state and images)")
        self.chunked = config.type in _CHUNK_TYPES and getattr(config, "temporal_ensemble_coeff", None) is None
        self.history = config.type in _HISTORY_TYPES
        self.ensembling = config.type == "act" and getattr(config, "temporal_ensemble_coeff", None) is not None
        """ACT with temporal ensembling: one ensembler per row, asked at every step (``_select_ensembled``)."""
        self.per_row = self.chunked or self.history or self.ensembling
        """Per-row state, fixed-width calls (the rest: LeRobot's batch-wide select_action)."""
        self.n_action_steps = int(getattr(config, "n_action_steps", 1) or 1)
        self.returned, executed = self._horizon(config, context)
        self.executed = executed
        self.rtc = self.chunked and self.type in _FLOW_TYPES and rtc_enabled(config) and _fixed_delay(context) > 0
        """Hand RTC the committed prefix (``lerobot_rtc``): a flow policy with ``rtc_config`` under a fixed delay."""
        self.committed_prefix = RTC_PREFIX if self.rtc else None
        shapes = {key: tuple(feature.shape) for key, feature in (config.input_features or {}).items()}
        self.observation_needs = ObservationNeeds(
            cameras=tuple(dict.fromkeys(self.image_keys.values())), replan_steps=executed if self.chunked else None,
            chunk_length=self.returned if self.chunked else None, image_sizes=_image_sizes(shapes, self.image_keys),
            exact_image_sizes=_exact_image_sizes(config.type, lambda name: getattr(config, name, None)))

    def _horizon(self, config: Any, context: PolicyContext) -> tuple[int, int]:
        """(actions returned per chunk, actions executed of each) for a chunk policy in this run.

        Without a delay and with ``--replan-steps`` at most ``n_action_steps``: LeRobot's own ``select_action``
        queue, the first ``n_action_steps`` actions of each chunk (today's numbers). A run that needs more -- a
        delay d (the chunk must cover the d steps it skips plus those executed) or ``--replan-steps`` above
        ``n_action_steps`` -- gets the whole predicted chunk (``chunk_size``, what ``predict_action_chunk``
        returns), executing ``--replan-steps`` actions, or ``min(n_action_steps, chunk_size - d)`` when not asked.
        """
        from lerobench.core.delay import MEASURED, parse_delay

        chunk = int(getattr(config, "chunk_size", 0) or 0) or self.n_action_steps
        delay, d = parse_delay(context.delay_steps), _fixed_delay(context)
        asked = context.replan_steps if context.replan_steps != 1 else None
        if delay != MEASURED and d == 0 and (asked is None or asked <= self.n_action_steps):
            return self.n_action_steps, asked or self.n_action_steps
        return chunk, asked or max(1, min(self.n_action_steps, chunk - d))

    def _to_lerobot(self, observation: dict[str, Any], task_descriptions: list[str]) -> dict[str, Any]:
        import torch

        state = torch.from_numpy(np.ascontiguousarray(observation["state"], dtype=np.float32))
        batch: dict[str, Any] = {key: state[:, :dim] for key, dim in self.state_slices.items()}
        images = observation.get("images", {})
        converted: dict[str, Any] = {}
        for key, camera in self.image_keys.items():
            if camera not in converted:
                img = torch.from_numpy(np.ascontiguousarray(images[camera]))
                converted[camera] = img.permute(0, 3, 1, 2).float().div_(255.0)
            batch[key] = converted[camera]
        batch["task"] = list(task_descriptions)
        return batch

    # -- the policy interface ----------------------------------------------------------------------
    def __copy__(self) -> LeRobotPolicy:
        """A copy for another task thread: shares weights and processors, not per-episode state."""
        clone = object.__new__(LeRobotPolicy)
        clone.__dict__.update(self.__dict__)
        clone.module = copy.copy(self.module)  # shares parameters; reset() rebinds its queues
        clone.reset()
        return clone

    def _twin(self) -> LeRobotPolicy:
        """A fresh copy for the call pool's thread check: shared weights, its own (empty) queues and histories."""
        clone = copy.copy(self)
        clone.reset()
        return clone

    def reset(self) -> None:
        """Forget LeRobot's queues and the per-row histories and queues of history mode.

        Chunk mode keeps none (lerobench's per-env queues hold the chunks); the per-row dicts are rebound, so a
        shallow copy never shares them.
        """
        self.module.reset()
        self._obs_history: dict[int, dict[str, deque[Any]]] = {}
        self._action_queues: dict[int, deque[Any]] = {}
        self._ensemblers: dict[int, Any] = {}
        self._prefixes = PrefixMemory(self.executed) if self.rtc else None

    def select_action(self, observation: PolicyBatch, task_descriptions: list[str]) -> np.ndarray:
        """A chunk (B, n_action_steps, action_dim) for chunk policies, else one action per env (B, action_dim)."""
        import torch

        n = len(observation["state"])
        starts = np.asarray(observation.get("episode_start", np.zeros(n, bool)), dtype=bool)
        starts = starts | np.asarray(observation.get("trial_start", np.zeros(n, bool)), dtype=bool)
        active = np.asarray(observation.get("active", np.ones(n, bool)), dtype=bool)
        pool = call_pool() if self.device.type == "cpu" else None
        with torch.inference_mode():
            if self.chunked:
                return call_at_width(self._select_chunk, observation, task_descriptions, self.call_width, pool,
                                     parallel=True, key=self.call_key, twin=lambda: self._twin()._select_chunk)
            if self.history:
                for slot in row_ids(observation)[starts].tolist():
                    self._obs_history.pop(slot, None)
                    self._action_queues.pop(slot, None)
                return call_at_width(self._select_history, observation, task_descriptions, self.call_width, pool,
                                     parallel=True, key=self.call_key, twin=lambda: self._twin()._select_history)
            if self.ensembling:
                for slot in row_ids(observation)[starts].tolist():
                    self._ensemblers.pop(slot, None)
                return call_at_width(self._select_ensembled, observation, task_descriptions, self.call_width, pool,
                                     parallel=True, key=self.call_key, twin=lambda: self._twin()._select_ensembled)
            return self._select_stateful(observation, task_descriptions, n, starts, active)

    def _select_history(self, observation: dict[str, Any], task_descriptions: list[str]) -> np.ndarray:
        """Diffusion with per-row history and queues: one fixed-width model call for the rows whose queue ran dry."""
        import torch

        batch = self._preprocess(observation, task_descriptions)
        if self.config.image_features:
            batch["observation.images"] = torch.stack([batch[k] for k in self.config.image_features], dim=-4)
        keys: list[str] = [k for k in ("observation.state", "observation.images", "observation.environment_state")
                if k in batch]
        slots = row_ids(observation).tolist()
        real = [i for i, slot in enumerate(slots) if slot != PADDING_SLOT]
        n_obs = int(self.config.n_obs_steps)
        for i in real:
            history = self._obs_history.setdefault(slots[i], {k: deque(maxlen=n_obs) for k in keys})
            for k in keys:
                row = batch[k][i]
                history[k].extend([row] * (n_obs - len(history[k])) if not history[k] else [row])
        dry = np.array([i for i in real if not self._action_queues.get(slots[i])], dtype=np.int64)
        if len(dry):
            chunks = self._diffusion_chunks(take_rows(observation, dry), [slots[i] for i in dry], keys)
            for j, i in enumerate(dry.tolist()):
                self._action_queues[slots[i]] = deque(chunks[j])
        out = np.zeros((len(slots), int(self.config.action_feature.shape[0])), dtype=np.float32)
        for i in real:
            out[i] = self._action_queues[slots[i]].popleft()
        return out

    def _select_ensembled(self, observation: dict[str, Any], task_descriptions: list[str]) -> np.ndarray:
        """ACT with temporal ensembling, per row: each row's chunk goes into the row's own ``ACTTemporalEnsembler``.

        LeRobot's ``select_action`` keeps one ensembler for the whole batch (one running average, one count), so an
        env starting an episode beside others mid-episode would reset or mix theirs. Here each row (``row_ids``)
        has its own, made as LeRobot's ``ACTPolicy`` makes it and updated with that row's chunk alone, in model
        space, then post-processed: a row's actions are those of LeRobot's ``select_action`` on a one-env rollout.
        """
        import torch

        batch = self._preprocess(observation, task_descriptions)
        chunks = self.module.predict_action_chunk(batch)
        ensembler_type = type(self.module.temporal_ensembler)
        coeff, chunk_size = float(self.config.temporal_ensemble_coeff), int(self.config.chunk_size)
        rows = []
        for i, slot in enumerate(row_ids(observation).tolist()):
            if slot == PADDING_SLOT:  # pads the call to its width: output discarded, no state kept
                rows.append(chunks[i : i + 1, 0])
                continue
            ensembler = self._ensemblers.get(slot)
            if ensembler is None:
                ensembler = self._ensemblers[slot] = ensembler_type(coeff, chunk_size)
            rows.append(ensembler.update(chunks[i : i + 1]))
        with self._processing:
            actions = self.postprocessor(torch.cat(rows))
        return actions.detach().to("cpu", torch.float32).numpy()

    def _diffusion_chunks(self, observation: dict[str, Any], slots: list[int], keys: list[str]) -> np.ndarray:
        """Each row's next ``n_action_steps`` actions from its history, in one call of ``call_width`` rows."""
        import torch

        n = len(slots)
        width = max(self.call_width, n)
        index = [*range(n), *[n - 1] * (width - n)]
        stacked = {k: torch.stack([torch.stack(list(self._obs_history[slots[i]][k])) for i in index]) for k in keys}
        padded, _ = pad_rows(observation, [""] * n, width)
        diffusion = self.module.diffusion
        horizon, action_dim = int(self.config.horizon), int(self.config.action_feature.shape[0])
        noise = torch.from_numpy(row_noise(padded, (horizon, action_dim))).to(self.device)
        generators = [torch.Generator(device=self.device).manual_seed(seed) for seed in row_seeds(padded)]
        global_cond = diffusion._prepare_global_conditioning(stacked)
        actions = diffusion.conditional_sample(width, global_cond=global_cond, generator=generators, noise=noise)
        start = int(self.config.n_obs_steps) - 1
        with self._processing:
            actions = self.postprocessor(actions[:n, start:start + int(self.config.n_action_steps)])
        return actions.detach().to("cpu", torch.float32).numpy()

    def _preprocess(self, observation: dict[str, Any], task_descriptions: list[str]) -> dict[str, Any]:
        """LeRobot's preprocessor on the rows, under the processors' lock (calls may run side by side)."""
        batch = self._to_lerobot(observation, task_descriptions)
        with self._processing:
            return self.preprocessor(batch)

    def _select_chunk(self, observation: dict[str, Any], task_descriptions: list[str]) -> np.ndarray:
        """The chunk cut to ``n_action_steps`` as LeRobot's ``select_action`` queues it, or whole (``_horizon``)."""
        import torch

        batch = self._preprocess(observation, task_descriptions)
        if self._prefixes is not None and "delay_steps" in observation:
            chunk = self._prefixed_chunk(observation, batch, self._prefixes)
        else:
            chunk = self.module.predict_action_chunk(batch, **self._noise(observation))
        with self._processing:
            chunk = self.postprocessor(chunk[:, : self.returned])
        return chunk.detach().to("cpu", torch.float32).numpy()

    def _prefixed_chunk(self, observation: dict[str, Any], batch: dict[str, Any], prefixes: PrefixMemory) -> Any:
        """Each row's chunk guided by RTC towards its previous chunk's leftover (``lerobot_rtc``); model space."""
        import torch

        slots = row_ids(observation).tolist()
        delays = np.asarray(observation["delay_steps"], dtype=np.int64)
        leftovers = [prefixes.leftover(slot, int(d)) for slot, d in zip(slots, delays, strict=True)]
        for i, left in enumerate(leftovers):
            if left is not None:
                d = int(delays[i])
                with self._processing:
                    run = self.postprocessor(left[None, :d].clone())
                check_committed(run[0].detach().to("cpu", torch.float32).numpy(),
                                np.asarray(observation["committed_actions"][i]), slots[i], d)
        noise = self._noise(observation)
        chunk: Any = None
        for (d, length), rows in prefix_groups(slots, delays, leftovers).items():
            if length:
                fill: Any = leftovers[rows[0]]  # for the rows of other groups (their outputs come from their call)
                prefix = torch.stack([left if left is not None and len(left) == length else fill
                                      for left in leftovers])
                with torch.inference_mode(False):  # RTC's guidance takes a gradient of the denoising step
                    out = self.module.predict_action_chunk(batch, **noise, inference_delay=d,
                                                           prev_chunk_left_over=prefix)
            else:
                out = self.module.predict_action_chunk(batch, **noise)
            chunk = out.clone() if chunk is None else chunk
            chunk[rows] = out[rows]
        for i, slot in enumerate(slots):
            prefixes.remember(slot, chunk[i].clone(), int(delays[i]))
        return chunk

    def _noise(self, observation: dict[str, Any]) -> dict[str, Any]:
        """``{"noise": ...}`` for flow-matching types: each row's initial noise from its own random stream."""
        if self.type not in _FLOW_TYPES:
            return {}
        import torch

        shape = (int(self.config.chunk_size), int(self.config.max_action_dim))
        return {"noise": torch.from_numpy(row_noise(observation, shape)).to(self.device)}

    def _select_stateful(self, observation: dict[str, Any], task_descriptions: list[str], n: int,
                         starts: np.ndarray, active: np.ndarray) -> np.ndarray:
        import torch

        rows = tuple(row_ids(observation).tolist())
        if rows != self._rows and self._rows:  # an env went idle: LeRobot's batch-wide queue no longer fits
            self.module.reset()
        self._rows = rows
        if starts.any():
            if n > 1 and not starts[active].all() and not self._warned_partial_reset:
                self._warned_partial_reset = True
                warnings.warn(
                    f"lerobot {self.type!r} policy keeps one queue for the whole batch: an env started a new "
                    "episode while others are mid-episode, so all re-plan now (use --batch-size 1 for "
                    "LeRobot's exact per-episode behaviour)", RuntimeWarning, stacklevel=3)
            self.module.reset()
        batch = self.preprocessor(self._to_lerobot(observation, task_descriptions))
        action = self.postprocessor(self.module.select_action(batch))
        return action.detach().to("cpu", torch.float32).numpy()

