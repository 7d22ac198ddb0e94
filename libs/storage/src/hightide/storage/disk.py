"""The system calls through which the storage engine changes its files: the one seam where a disk can fail.

Room: libs/storage. Segments and indexes write, fsync and truncate through a `DiskIO`; `SYSTEM_DISK` calls the
operating system. A test that needs a full or broken disk passes a subclass whose calls raise what a real one
raises (`OSError` with ENOSPC or EIO, or a short write), while the files stay real: the engine's answer to a
failing disk is tested on the very code paths that run in production. Opening, renaming and removing files are
not routed through here; their `OSError`s are handled the same way by the log.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from typing import Final

WriteBuffer = bytes | bytearray | memoryview


class DiskIO:
    """The file-changing system calls of the storage engine."""

    def writev(self, fd: int, buffers: Sequence[WriteBuffer]) -> int:
        """Write the buffers in order at the end of an O_APPEND file; return the bytes written (fewer than asked
        for only when the disk is full or failing)."""
        return os.writev(fd, buffers)

    def write(self, fd: int, data: WriteBuffer) -> int:
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def ftruncate(self, fd: int, length: int) -> None:
        os.ftruncate(fd, length)


SYSTEM_DISK: Final = DiskIO()


def write_fully(disk: DiskIO, fd: int, data: WriteBuffer) -> None:
    """Write all of `data`, continuing after short writes; a write that makes no progress is the disk refusing."""
    view = memoryview(data)
    while view:
        written = disk.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, f"write made no progress ({len(view)} bytes left)")
        view = view[written:]


__all__ = ["SYSTEM_DISK", "DiskIO", "WriteBuffer", "write_fully"]
