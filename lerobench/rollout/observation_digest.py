"""A digest of everything the policy saw: per trial, a hash chain over every observation it read, in order.

Why: episode *i* must be a pure function of ``(seed, task, i)``; the start digest proves the simulator started
in the same state, but not that the policy was shown the same pixels (issue 33: Meta-World's first image kept a
trace of the previous episode while state and start digest were the new episode's). Two runs whose episodes
have the same seed and start digest but different observation digests saw different inputs, and
``lerobench compare`` / ``merge`` / ``--resume`` say so, naming the first read that differs.

What a read is: one row of one policy call (``EpisodeBook.batch``): its ``state`` and each camera image, in
the batch's camera order. Each part is hashed (BLAKE2b, 16 bytes); the chain is
``h_k = BLAKE2b(h_{k-1} || part digests of read k)``. Beside the final ``obs_digest`` the record keeps the
first ``READ_DIGEST_BYTES`` bytes of every part digest of every read (``obs_read_digests``, base64): enough to
name the first differing read (which call, state or which camera) at 4 bytes per part per read (a 500-read
episode with state and two cameras: 6 KB of base64). Cost per read: ``benchmarks/observation_digest.py``.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import numpy as np

from lerobench.core.digest_compare import READ_DIGEST_BYTES

DIGEST_BYTES = 16


def part_digest(value: Any) -> bytes:
    """BLAKE2b of an array's bytes (C order; no copy when it is contiguous)."""
    return hashlib.blake2b(np.ascontiguousarray(value).data.cast("B"), digest_size=DIGEST_BYTES).digest()


class ReadDigests:
    """The chain of every slot's current trial (``begin`` at each trial, ``read`` at each call's rows)."""

    def __init__(self, n: int):
        self.chain = [b""] * n
        self.reads = [0] * n
        self.short: list[bytearray] = [bytearray() for _ in range(n)]
        self.parts: list[tuple[str, ...]] = [()] * n

    def begin(self, i: int) -> None:
        """Slot ``i`` starts a trial: an empty chain."""
        self.chain[i], self.reads[i], self.short[i], self.parts[i] = b"", 0, bytearray(), ()

    def read(self, batch: dict[str, Any], rows: np.ndarray) -> None:
        """The policy is about to read ``batch`` (row ``k`` is slot ``rows[k]``): extend each slot's chain."""
        images: dict[str, Any] = batch["images"] if isinstance(batch.get("images"), dict) else {}
        privileged = batch.get("privileged")
        names = ("state", *images, *(("privileged",) if privileged is not None else ()))
        for k, i in enumerate(rows.tolist()):
            digests = [part_digest(batch["state"][k]), *(part_digest(img[k]) for img in images.values()),
                       *((part_digest(privileged[k]),) if privileged is not None else ())]
            self.chain[i] = hashlib.blake2b(self.chain[i] + b"".join(digests), digest_size=DIGEST_BYTES).digest()
            self.reads[i] += 1
            self.parts[i] = names
            for d in digests:
                self.short[i] += d[:READ_DIGEST_BYTES]

    def summary(self, i: int) -> dict[str, Any]:
        """The record's fields for slot ``i``'s trial (no digest for a trial the policy never read)."""
        if not self.reads[i]:
            return {"obs_digest": None, "obs_reads": 0, "obs_read_digests": None, "obs_parts": None}
        return {"obs_digest": self.chain[i].hex(), "obs_reads": self.reads[i],
                "obs_read_digests": base64.b64encode(bytes(self.short[i])).decode("ascii"),
                "obs_parts": list(self.parts[i])}


