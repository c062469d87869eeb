"""Exception classes of ockstore.

Every error ockstore raises on purpose is one of Python's built-in ``ValueError`` or ``TypeError`` (for bad
arguments) or one of the subclasses below, so callers can catch the precise case or the broad built-in one.
"""

__all__ = ["FormatError", "NotFittedError", "CollectionLockedError"]


class FormatError(ValueError):
    """A file ockstore reads is not valid: an index file that is truncated, corrupt or of an unsupported format
    version, or a vector file (.fvecs/.bvecs/.ivecs) whose records are malformed.

    The message names the file, the check that failed and, where there is one, the section or byte offset.
    """


class NotFittedError(ValueError):
    """A quantizer was used (encode, decode, distortion, indexing) before ``fit`` was called."""


class CollectionLockedError(OSError):
    """A collection folder is already open for writing (``open_collection(path, "a")`` or ``create_collection``) by
    another writer, in this process or another: one writer at a time holds the folder's lock file.

    The message names the folder and the lock file. Readers (mode "r") take no lock and are never refused.
    """
