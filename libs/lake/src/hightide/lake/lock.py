"""One writer per lake: an exclusive `flock` on `DIR/.lock`, held for as long as the writer writes.

Room: libs/lake. The archiver holds it for its whole life and `hightide events export` for its run; the second
one to come fails at once with `LakeInUse`, naming the holder's pid (written into the file by the holder). The
kernel drops the lock when the holder's process dies, kill -9 included, so a stale lock file is harmless and is
never deleted (deleting a lock file races with the next holder opening it).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from types import TracebackType

from hightide.lake.layout import LOCK_FILE, LakeError


class LakeInUse(LakeError):
    """Another process (an archiver or an export) is writing this lake."""


class LakeLock:
    def __init__(self, lake: Path) -> None:
        self.lake = lake
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        assert self._fd is None, "already held"
        if self.lake.exists() and not self.lake.is_dir():
            raise LakeError(f"the lake {self.lake} is not a directory")
        try:
            self.lake.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lake / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise LakeError(f"cannot use {self.lake} as a lake: {error.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise LakeInUse(
                f"the lake {self.lake} is in use by {holder} (an archiver or an export writes it)"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    def __enter__(self) -> LakeLock:
        self.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


def _read_pid(fd: int) -> str:
    text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    return f"pid {text}" if text.isdigit() else "another process"
