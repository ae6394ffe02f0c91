"""glibc malloc told to keep freed memory, so that a training step's large temporaries are not returned to the
kernel and faulted back in at every step.

By default glibc serves blocks above a (dynamic) threshold with mmap and trims the heap's free top, so each
training step hands its large activations back to the kernel and takes them again, zero-filled: with the teacher
cache filling the page cache, that cost a measured run 36-39% of its CPU time in the kernel (docs/training.md).
`keep_freed_memory()` sets, for the running process, what the environment variables
MALLOC_ARENA_MAX, MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ and MALLOC_TOP_PAD_ would set at its start.
"""

from __future__ import annotations

import ctypes
import ctypes.util

# mallopt's parameter numbers (glibc's malloc.h)
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -2, -3, -8
LARGEST = 2**31 - 1  # mallopt takes an int: blocks and free tops up to 2 GiB stay in the heap


def keep_freed_memory(arenas: int = 2, top_pad: int = 256 * 2**20) -> bool:
    """Keep blocks below 2 GiB in the heap and the heap's free memory in the process, with at most `arenas`
    malloc arenas (a bound on what the kept memory can grow to) and `top_pad` bytes asked of the kernel beyond each
    growth. True where glibc took every setting; False where the C library is not glibc (nothing is changed)."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    settings = ((M_ARENA_MAX, arenas), (M_MMAP_THRESHOLD, LARGEST), (M_TRIM_THRESHOLD, LARGEST), (M_TOP_PAD, top_pad))
    return all([mallopt(parameter, value) == 1 for parameter, value in settings])
