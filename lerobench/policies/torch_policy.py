"""Runs ``torch.nn.Module`` policies: device placement, eval mode, inference mode, batched conversion.

A module policy receives the observation batch with arrays already as tensors on its device:
``state`` float32 (B, D) and ``images[camera]`` float32 (B, 3, H, W) in [0, 1] — converted once per
call for the whole batch (one ``torch.from_numpy`` per key, no per-env Python loops). Non-array keys
(``task``, ``episode``, ``episode_start``, ...) are passed as they are.

Every call has the same shape: B is the call width (``--call-width``, ``lerobench.policies.width``; on the
CPU one row by default, each call on one intra-op thread, calls side by side on the process's call pool), the
rows that need an action padded with copies of the last one (``padding`` True, ``slot`` -1), and larger
requests split into several calls; so a row's action never depends on how many rows shared its call.
Calls of one request overlap only for modules whose rows are independent (a plain module, or one that
declares ``PolicyTraits(batchable=True)``); others get them one after another.
Numerics are deterministic (``lerobench.policies.numerics``) and recorded in ``results.json``.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from lerobench.errors import ConfigError
from lerobench.policies.base import observation_needs, policy_traits
from lerobench.policies.batch import PolicyBatch
from lerobench.policies.width import CallKey, call_at_width, call_pool, resolve_call_width


def is_torch_module(obj: Any) -> bool:
    """True for ``torch.nn.Module`` instances, without importing torch when it is not loaded."""
    import sys

    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.nn.Module)


def follow_torch_threads() -> None:
    """Apply the process's torch thread count in the calling thread (no-op when torch is not loaded).

    Why: with PyTorch's OpenMP backend the count is per OS thread, so ``torch.set_num_threads`` in the
    main thread leaves a new thread (serve's connection and batching threads) with OpenMP's default
    team, whose spinning workers slowed a 4-row MLP forward from 1.4 ms to 120 ms on a busy 2-core box.
    """
    import sys

    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(torch.get_num_threads())


def resolve_device(device: str) -> str:
    """``auto`` -> cuda if available else cpu; an unavailable cuda is an error, not a silent fallback."""
    if device not in ("cpu", "cuda", "auto") and not device.startswith("cuda:"):
        raise ConfigError(f"--device must be cpu, cuda, cuda:N or auto, got {device!r}")
    if device == "cpu":
        return device
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not torch.cuda.is_available():
        raise ConfigError(f"--device {device}: CUDA is not available on this machine (use --device cpu)")
    return device


class TorchPolicy:
    """Adapter around a module policy; ``copy.copy`` gives a copy sharing the parameter tensors.

    The module either has ``select_action(batch, task_descriptions)`` (and ``reset()``), or is a plain module
    whose ``forward`` maps the state (B, state_dim) to actions (B, A) or chunks (B, T, A): what a training loop
    passes to ``lerobench.evaluate``.

    Why an adapter: lerobench's rollout speaks NumPy; the module should see tensors on its device and
    run without autograd. Shallow copies (one per task thread) share ``_parameters`` — zero extra
    memory — while the module's plain attributes (its per-episode state, rebound in ``reset()``)
    become per-copy.
    """

    def __init__(self, module: Any, device: str, call_width: int | None = None):
        import torch

        from lerobench.policies.numerics import deterministic_torch, numerics_record

        deterministic_torch()
        self.module = module.to(device).eval()
        self.device = torch.device(device)
        self.observation_needs = observation_needs(module)
        self.traits = policy_traits(module)
        """The module's declared traits, forwarded (``copy_safe``, ``batchable`` for ``serve --max-batch``, ...)."""
        self.call_width = resolve_call_width(call_width, device)
        dtype = next((p.dtype for p in module.parameters()), torch.float32)
        self.numerics = numerics_record(self.device, dtype, self.call_width)
        self.call_key = CallKey()
        """The model's identity for the call pool's thread check: shared by shallow copies (one check)."""

    def __copy__(self) -> TorchPolicy:
        clone = object.__new__(TorchPolicy)
        clone.__dict__.update(self.__dict__)
        clone.module = copy.copy(self.module)
        return clone

    def reset(self) -> None:
        """Reset the module's state (a plain module without ``reset`` keeps none)."""
        reset = getattr(self.module, "reset", None)
        if callable(reset):
            reset()

    def _to_tensors(self, observation: dict[str, Any]) -> dict[str, Any]:
        import torch

        batch: dict[str, Any] = dict(observation)
        batch["state"] = torch.from_numpy(np.ascontiguousarray(observation["state"])).to(self.device)
        if "images" in observation:
            batch["images"] = {
                cam: torch.from_numpy(np.ascontiguousarray(img)).to(self.device).permute(0, 3, 1, 2).float() / 255.0
                for cam, img in observation["images"].items()
            }
        return batch

    def select_action(self, observation: PolicyBatch, task_descriptions: list[str]) -> np.ndarray:
        """Calls of exactly ``call_width`` rows, each converted once and run under ``torch.inference_mode()``."""
        pool = call_pool() if self.device.type == "cpu" else None
        parallel = self.traits.batchable or not callable(getattr(self.module, "select_action", None))
        twin = self._twin if self.traits.copy_safe else None
        return call_at_width(self._call, observation, task_descriptions, self.call_width, pool, parallel,
                             key=self.call_key, twin=twin)

    def _twin(self) -> Any:
        """A fresh copy's ``_call`` for the call pool's thread check (shared weights, the module's own state)."""
        clone = copy.copy(self)
        clone.reset()
        return clone._call

    def _call(self, observation: dict[str, Any], task_descriptions: list[str]) -> np.ndarray:
        import torch

        with torch.inference_mode():
            batch = self._to_tensors(observation)
            select = getattr(self.module, "select_action", None)
            # a plain module (a training loop's ``nn.Sequential``) maps the state to actions
            out = select(batch, task_descriptions) if callable(select) else self.module(batch["state"])
        if isinstance(out, torch.Tensor):
            out = out.detach().to("cpu").numpy()
        return np.asarray(out)
