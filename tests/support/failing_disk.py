"""A disk that fails on command, the way a full or broken one does, under the storage engine's real files.

`FailingDisk` is a `hightide.storage.disk.DiskIO`: every call goes to the operating system until a test arms a
failure, then that call fails as the kernel would make it fail: `writev`/`write` raise ENOSPC or EIO after
writing `written` bytes for real (a torn write) or return a short count; `fsync` and `ftruncate` raise EIO.
Nothing else is faked: the files, the descriptors and what ends up on disk are real.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from dataclasses import dataclass

from hightide.storage.disk import DiskIO, WriteBuffer


@dataclass(slots=True)
class WriteFailure:
    """A coming write's fate: after `after_writes` writes go through, the next one writes `written` bytes (at most
    all but one) for real, then raises ENOSPC/EIO, or with `short` returns that count, as writev does when the
    disk fills midway."""

    error: int = errno.ENOSPC
    written: int = 0
    short: bool = False
    after_writes: int = 0


class FailingDisk(DiskIO):
    def __init__(self) -> None:
        self.next_write: WriteFailure | None = None
        self.fsync_error: int | None = None
        self.ftruncate_error: int | None = None
        self.writes = 0

    def fail_next_write(
        self, error: int = errno.ENOSPC, *, written: int = 0, short: bool = False, after_writes: int = 0
    ) -> None:
        self.next_write = WriteFailure(error, written, short, after_writes)

    def heal(self) -> None:
        self.next_write = None
        self.fsync_error = None
        self.ftruncate_error = None

    def writev(self, fd: int, buffers: Sequence[WriteBuffer]) -> int:
        failure = self._failure()
        if failure is None:
            return os.writev(fd, buffers)
        return self._fail(fd, b"".join(buffers), failure)

    def write(self, fd: int, data: WriteBuffer) -> int:
        failure = self._failure()
        if failure is None:
            return os.write(fd, data)
        return self._fail(fd, bytes(data), failure)

    def _failure(self) -> WriteFailure | None:
        self.writes += 1
        failure = self.next_write
        if failure is None:
            return None
        if failure.after_writes > 0:
            failure.after_writes -= 1
            return None
        self.next_write = None
        return failure

    def _fail(self, fd: int, data: bytes, failure: WriteFailure) -> int:
        written = min(failure.written, len(data) - 1)  # a failed write never writes everything
        if written > 0:
            os.write(fd, data[:written])
        if failure.short:
            return written
        raise OSError(failure.error, os.strerror(failure.error))

    def fsync(self, fd: int) -> None:
        if self.fsync_error is not None:
            raise OSError(self.fsync_error, os.strerror(self.fsync_error))
        os.fsync(fd)

    def ftruncate(self, fd: int, length: int) -> None:
        if self.ftruncate_error is not None:
            raise OSError(self.ftruncate_error, os.strerror(self.ftruncate_error))
        os.ftruncate(fd, length)
