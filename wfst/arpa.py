"""Reading ARPA n-gram files (plain or .gz): one check of their structure, shared by the
graph compiler (graphs.grammar) and the rescoring LM store (wfst.lm)."""
from __future__ import annotations

import gzip
import os
import re
from pathlib import Path

from .errors import InputFileError, MissingFileError

_SECTION = re.compile(r"\\(\d+)-grams:")
_COUNT = re.compile(r"ngram\s+(\d+)\s*=\s*(\d+)")


def open_arpa(path: str | os.PathLike):
    """An ARPA file as UTF-8 text (gunzipped when it ends in .gz)."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(path, "ARPA language model")
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")


class ArpaReader:
    """``for no, order, line in ArpaReader(path)``: the n-gram lines (stripped) with their
    line numbers and orders.

    The structure is checked while reading, each fault an InputFileError naming the file
    and line: text before the \\data\\ header, a bad count line, sections out of order,
    text after \\end\\, a missing \\end\\ (a truncated file), a section whose number of
    lines differs from the header's count, orders that are not 1..N, text that is not
    UTF-8.  The lines themselves are the caller's to parse.  `counts` holds the header's
    count per order once the first section starts.
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
            with open_arpa(path) as f:
                for no, raw in enumerate(f, start=1):
                    if bar is not None and no % 65536 == 0 and path.suffix != ".gz":
                        bar.n = f.buffer.tell()
                        bar.refresh()
                    line = raw.strip()
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
        if sorted(counts) != list(range(1, max(counts) + 1)):
            raise InputFileError(path, None, f"n-gram orders {sorted(counts)} are not 1..N")
        if section != "end":
            raise InputFileError(path, None, "no \\end\\ line: the file is truncated")
        for order, n in counts.items():
            if found.get(order, 0) != n:
                raise InputFileError(path, header_line[order], f"the header says {n} {order}-grams, "
                                     f"the \\{order}-grams: section has {found.get(order, 0)}")
