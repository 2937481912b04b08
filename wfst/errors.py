"""Errors users can act on: each names the file (and line) or the option at fault.

Every error the package raises on purpose derives from :class:`WfstError`, and also from
the builtin exception it stands for (as pywrapfst's ``FstArgError(ValueError)`` does), so
``except ValueError`` or ``except OSError`` keeps working.
"""
from __future__ import annotations

import _signal
import functools
import os
import signal
import sys
import threading

_SIGINT = int(signal.SIGINT)


def user_stacklevel() -> int:
    """warnings.warn's stacklevel for the user's line: the first caller outside this package
    (its public calls reach a warning through wrappers and helpers of varying depth)."""
    package, frame, level = os.path.dirname(__file__), sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def interruptible(method):
    """Ctrl-C inside Numba code on the calling thread comes out as a SystemError chained to
    the KeyboardInterrupt ("returned a result with an exception set"): raise it as the
    KeyboardInterrupt it is, which `except KeyboardInterrupt` and the commands catch."""
    @functools.wraps(method)
    def run(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except SystemError as e:
            cause = e.__context__
            while cause is not None and not isinstance(cause, KeyboardInterrupt):
                cause = cause.__context__
            if cause is None:
                raise
            raise KeyboardInterrupt from None
    return run


def interrupts_held(method):
    """Ctrl-C held until the call ends, then raised: a stream call moves state the decoder's
    streams share (its slots' typed lists, the thread's scratch), and a KeyboardInterrupt in
    the middle of that (in Numba's unboxing of a typed list, say) left it corrupt: a later
    call on new streams crashed.  Only the main thread receives Ctrl-C; there the SIGINT
    handler is swapped for one that notes it, and the one before (Python's, or the
    caller's own) is given it when the call ends.  A call's work is done then, but what it
    returns is lost to the KeyboardInterrupt, as any interrupted call's.  (Through _signal:
    the signal module's enum conversions took 9 µs a call, a stream's chunk searches in tens.)"""
    @functools.wraps(method)
    def run(*args, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            return method(*args, **kwargs)
        previous = _signal.getsignal(_SIGINT)
        if previous is None:  # (a handler not set from Python: left alone)
            return method(*args, **kwargs)
        noted = []
        _signal.signal(_SIGINT, lambda signum, frame: noted.append(frame))
        try:
            return method(*args, **kwargs)
        finally:
            _signal.signal(_SIGINT, previous)
            if noted:
                if callable(previous):
                    previous(_SIGINT, noted[0])
                elif previous == _signal.SIG_DFL:
                    _signal.raise_signal(_SIGINT)
    return interruptible(run)


class WfstError(Exception):
    """Base class of every error this package raises on purpose."""


class _MadeOfParts:
    """An error whose message its constructor composes: pickled as its parts, so that it comes
    back from a worker process (pickle remakes an exception from its message alone, which such
    a constructor refuses: a multiprocessing pool's result thread died on it, the pool hung)."""

    _parts: tuple = ()

    def __reduce__(self):
        return type(self), self._parts


class OptionError(WfstError, ValueError):
    """An argument or command-line option whose value cannot work, or options that conflict.

    The message names the option and repeats the value."""


class InputFileError(_MadeOfParts, WfstError, ValueError):
    """A malformed line in an input file (tokens, lexicon, word list, ARPA)."""

    def __init__(self, path: str | os.PathLike, line: int | None, message: str):
        self._parts = (path, line, message)
        self.path = os.fspath(path)
        self.line = line
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")


class MissingFileError(_MadeOfParts, WfstError, FileNotFoundError):
    """An input or graph file that does not exist or cannot be read."""

    def __init__(self, path: str | os.PathLike, what: str, reason: str | None = None):
        self.path = os.fspath(path)
        reason = reason or ("is a directory" if os.path.isdir(self.path) else "not found")
        self._parts = (self.path, what, reason)  # (the reason found here, not where it is unpickled)
        super().__init__(f"cannot read {what} {self.path}: {reason}")


class OutputFileError(_MadeOfParts, WfstError, OSError):
    """An output file or directory that cannot be written."""

    def __init__(self, path: str | os.PathLike, what: str, reason: str):
        self._parts = (path, what, reason)
        self.path = os.fspath(path)
        super().__init__(f"cannot write {what} {self.path}: {reason}")


class SearchStateError(WfstError, TypeError):
    """A Decoder or Stream given to pickle or copy: it holds search state on its device."""


class GraphFormatError(WfstError, ValueError):
    """A graph file or graph directory that is corrupt or inconsistent."""


class DecodeInputError(WfstError, ValueError):
    """log_probs, lengths or boosts that cannot be decoded; names the utterance when one is at fault."""


class DecoderMemoryError(WfstError, MemoryError):
    """The search would need more memory than the machine has; says how much and why."""


class BoostError(DecodeInputError):
    """A boost map that cannot be used (not a mapping, NaN or infinite rewards)."""


class GraphBuildError(WfstError, RuntimeError):
    """Graph-compiler inputs that are individually valid but do not make a usable graph."""


class LmStoreError(WfstError, ValueError):
    """An LM store file that is missing, not a store, or damaged; says which and why."""


class VocabularyError(WfstError, ValueError):
    """A rescoring LM that cannot score the graph's words."""


class LogProbsWarning(UserWarning):
    """Emissions that decode but are no log-probabilities (a value above 0): probabilities, or
    logits before log_softmax.  Silence it where positive scores are meant (pseudo
    log-likelihoods): ``warnings.simplefilter("ignore", wfst.errors.LogProbsWarning)``."""
