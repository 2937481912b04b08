"""Errors users can act on: each names the file (and line) or the option at fault."""
from __future__ import annotations

import os


class WfstError(Exception):
    """Base class of every error this package raises on purpose."""


class InputFileError(WfstError, ValueError):
    """A malformed line in an input file (tokens, lexicon, word list, ARPA)."""

    def __init__(self, path: str | os.PathLike, line: int | None, message: str):
        self.path = os.fspath(path)
        self.line = line
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")


class MissingFileError(WfstError, FileNotFoundError):
    """An input or graph file that does not exist or cannot be read."""

    def __init__(self, path: str | os.PathLike, what: str, reason: str = "not found"):
        self.path = os.fspath(path)
        super().__init__(f"cannot read {what} {self.path}: {reason}")


class GraphFormatError(WfstError, ValueError):
    """A graph file or graph directory that is corrupt or inconsistent."""
