"""Reading input text files with clear errors, and writing files atomically."""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import sys
import tempfile
from pathlib import Path

from .errors import InputFileError, MissingFileError, OptionError, OutputFileError

_UMASK = os.umask(0)
os.umask(_UMASK)


def sha256_file(path: str | os.PathLike) -> str:
    """The file's SHA-256, hex (read in blocks: an LM of gigabytes is not held in memory)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_path(path, what: str) -> Path:
    """`path` as a Path, or an OptionError naming `what`: an int was opened as a file
    descriptor (and closed: True is stdout), None raised a TypeError, "" meant the current
    directory."""
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        shown = "an empty path" if isinstance(path, str) else f"{type(path).__name__} {path!r}"
        raise OptionError(f"the {what} must be a path (a str or os.PathLike); got {shown}")
    return Path(path)


def read_lines(path: str | os.PathLike, what: str) -> list[str]:
    """All lines of a UTF-8 text file (ended by \n, \r\n or \r: not by the other line
    breaks Unicode has, U+2028 or U+0085, which a symbol may be), or a MissingFileError that
    says which file and why."""
    check_path(path, what)
    try:
        with open(path, encoding="utf-8-sig") as f:  # -sig: a byte-order mark (Windows editors) is dropped
            text = f.read()  # (universal newlines made \r\n and \r into \n)
    except (FileNotFoundError, IsADirectoryError):  # (the error says which)
        raise MissingFileError(path, what) from None
    except UnicodeDecodeError as e:
        raise InputFileError(path, None, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise MissingFileError(path, what, e.strerror or str(e)) from None
    check_no_nul(path, text, 0)
    lines = text.split("\n")
    if lines[-1] == "":  # (the last line's end)
        lines.pop()
    return lines


def check_no_nul(path, text: str, lines_before: int) -> None:
    """An InputFileError naming the line of the first NUL character in `text`, which starts
    after `lines_before` lines of the file: a symbol that holds one is cut there by OpenFST's
    symbol tables (a graph build failed naming a temporary words.txt)."""
    at = text.find("\x00")
    if at >= 0:
        raise InputFileError(path, lines_before + text.count("\n", 0, at) + 1,
                             "a NUL character (\\x00): no symbol may hold one")


def split_fields(line: str) -> list[str]:
    """The fields of a symbol-table, lexicon or ARPA line: split at ASCII spaces and tabs only,
    as Kaldi and OpenFST read them (str.split() also splits at U+3000 or U+00A0, which a
    token or word may be, and shifted every later token a column)."""
    return [f for f in _FIELD_BREAK.split(line) if f]


_FIELD_BREAK = re.compile(r"[ \t\r\n]+")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike):
    """Yield a temporary path beside `path`; move it into place only if the block succeeds.

    A path that is a symlink or no regular file (/dev/stdout, a FIFO) is yielded itself and
    written through: replacing it would put a file where the link or the device was (as root,
    /dev/stdout itself).  A file replaced keeps its mode."""
    path = Path(path)
    if path.is_symlink() or (path.exists() and not path.is_file() and not path.is_dir()):
        yield str(path)
        return
    mode = stat.S_IMODE(path.stat().st_mode) if path.is_file() else 0o666 & ~_UMASK
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, mode)  # (mkstemp makes 0600)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write `text` to the file `path` whole (atomic_path), or through sys.stdout or
    sys.stderr where `path` is the file one of them writes (/dev/stdout with stdout sent to a
    file: opened again, it was truncated and written from its start, and the process's own
    lines after it wrote over the text)."""
    try:
        stream = _standard_stream(path)
        if stream is not None:
            stream.write(text)
            stream.flush()
            return
        with atomic_path(path) as tmp:
            Path(tmp).write_text(text, encoding="utf-8")
    except OSError as e:  # a full disk, a path made a directory meanwhile: say which file
        raise OutputFileError(path, "file", e.strerror or str(e)) from None


def _standard_stream(path: str | os.PathLike):
    """sys.stdout or sys.stderr where `path` is a link to or a device of the file it writes
    (its file descriptor's), else None."""
    path = Path(path)
    if not path.is_symlink() and (path.is_file() or not path.exists()):  # (a file named: replaced, as ever)
        return None
    try:
        target = path.stat()
    except OSError:
        return None
    for stream in (sys.stdout, sys.stderr):
        try:
            own = os.fstat(stream.fileno())
        except (AttributeError, OSError, ValueError):  # (a stream with no file: a test's capture, io.StringIO)
            continue
        if (own.st_dev, own.st_ino) == (target.st_dev, target.st_ino):
            return stream
    return None


def why_unwritable(path: str | os.PathLike, make_parents: bool = False) -> str | None:
    """Why a file cannot be written at `path`, or None: for commands to check their outputs
    before the work, not after it.  make_parents: the writer makes missing folders first."""
    path = Path(path)
    if path.is_dir():
        return "it is a directory"
    if path.exists() and (path.is_symlink() or not path.is_file()):  # written through (atomic_path)
        return None if os.access(path, os.W_OK) else f"no permission to write {path}"
    parent = path.parent
    while make_parents and not parent.exists() and parent.parent != parent:
        parent = parent.parent
    if not parent.exists():
        return f"the folder {parent} does not exist"
    if not parent.is_dir():
        return f"{parent} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"no permission to write in {parent}"
    if path.is_file() and _sticky_and_not_ours(parent, path):  # (as another user's file in /tmp)
        return f"{path} is another user's, in a folder where only its owner may replace it"
    return None


def _sticky_and_not_ours(folder: Path, path: Path) -> bool:
    """Whether a file cannot be replaced by a rename into `folder` (its sticky bit set, and
    neither the folder nor the file this user's, who is not root): atomic_path's way."""
    uid = os.geteuid() if hasattr(os, "geteuid") else None
    if uid in (None, 0) or not folder.stat().st_mode & stat.S_ISVTX:
        return False
    return path.stat().st_uid != uid and folder.stat().st_uid != uid
