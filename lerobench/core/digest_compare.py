"""Reading the observation digests an episode record carries (``obs_*``, made by ``rollout.observation_digest``).

Plain functions over records, shared by compare, merge and ``--versus``: where two trials' inputs part.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

READ_DIGEST_BYTES = 4
"""Bytes of each part's digest kept per read: a chance collision of one part is 2**-32."""


@dataclass(frozen=True)
class FirstDifference:
    """Where two trials' observation digests part: the read (0-based policy call of the trial) and the part."""

    read: int
    part: str | None
    """``state`` or a camera name; None when the reads differ only in count or the parts' names."""

    def describe(self) -> str:
        """``call 3 (corner2)``."""
        return f"call {self.read}" + (f" ({self.part})" if self.part else "")


def first_difference(a: Any, b: Any) -> FirstDifference | None:
    """The first read at which records ``a`` and ``b`` (``obs_*`` fields) differ; None if their digests agree."""
    if a.obs_digest == b.obs_digest:
        return None
    if not a.obs_read_digests or not b.obs_read_digests or a.obs_parts != b.obs_parts:
        return FirstDifference(0, None)
    names = list(a.obs_parts)
    width = READ_DIGEST_BYTES * len(names)
    da, db = base64.b64decode(a.obs_read_digests), base64.b64decode(b.obs_read_digests)
    for read in range(min(len(da), len(db)) // width):
        for p, name in enumerate(names):
            at = read * width + p * READ_DIGEST_BYTES
            if da[at:at + READ_DIGEST_BYTES] != db[at:at + READ_DIGEST_BYTES]:
                return FirstDifference(read, name)
    return FirstDifference(min(a.obs_reads or 0, b.obs_reads or 0), None)


def first_read_differs(a: Any, b: Any) -> FirstDifference | None:
    """Whether two trials from the same start (equal ``start_digest``) showed the policy different first reads.

    Run A and run B of ``--versus`` run different policies, so their later reads differ by design; their first
    read is taken before any action and must be the same (None: it is, or either record cannot say).
    """
    if a.start_digest is None or a.start_digest != b.start_digest or a.obs_parts != b.obs_parts:
        return None
    if not a.obs_read_digests or not b.obs_read_digests or not a.obs_parts:
        return None
    names = list(a.obs_parts)
    width = READ_DIGEST_BYTES * len(names)
    da, db = base64.b64decode(a.obs_read_digests)[:width], base64.b64decode(b.obs_read_digests)[:width]
    for p, name in enumerate(names):
        at = p * READ_DIGEST_BYTES
        if da[at:at + READ_DIGEST_BYTES] != db[at:at + READ_DIGEST_BYTES]:
            return FirstDifference(0, name)
    return None
