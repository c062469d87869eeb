"""Atomic file writes: the one way ockstore puts a file under its final name (docs/ARCHITECTURE.md, "Conventions").

A file is written to a hidden temporary sibling ``.<name>.<random>.tmp`` in the target's folder, flushed and
fsynced, renamed over the target, and the folder is fsynced so the rename itself survives a crash. A crash at any
point leaves the old file (or none) under the name, never part of the new one; readers that have the old file open
keep reading it. Temporary files are created with mode 0o666 less the process umask, like any new file, so the
result has the permissions a plain ``open(path, "wb")`` would have given it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets

__all__ = ["new_temp_sibling", "atomic_write", "fsync_folder", "remove_quietly", "NoSpaceError", "naming_no_space"]

# Characters of the target's name kept in a temporary name: the name stays within NAME_MAX (255).
_MAX_STEM = 200


# errno values of a write that found no room: the file system is full, or the user's quota is.
NO_SPACE = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)})


class NoSpaceError(OSError):
    """A write found no space (errno ENOSPC or EDQUOT, kept): the message names the file being written and the fix.
    The operating system's own error says only "No space left on device", which an app cannot act on."""


@contextlib.contextmanager
def naming_no_space(path):
    """Inside the block, an OSError of a full file system or quota becomes a NoSpaceError naming ``path`` (the file
    the caller writes, not a temporary name) and what to do; other errors pass unchanged."""
    try:
        yield
    except NoSpaceError:
        raise
    except OSError as exc:
        if exc.errno not in NO_SPACE:
            raise
        raise NoSpaceError(exc.errno, f"{os.strerror(exc.errno)} while writing {os.fspath(path)!r}: nothing was "
                                      "written under that name; free space on its file system (or write to another "
                                      "one) and try again") from exc


def new_temp_sibling(path):
    """Create a new hidden empty file beside ``path``; returns ``(temp_path, fd)`` (the caller closes fd)."""
    folder = os.path.dirname(os.path.abspath(path))
    stem = os.path.basename(path)[:_MAX_STEM]
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        temp = os.path.join(folder, f".{stem}.{secrets.token_hex(6)}.tmp")
        try:
            return temp, os.open(temp, flags, 0o666)  # the umask applies, as for any new file
        except FileExistsError:  # pragma: no cover - 48 random bits
            continue


def fsync_folder(folder):
    """Make a rename in ``folder`` durable; file systems that cannot fsync a folder are tolerated."""
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def remove_quietly(path):
    """Remove a temporary file that may already be gone."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _put_in_place(temp, path, replace):
    """Give the complete, fsynced ``temp`` the name ``path``: renamed over it, or (``replace`` false) hard-linked so
    that an existing ``path`` is never replaced (FileExistsError), then the temporary name removed."""
    if replace:
        os.replace(temp, path)
        return
    try:
        os.link(temp, path)  # atomic, and fails when the name exists (even if another process made it a moment ago)
    except FileExistsError:
        raise
    except OSError as exc:  # pragma: no cover - a file system without hard links: check, then rename (not atomic)
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
            raise
        if os.path.lexists(path):
            raise FileExistsError(errno.EEXIST, "file exists", path) from None
        os.replace(temp, path)
        return
    remove_quietly(temp)


@contextlib.contextmanager
def atomic_write(path, *, replace=True):
    """Write ``path`` atomically: yields a binary file object on a temporary sibling; when the block ends without an
    exception the file is flushed, fsynced and renamed over ``path``, then the folder is fsynced. On any exception the
    temporary file is removed and ``path`` is left as it was.

    With ``replace=False`` an existing ``path`` is never replaced: the complete file is hard-linked to ``path``
    (atomic: FileExistsError when the name exists, whoever made it, and the temporary file is removed).

    ``path`` must already be checked (``ockstore.paths.check_output_file``).
    """
    with naming_no_space(path):
        temp, fd = new_temp_sibling(path)
        try:
            with open(fd, "wb") as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            _put_in_place(temp, path, replace)
        except BaseException:
            remove_quietly(temp)
            raise
        fsync_folder(os.path.dirname(os.path.abspath(path)))
