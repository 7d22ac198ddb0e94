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

`freeze_long_lived` is the same idea for Python's cyclic garbage collector: what a service holds once it has
started (its modules, classes, configs, recovered logs) lives as long as the process, yet every full collection
walks all of it. A broker of the benchmark's cluster holds enough of it that one full collection took 84-126 ms,
its event loop stopped meanwhile, and every acks=all round trip waits on all three brokers (issue 15: one on
each broker inside the 5-second latency run). Frozen (`gc.freeze`), those objects are left out of every later
collection; reference counting still frees them, and a cycle among them is kept rather than collected.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
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


def freeze_long_lived() -> int:
    """Collect what is garbage now, then move every object left into the collector's permanent generation, which no
    collection walks; how many objects are frozen in all."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
