"""The package version: the one place it is written (pyproject.toml reads it from here; index files record it)."""

__version__ = "0.1.0"
