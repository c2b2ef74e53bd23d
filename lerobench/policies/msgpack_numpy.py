"""msgpack with NumPy arrays, wire-compatible with ``openpi_client.msgpack_numpy``.

Why msgpack and not pickle: a policy server accepts bytes from the network, and unpickling them runs
arbitrary code. msgpack only builds plain values; arrays travel as maps that this module turns back
into arrays:

- ``np.ndarray`` -> ``{b"__ndarray__": True, b"data": raw C-order bytes, b"dtype": dtype.str,
  b"shape": shape}``
- NumPy scalar -> ``{b"__npgeneric__": True, b"data": scalar.item(), b"dtype": dtype.str}``

Object and void (structured) dtypes are refused both ways: they are the only dtypes whose bytes are
not plain numbers, and the reference library (msgpack-numpy) falls back to pickle for them.
Decoded arrays are read-only views of the received message (zero copy, like openpi's decoder).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lerobench.errors import MissingDependencyError
from lerobench.extras import EXTRAS, pip_install

SERVE_EXTRA_HINT = f"remote policies need websockets and msgpack: {pip_install(EXTRAS['msgpack'])}"

try:
    import msgpack
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingDependencyError(SERVE_EXTRA_HINT) from exc

_REFUSED_KINDS = ("O", "V")
"""Object and void dtypes: their bytes are pointers or opaque records, not numbers."""


class DecodeError(ValueError):
    """A message is not msgpack, or holds an array map that is malformed or of a refused dtype."""


def _encode_numpy(obj: Any) -> Any:
    """Msgpack ``default`` hook: called for every value msgpack cannot encode by itself."""
    if isinstance(obj, (np.ndarray, np.generic)):
        if obj.dtype.kind in _REFUSED_KINDS:
            raise TypeError(f"cannot send arrays of dtype {obj.dtype} (object/void dtypes need pickle)")
        if isinstance(obj, np.ndarray):
            return {b"__ndarray__": True, b"data": obj.tobytes(), b"dtype": obj.dtype.str,
                    b"shape": list(obj.shape)}
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise TypeError(f"cannot send a value of type {type(obj).__name__} over msgpack")


def _dtype(raw: Any) -> np.dtype:
    if not isinstance(raw, (str, bytes)):
        raise DecodeError(f"array dtype must be a string, got {type(raw).__name__}")
    try:
        dtype = np.dtype(raw.decode() if isinstance(raw, bytes) else raw)
    except (TypeError, ValueError) as exc:
        raise DecodeError(f"unknown array dtype {raw!r}") from exc
    if dtype.kind in _REFUSED_KINDS or dtype.hasobject:
        raise DecodeError(f"refusing array dtype {dtype} (object/void dtypes are not allowed)")
    return dtype


def _decode_numpy(obj: dict[Any, Any]) -> Any:
    """Msgpack ``object_hook``: turn array maps back into arrays, leave every other map alone."""
    try:
        if b"__ndarray__" in obj:
            dtype = _dtype(obj[b"dtype"])
            shape, data = obj[b"shape"], obj[b"data"]
            if not isinstance(data, bytes) or not isinstance(shape, (list, tuple)) or not all(
                    isinstance(d, int) and d >= 0 for d in shape):
                raise DecodeError("array map needs bytes 'data' and a list of non-negative ints 'shape'")
            if len(data) != math.prod(shape) * dtype.itemsize:
                raise DecodeError(f"array of shape {list(shape)} and dtype {dtype} needs "
                                  f"{math.prod(shape) * dtype.itemsize} bytes, got {len(data)}")
            return np.ndarray(buffer=data, dtype=dtype, shape=tuple(shape))
        if b"__npgeneric__" in obj:
            return _dtype(obj[b"dtype"]).type(obj[b"data"])
    except KeyError as exc:
        raise DecodeError(f"array map without field {exc.args[0]!r}") from exc
    return obj


def packb(obj: Any) -> bytes:
    """Encode ``obj`` (dicts, lists, scalars, strings, NumPy arrays) as one msgpack message."""
    return msgpack.packb(obj, default=_encode_numpy, use_bin_type=True)


def unpackb(data: bytes) -> Any:
    """Decode one msgpack message; raises ``DecodeError`` for anything that is not valid."""
    try:
        return msgpack.unpackb(data, object_hook=_decode_numpy, raw=False)
    except DecodeError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException) as exc:  # ExtraData, FormatError, ... too
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise DecodeError(f"not a valid msgpack message ({detail})") from exc
