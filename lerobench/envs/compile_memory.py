"""Give back what MuJoCo's XML compiler keeps after a scene is built (issue 46).

``mj_loadXML`` (behind ``MjModel.from_xml_string`` / ``from_xml_path``) keeps the last parsed model's
specification in a process-wide slot, only so that ``mj_saveLastXML`` can write it out again. For a LIBERO scene
that copy holds every texture and mesh the compiler read: ~380 MB, kept as long as the process lives, and in a
task's template process shared by every worker forked from it. Nothing in lerobench, robosuite's stepping or
LIBERO's asks for the last XML (robosuite's ``MjModel.get_xml`` does, for its data-collection wrapper, which
lerobench does not use), so once the simulator is built the slot is freed with MuJoCo's public
``mj_freeLastXML`` and the freed heap handed back to the system (glibc's ``malloc_trim``). The compiled model
and its data are untouched: the same bytes, the same steps, the same pixels.

MuJoCo's compiler also keeps the assets it decoded (textures, meshes) in a process-wide cache, so that a second
compile of the same files is faster: 132-140 MB for a LIBERO scene. A task's template process compiles its
scene once, so there the cache is made size 0 before the compile (``no_asset_cache``). Its setter,
``mj_setCacheSize``, is exported by libmujoco and declared in MuJoCo's ``user_api.h`` but not in the installed
``mujoco.h``; it is called only where both symbols exist, only before the process's first compile (shrinking a
cache that holds entries hung or crashed MuJoCo 3.3.0 here), and the compiled model's bytes are the same with or
without it (textures, meshes, sizes and colours compared on LIBERO scenes).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import mmap
import sys
from pathlib import Path
from typing import Any

MADV_DONTNEED = getattr(mmap, "MADV_DONTNEED", 4)
CACHE_API_CHECKED = ("3.3.",)
"""MuJoCo releases whose ``mj_setCacheSize(mjCache, size_t)`` / ``mj_globalCache()`` were read in ``user_api.h``."""


def _libmujoco() -> ctypes.CDLL | None:
    """The MuJoCo shared library the ``mujoco`` bindings loaded (the same process-wide slot), if they are imported.

    Never imports them: a backend that does not use MuJoCo keeps its template free of it.
    """
    module_file = getattr(sys.modules.get("mujoco"), "__file__", None)
    if module_file is None:
        return None
    if "mujoco" not in _loaded:
        found = sorted(Path(module_file).parent.glob("libmujoco.so*"))
        _loaded["mujoco"] = ctypes.CDLL(str(found[0])) if found else None
    return _loaded["mujoco"]


_loaded: dict[str, ctypes.CDLL | None] = {}


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library, where it has ``malloc_trim`` (glibc; not musl or macOS)."""
    name = ctypes.util.find_library("c")
    library = ctypes.CDLL(name) if name else None
    return library if library is not None and hasattr(library, "malloc_trim") else None


def forget_pages(array: Any) -> int:
    """Give the whole memory pages inside ``array``'s bytes back to the system; the bytes read as zeros after.

    For data that has done its job in this process and that no one may read again: a task template's texture
    pixels once its shared GL context holds them (``LiberoSimulator.share_renderer``). The pages are returned with
    ``madvise(MADV_DONTNEED)`` (anonymous memory: zero-filled if touched again; workers forked later map nothing
    of it); the partial pages at either end are kept. Returns the bytes released (0 where not supported).
    """
    libc = _libc()
    if libc is None or not hasattr(libc, "madvise") or array.nbytes == 0:
        return 0
    page = mmap.PAGESIZE
    start = -(-int(array.ctypes.data) // page) * page
    end = (int(array.ctypes.data) + int(array.nbytes)) // page * page
    if end <= start:
        return 0
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.madvise.restype = ctypes.c_int
    return end - start if libc.madvise(start, end - start, MADV_DONTNEED) == 0 else 0


def no_asset_cache() -> None:
    """Keep no decoded assets after a compile; call in a fresh process, before its first compile."""
    mujoco = _libmujoco()
    version = getattr(sys.modules.get("mujoco"), "__version__", "")
    if mujoco is None or not version.startswith(CACHE_API_CHECKED) or not (
            hasattr(mujoco, "mj_globalCache") and hasattr(mujoco, "mj_setCacheSize")):
        return
    mujoco.mj_globalCache.restype = ctypes.c_void_p
    mujoco.mj_globalCache.argtypes = []
    mujoco.mj_setCacheSize.restype = None
    mujoco.mj_setCacheSize.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    cache = mujoco.mj_globalCache()
    if cache:
        mujoco.mj_setCacheSize(cache, 0)


def release_compile_memory() -> None:
    """Free MuJoCo's kept copy of the last XML it loaded, then return freed heap pages to the system."""
    mujoco = _libmujoco()
    if mujoco is not None and hasattr(mujoco, "mj_freeLastXML"):
        mujoco.mj_freeLastXML.restype = None
        mujoco.mj_freeLastXML()
    libc = _libc()
    if libc is not None:
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.malloc_trim(0)
