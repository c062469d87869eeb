"""The writer's lock of a collection folder (docs/FORMAT.md rule C9): one writer at a time, readers never blocked.

The lock is an OS advisory lock on the folder's ``writer.lock`` file, taken without waiting:

* POSIX: ``fcntl.flock(fd, LOCK_EX | LOCK_NB)``. flock locks belong to an open file description, so a second
  ``open_collection(path, "a")`` in the same process is refused like one in another process, and the kernel drops
  the lock when the writer's process dies (even by SIGKILL): a crash never leaves a folder locked.
* Windows: ``msvcrt.locking(fd, LK_NBLCK, 1)`` on the first byte of the file, also dropped with the process.

Readers take no lock: they only read files that committed manifests reference, which are never modified.
"""

from __future__ import annotations

import errno
import os

from ..errors import CollectionLockedError
from .names import LOCK_NAME

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None
    import msvcrt

__all__ = ["WriterLock"]

# errno values with which a non-blocking lock reports that someone else holds it.
_HELD = {errno.EAGAIN, errno.EACCES, getattr(errno, "EWOULDBLOCK", errno.EAGAIN), getattr(errno, "EDEADLK", -1)}


class WriterLock:
    """The exclusive lock of one writer on ``folder``; :meth:`release` (or closing the process) frees it.

    Raises CollectionLockedError naming the folder and the lock file when another writer holds it; other OSErrors
    (a read-only folder, a file system without locks) propagate as they are.
    """

    def __init__(self, folder):
        self.folder = folder
        self.path = os.path.join(folder, LOCK_NAME)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o666)
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            else:  # pragma: no cover - Windows
                msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError as exc:
            os.close(fd)
            if exc.errno in _HELD:
                raise CollectionLockedError(
                    f"collection {folder!r} is already open for writing: another writer holds its lock "
                    f"{self.path!r} (close that writer first, or open the collection with mode='r' to read it)"
                ) from None
            raise
        self._fd = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self):
        """Free the lock. Idempotent."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)
            else:  # pragma: no cover - Windows
                os.lseek(fd, 0, os.SEEK_SET)
                msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
        except OSError:  # pragma: no cover - closing the file frees the lock anyway
            pass
        finally:
            os.close(fd)

    def __del__(self):
        if getattr(self, "_fd", None) is not None:
            self.release()
