"""How a service process keeps the memory of its large buffers: glibc's malloc told to reuse, not unmap, them.

Room: libs/runtime. A broker moves record batches of up to a megabyte as Python `bytes` (a Kafka Produce frame, its
records, a log read, a NATS message and its msgpack body), several copies per hop, each freed soon after. glibc
serves an allocation that large with a fresh `mmap` (its threshold starts at 128 KiB and, raised by a freed chunk,
is undone by trimming the heap's top past twice that), so every copy first faults in and zeroes its pages, and
`free` unmaps them again: in the 16 KiB benchmark about 50,000 page faults per broker for 160 MB produced (issue
15). `keep_large_buffers` raises the mmap threshold and the trim threshold (`mallopt`, what `MALLOC_MMAP_THRESHOLD_`
and `MALLOC_TRIM_THRESHOLD_` set), so freed buffers go back to malloc's free lists and the next one reuses pages
already mapped; a process then keeps up to `TRIM_THRESHOLD_BYTES` of free heap instead of returning it at once
(the JVM under Kafka keeps its whole heap). Elsewhere than glibc (musl, macOS) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from typing import Final

M_TRIM_THRESHOLD: Final = -1  # glibc's malloc.h
M_MMAP_THRESHOLD: Final = -3
MMAP_THRESHOLD_BYTES: Final = 32 * 1024 * 1024  # glibc's ceiling for it (HEAP_MAX / 2 on 64-bit)
TRIM_THRESHOLD_BYTES: Final = 64 * 1024 * 1024
_ENV_OVERRIDES: Final = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def keep_large_buffers() -> bool:
    """Raise glibc's mmap and trim thresholds for this process; whether they were set (False: not glibc, or the
    environment already chose them, which is left as it is)."""
    if any(name in os.environ for name in _ENV_OVERRIDES):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018 (only glibc has it: another libc's mallopt may mean other things)
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    mapped = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    trimmed = mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    return bool(mapped) and bool(trimmed)
