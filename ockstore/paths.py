"""The path rules of every ockstore reader and writer (docs/ARCHITECTURE.md, "Conventions").

Public so that applications and the command line check paths exactly as the library will, before long work: a
training run should not end by finding that its output folder does not exist.

- A file to read must be an existing regular file; FIFOs, devices and folders are refused by ``stat`` alone, without
  opening them, so a FIFO never blocks the caller.
- A file to write must have an existing folder and must not be a folder or another non-regular file.
- Paths are ``str`` or ``os.PathLike`` (bytes paths are decoded with the file-system encoding).
"""

from __future__ import annotations

import os
import stat

__all__ = ["check_input_file", "check_output_file"]


def _as_str(path, name):
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a str or os.PathLike, got {type(path).__name__}")
    path = os.fspath(path)
    return os.fsdecode(path) if isinstance(path, bytes) else path


def check_input_file(path, name="path") -> str:
    """Return ``path`` as a str when it names an existing regular file.

    Raises TypeError (not a path), FileNotFoundError (nothing there) or ValueError (a folder, FIFO or device); the
    message starts with ``name``.
    """
    path = _as_str(path, name)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{name}: no such file: {path!r}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{name}: {path!r} is not a regular file")
    return path


def check_output_file(path, name="path") -> str:
    """Return ``path`` as a str when a file can be written there: its folder exists and it is not a folder (an
    existing regular file is fine: writers replace it atomically).

    Raises TypeError, FileNotFoundError (no folder) or ValueError; the message starts with ``name``.
    """
    path = _as_str(path, name)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"{name}: folder does not exist: {folder!r}")
    if os.path.isdir(path):
        raise ValueError(f"{name}: {path!r} is a directory")
    if os.path.exists(path) and not stat.S_ISREG(os.stat(path).st_mode):
        raise ValueError(f"{name}: {path!r} exists and is not a regular file")
    return path
