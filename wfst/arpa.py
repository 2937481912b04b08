"""Reading ARPA n-gram files (plain or .gz): one check of their structure, shared by the
graph compiler (graphs.grammar) and the rescoring LM store (wfst.lm)."""
from __future__ import annotations

import gzip
import math
import os
import re
from pathlib import Path

from .errors import InputFileError, MissingFileError
from .files import split_fields

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
    try:
        logp = float(fields[0])
        bo = float(fields[k + 1]) if len(fields) == k + 2 else 0.0
    except ValueError:
        raise InputFileError(path, no, f"not a number in {line!r}") from None
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


class ArpaReader:
    """``for no, order, line in ArpaReader(path)``: the n-gram lines (stripped) with their
    line numbers and orders.

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
        path, counts = self.path, self.counts
        found: dict[int, int] = {}
        header_line: dict[int, int] = {}
        section = None  # None, "data", an order, or "end"
        bar = None
        if self.progress:
            from tqdm import tqdm

            bar = tqdm(total=path.stat().st_size, unit="B", unit_scale=True, desc=f"reading {path.name}")
        try:
            plain = not is_gzip(path)
            with open_arpa(path) as f:
                for no, raw in enumerate(f, start=1):
                    if bar is not None and no % 65536 == 0 and plain:
                        bar.n = f.buffer.tell()
                        bar.refresh()
                    line = raw.strip(" \t\r\n")  # (not U+3000 or U+00A0: a word may be one)
                    if not line:
                        continue
                    if section == "end":
                        raise InputFileError(path, no, f"text after \\end\\: {line!r}")
                    if line.startswith("\\"):
                        m = _SECTION.fullmatch(line)
                        if line == "\\data\\" and section is None:
                            section = "data"
                        elif m and counts:
                            order = int(m.group(1))
                            expected = 1 if section == "data" else section + 1
                            if order != expected:
                                raise InputFileError(path, no, f"found {line} where \\{expected}-grams: was expected")
                            if order not in counts:
                                raise InputFileError(path, no, f"{line} is not declared in the \\data\\ header")
                            section = order
                            found[order] = 0
                        elif line == "\\end\\" and counts:
                            section = "end"
                        else:
                            raise InputFileError(path, no, f"unexpected section line {line!r}")
                        continue
                    if section == "data":
                        m = _COUNT.fullmatch(line)
                        if not m:
                            raise InputFileError(path, no, f"bad \\data\\ line {line!r}")
                        if int(m.group(1)) in counts:
                            raise InputFileError(path, no, f"a second count of {m.group(1)}-grams (the first on "
                                                 f"line {header_line[int(m.group(1))]})")
                        counts[int(m.group(1))] = int(m.group(2))
                        header_line[int(m.group(1))] = no
                    elif section is None:
                        raise InputFileError(path, no, f"text before the \\data\\ header: {line!r}")
                    else:
                        found[section] += 1
                        yield no, section, line
        except UnicodeDecodeError as e:
            raise InputFileError(path, None, f"not UTF-8 text ({e.reason})") from None
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
                raise InputFileError(path, header_line[order], f"the header says {n} {order}-grams, "
                                     f"the \\{order}-grams: section has {found.get(order, 0)}")
