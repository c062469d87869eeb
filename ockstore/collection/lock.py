"""The writer's lock of a collection folder (docs/FORMAT.md rule C9): one writer at a time, readers never blocked.

The lock is an OS advisory lock on the folder's ``writer.lock`` file, taken without waiting:

* POSIX: ``fcntl.flock(fd, LOCK_EX | LOCK_NB)``. flock locks belong to an open file description, so a second
  ``open_collection(path, "a")`` in the same process is refused like one in another process, and the kernel drops
  the lock when the writer's process dies (even by SIGKILL): a crash never leaves a folder locked.
* Windows: ``msvcrt.locking(fd, LK_NBLCK, 1)`` on the first byte of the file, also dropped with the process.

The lock belongs to the file the writer opened, not to its name: should ``writer.lock`` be removed or replaced while a
writer holds it (a clean-up script deleting a "stale" lock file), a second writer would lock a new file of that name.
So a writer checks, after locking and before every change (:meth:`WriterLock.check`), that the name still leads to the
file it locked (same device and inode), and commits never replace a manifest (docs/FORMAT.md C9, C11).

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


# Attempts at locking when the lock file is replaced between opening and locking it.
_OPEN_ATTEMPTS = 10

# errno values of a folder (or lock file) this process may not write: permissions, or a read-only file system.
_READ_ONLY = {errno.EACCES, errno.EPERM, errno.EROFS}


def read_only_error(folder, code):
    """The PermissionError of a writer refused by the file system (``code``, an errno of _READ_ONLY, kept): names the
    folder and says how to read it instead."""
    return PermissionError(code, f"collection {folder!r} cannot be opened for writing: {os.strerror(code)} (the folder "
                                 f"or its lock file {LOCK_NAME!r} is read-only for this process); open it with mode "
                                 "'r' to read it")


def _same_file(fd, path):
    """Whether ``path`` names the file open as ``fd`` (False when it is gone)."""
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (mine.st_dev, mine.st_ino)


def _read_only_file_system(folder):
    try:
        return bool(os.statvfs(folder).f_flag & getattr(os, "ST_RDONLY", 1))
    except (AttributeError, OSError):  # pragma: no cover - Windows
        return False


class WriterLock:
    """The exclusive lock of one writer on ``folder``; :meth:`release` (or closing the process) frees it.

    Raises CollectionLockedError naming the folder and the lock file when another writer holds it, PermissionError
    naming the folder and mode "r" when the folder or its lock file is read-only (permissions, or a read-only file
    system); other OSErrors (a file system without locks) propagate as they are.
    """

    def __init__(self, folder):
        self.folder = folder
        self.path = os.path.join(folder, LOCK_NAME)
        self._fd = None
        for _attempt in range(_OPEN_ATTEMPTS):
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o666)
            except OSError as exc:
                if exc.errno in _READ_ONLY:
                    raise read_only_error(folder, exc.errno) from None
                raise
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
            if _same_file(fd, self.path):
                self._fd = fd
                if not os.access(folder, os.W_OK):  # a writable lock file in a folder this process cannot write
                    self.release()
                    raise read_only_error(folder, errno.EROFS if _read_only_file_system(folder) else errno.EACCES)
                return
            os.close(fd)  # the name was removed or replaced between our open and our lock: lock what it names now
        raise CollectionLockedError(f"collection {folder!r}: its lock file {self.path!r} keeps being replaced; "
                                    "cannot take the writer's lock")

    def check(self):
        """Raise CollectionLockedError unless ``writer.lock`` still names the file this writer locked (it may have been
        removed or replaced, and another writer may then have locked the new file)."""
        if self._fd is None or not _same_file(self._fd, self.path):
            raise CollectionLockedError(
                f"collection {self.folder!r}: this writer no longer holds the folder's lock: its lock file "
                f"{self.path!r} was removed or replaced since the writer locked it (another writer may have opened the "
                "collection); nothing was written. Close this writer and open the collection again")

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
