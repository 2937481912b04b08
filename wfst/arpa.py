"""Reading ARPA n-gram files (plain or .gz): one check of their structure, shared by the
graph compiler (graphs.grammar) and the rescoring LM store (wfst.lm)."""
from __future__ import annotations

import gzip
import math
import os
import re
from pathlib import Path

from .errors import InputFileError, MissingFileError
from .files import check_no_nul, split_fields

_SECTION = re.compile(r"\\(\d+)-grams:")
_COUNT = re.compile(r"ngram\s+(\d+)\s*=\s*(\d+)")


def is_gzip(path: str | os.PathLike) -> bool:
    """Whether the file is gzip-compressed (by its magic bytes, whatever its name)."""
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def open_arpa(path: str | os.PathLike):
    """An ARPA file as UTF-8 text, gunzipped when it is gzip; any line ending reads as a
    newline and a byte-order mark is dropped."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(path, "ARPA language model")
    return gzip.open(path, "rt", encoding="utf-8-sig") if is_gzip(path) else open(path, encoding="utf-8-sig")


# an ARPA number: ASCII decimal, as kenlm and arpa2fst read them (Python's float() also takes
# '-1_0', '-Infinity' and other scripts' digits, which arpa2fst read as something else: -1)
_NUMBER = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf|nan)", re.ASCII | re.IGNORECASE)


def _number(text: str) -> float | None:
    """The ARPA number `text`, or None where it is none."""
    return float(text) if _NUMBER.fullmatch(text) is not None else None


MAX_LOG10 = 1e4  # |log10 value| beyond it: no LM's number (-99 is "never"); OpenFST's determinisation spun on -1e38


def parse_ngram(path, no: int, k: int, line: str, top: bool = False) -> tuple[float, list[str], float]:
    """(log10 probability, the k words, log10 backoff or 0) of a k-gram line (top: k is the
    LM's highest order); an InputFileError naming the line for a wrong number of fields, a
    backoff on a highest-order n-gram (nothing backs off from it; kaldilm and kenlm refuse
    it too), a value that is not a number, NaN, +inf, an infinite backoff or one of size
    above 1e4, and a positive log10 probability (a probability above 1, which kenlm refuses
    too)."""
    fields = split_fields(line)
    if len(fields) not in (k + 1, k + 2):
        raise InputFileError(path, no, f"a {k}-gram line needs {k + 1} or {k + 2} fields: {line!r}")
    if top and len(fields) == k + 2:
        raise InputFileError(path, no, f"a backoff weight on a {k}-gram, the LM's highest order (nothing backs "
                             f"off from it): {line!r}")
    logp = _number(fields[0])
    bo = _number(fields[k + 1]) if len(fields) == k + 2 else 0.0
    if logp is None or bo is None:
        raise InputFileError(path, no, f"not a number in {line!r}")
    if not (math.isfinite(bo) and (math.isfinite(logp) or logp == -math.inf)):
        raise InputFileError(path, no, f"NaN or infinite value in {line!r}")
    if logp > 0:
        raise InputFileError(path, no, f"positive log10 probability {fields[0]} (a probability above 1) in {line!r}")
    if abs(bo) > MAX_LOG10 or (math.isfinite(logp) and -logp > MAX_LOG10):
        raise InputFileError(path, no, f"a log10 value beyond {MAX_LOG10:g} in size in {line!r} (write -99 for a "
                             f"probability of zero)")
    return logp, fields[1:k + 1], bo


def check_sentence_marks(path, unigrams) -> None:
    """An LM needs the unigrams <s> (its start state) and </s> (sentences end)."""
    for mark, why in (("<s>", "the LM has no sentence start"), ("</s>", "no sentence can end")):
        if mark not in unigrams:
            raise InputFileError(path, None, f"no {mark} unigram: {why}")


def _first_non_utf8(path: Path) -> tuple[int | None, int]:
    """(line number, byte in it) of the first text that is not UTF-8 (the lines read in
    blocks of characters: the decoder's error says neither)."""
    with (gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")) as f:
        for no, line in enumerate(f, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as e:
                return no, e.start + 1  # (counted from 1, as the line)
    return None, 0


class CountMismatch(InputFileError):
    """A section whose number of lines differs from the header's count: found at the end of
    the file, after every line was read (a line listed twice shows as one too many)."""


class ArpaReader:
    """``for no, order, line in ArpaReader(path)``: the n-gram lines (stripped) with their
    line numbers and orders; ``blocks()``: the same a block of lines at a time.

    The structure is checked while reading, each fault an InputFileError naming the file
    and line: text before the \\data\\ header, a bad or repeated count line, sections out
    of order or not in the header, text after \\end\\, a missing \\end\\ (a truncated
    file), a section whose number of lines differs from the header's count, orders that
    are not 1..N, text that is not UTF-8.  The lines themselves are the caller's to parse
    (parse_ngram).  `counts` holds the header's count per order once the first section
    starts.
    """

    def __init__(self, path: str | os.PathLike, *, progress: bool = False):
        self.path = Path(path)
        if not self.path.is_file():
            raise MissingFileError(self.path, "ARPA language model")
        self.progress = progress
        self.counts: dict[int, int] = {}

    def __iter__(self):
        for no, order, block, _ in self.blocks():
            for i, raw in enumerate(block.split("\n")[:-1]):
                line = raw.strip(" \t\r\n")  # (not U+3000 or U+00A0: a word may be one)
                if line:
                    yield no + i, order, line

    block_chars = 1 << 22  # read at a time (about)

    def blocks(self):
        """(line number of its first line, order, text, lines that are not blank): runs of
        whole lines of one n-gram section, each line ending in a newline, blank lines
        included (the lines are those of the file read with universal newlines: no carriage
        returns).  A run ends where a section does and at about `block_chars` characters, so
        that a caller can hand the text of a big LM's sections to compiled code a block at a
        time."""
        path, counts = self.path, self.counts
        found: dict[int, int] = {}
        header_line: dict[int, int] = {}
        section = None  # None, "data", an order, or "end"
        bar = None
        if self.progress:
            from tqdm import tqdm

            bar = tqdm(total=path.stat().st_size, unit="B", unit_scale=True, desc=f"reading {path.name}")
        no = 0  # lines read
        try:
            plain = not is_gzip(path)
            with open_arpa(path) as f:
                while True:
                    text = f.read(self.block_chars)
                    if not text:
                        break
                    if not text.endswith("\n"):
                        text += f.readline()
                        text += "" if text.endswith("\n") else "\n"  # (the file's last line)
                    check_no_nul(path, text, no)
                    if bar is not None:  # (gzip: the compressed bytes read, as the bar's total counts them)
                        bar.n = f.buffer.tell() if plain else f.buffer.fileobj.tell()
                        bar.refresh()
                    pos = 0
                    indented = text.startswith((" ", "\t")) or "\n " in text or "\n\t" in text
                    while pos < len(text):
                        if isinstance(section, int):  # n-gram lines up to the next line that starts a section
                            end = _section_start(text, pos, indented)
                            if end > pos:
                                block = text[pos:end]
                                lines = block.count("\n")
                                kept = lines - _blank_lines(block, indented)
                                found[section] += kept
                                yield no + 1, section, block, kept
                                no += lines
                                pos = end
                                continue
                        end = text.index("\n", pos) + 1
                        no += 1
                        section = self._line(no, text[pos:end].strip(" \t\r\n"), section, found, header_line)
                        pos = end
        except UnicodeDecodeError as e:
            line, at = _first_non_utf8(path)
            raise InputFileError(path, line, f"not UTF-8 text ({e.reason} at byte {at} of the line)") from None
        except MissingFileError:
            raise
        except (OSError, EOFError) as e:
            raise InputFileError(path, None, f"cannot read: {e}") from None
        finally:
            if bar is not None:
                bar.close()
        if not counts:
            raise InputFileError(path, None, "no \\data\\ header: not an ARPA file")
        if sorted(counts) != list(range(1, len(counts) + 1)):
            raise InputFileError(path, None, f"n-gram orders {sorted(counts)} are not 1..N")
        if section != "end":
            raise InputFileError(path, None, "no \\end\\ line: the file is truncated")
        for order, n in counts.items():
            if found.get(order, 0) != n:
                raise CountMismatch(path, header_line[order], f"the header says {n} {order}-grams, "
                                    f"the \\{order}-grams: section has {found.get(order, 0)}")

    def _line(self, no: int, line: str, section, found: dict, header_line: dict):
        """One line outside the n-gram lines (stripped): the header's, a section line, a blank
        line, or a fault.  Returns the section it leaves the reader in."""
        path, counts = self.path, self.counts
        if not line:
            return section
        if section == "end":
            raise InputFileError(path, no, f"text after \\end\\: {line!r}")
        if line.startswith("\\"):
            m = _SECTION.fullmatch(line)
            if line == "\\data\\" and section is None:
                return "data"
            if m and counts:
                order = int(m.group(1))
                expected = 1 if section == "data" else section + 1
                if order != expected:
                    raise InputFileError(path, no, f"found {line} where \\{expected}-grams: was expected")
                if order not in counts:
                    raise InputFileError(path, no, f"{line} is not declared in the \\data\\ header")
                found[order] = 0
                return order
            if line == "\\end\\" and counts:
                return "end"
            raise InputFileError(path, no, f"unexpected section line {line!r}")
        if section == "data":
            m = _COUNT.fullmatch(line)
            if not m:
                raise InputFileError(path, no, f"bad \\data\\ line {line!r}")
            if int(m.group(1)) in counts:
                raise InputFileError(path, no, f"a second count of {m.group(1)}-grams (the first on "
                                     f"line {header_line[int(m.group(1))]})")
            counts[int(m.group(1))] = int(m.group(2))
            header_line[int(m.group(1))] = no
            return section
        raise InputFileError(path, no, f"text before the \\data\\ header: {line!r}")


_SECTION_LINE = re.compile(r"^[ \t]*\\", re.M)  # a line that starts a section (or \end\, or is a fault)
_BLANK_LINE = re.compile(r"^[ \t]*\n", re.M)  # (the lines of a block all end in a newline)


def _section_start(text: str, pos: int, indented: bool) -> int:
    """Where the first line of text[pos:] (pos: a line's start) that starts with a backslash
    after spaces or tabs begins; len(text) if none.  (indented: whether any line of text
    starts with a space or a tab; where none does, str.find: a regular expression anchored at
    every line start reads a big LM's text 10x slower.)"""
    if indented:
        m = _SECTION_LINE.search(text, pos)
        return m.start() if m else len(text)
    if text.startswith("\\", pos):
        return pos
    i = text.find("\n\\", pos)
    return i + 1 if i >= 0 else len(text)


def _blank_lines(block: str, indented: bool) -> int:
    """The blank lines of a block of whole lines (none, by str.find, in most blocks)."""
    if not indented and "\n\n" not in block and not block.startswith("\n"):
        return 0
    return len(_BLANK_LINE.findall(block))
