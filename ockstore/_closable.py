"""The lifecycle of the objects that hold files (an opened container, an index, a collection): ``close()`` is
idempotent, ``closed`` says whether it ran, ``with`` closes on leaving, and any other use after close raises
ValueError as Python's closed files do (docs/ARCHITECTURE.md, "Conventions"); and of the writers that discard what
they wrote when a ``with`` block raises."""

from __future__ import annotations

__all__ = ["Closable", "AbortOnError"]


class Closable:
    """Mixin: a subclass sets ``self._closed``, defines ``close()`` and ``_check_open()`` (ValueError naming what is
    closed); this class gives ``closed`` and the context manager."""

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self):
        self._check_open()
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        return False


class AbortOnError:
    """Mixin of writers: ``with`` gives the writer, and a block that raises calls its ``abort()`` (the subclass's:
    discard everything written); a block that ends normally leaves the writer as it is."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.abort()
        return False
