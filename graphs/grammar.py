"""The grammar G from an ARPA file, through Kaldi's arpa2fst (the kaldilm package).

G is Kaldi's: states are n-gram histories, the start state is the ``<s>`` history,
``</s>`` is a final weight, backoff arcs read ``#0`` and output epsilon, and costs are
natural-log (ARPA log10 × ln 10, negated).  kaldilm aborts the process on a malformed
ARPA file, so it runs in a child process and its message becomes an
:class:`~wfst.errors.InputFileError` naming the file and line.
"""
from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pywrapfst as fst

from wfst.errors import InputFileError, MissingFileError
from wfst.symbols import WORD_DISAMBIG

_ERROR = re.compile(r"\[E\] line (\d+) \[(.*?)\]: (.*)")
_ERROR_NO_LINE = re.compile(r"\[E\] (.*)")
_WARNING = re.compile(r"\[W\] (.*)")


def _open_arpa(path):
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(path, "ARPA language model")
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")


def arpa_vocabulary(path: str | os.PathLike) -> tuple[list[str], list[int]]:
    """The unigram words of an ARPA file and its n-gram counts per order.

    Checks the structure (header, section order, counts against the header, unigram
    lines) with line numbers; kaldilm parses the higher-order lines.
    """
    counts: dict[int, int] = {}
    found: dict[int, int] = {}
    header_line: dict[int, int] = {}
    words: list[str] = []
    section = None  # None, "data", an order, or "end"
    try:
        with _open_arpa(path) as f:
            for no, raw in enumerate(f, start=1):
                line = raw.strip()
                if not line:
                    continue
                if section == "end":
                    raise InputFileError(path, no, f"text after \\end\\: {line!r}")
                if line.startswith("\\"):
                    m = re.fullmatch(r"\\(\d+)-grams:", line)
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
                    m = re.fullmatch(r"ngram\s+(\d+)\s*=\s*(\d+)", line)
                    if not m:
                        raise InputFileError(path, no, f"bad \\data\\ line {line!r}")
                    counts[int(m.group(1))] = int(m.group(2))
                    header_line[int(m.group(1))] = no
                elif section is None:
                    raise InputFileError(path, no, f"text before the \\data\\ header: {line!r}")
                else:
                    found[section] += 1
                    if section == 1:
                        fields = line.split()
                        try:
                            if len(fields) not in (2, 3):
                                raise ValueError
                            float(fields[0]), len(fields) == 3 and float(fields[2])
                        except ValueError:
                            raise InputFileError(path, no, f"invalid unigram line {line!r}") from None
                        words.append(fields[1])
    except UnicodeDecodeError as e:
        raise InputFileError(path, None, f"not UTF-8 text ({e.reason})") from None
    except MissingFileError:
        raise
    except (OSError, EOFError) as e:
        raise InputFileError(path, None, f"cannot read: {e}") from None
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
    return words, [counts[k] for k in sorted(counts)]


_CHILD = """
import sys, kaldilm
arpa, out, syms, disambig = sys.argv[1:5]
kaldilm.arpa2fst(input_arpa=arpa, output_fst=out, disambig_symbol=disambig,
                 read_symbol_table=syms, max_arpa_warnings=-1)
"""


def grammar_fst(arpa_path: str | os.PathLike, words_txt: str | os.PathLike,
                max_warnings: int = 5) -> fst.MutableFst:
    """G for `arpa_path` with word ids from `words_txt` (which must hold every ARPA word and #0)."""
    arpa_path = Path(arpa_path)
    with tempfile.TemporaryDirectory(prefix="wfst-G-") as tmp:
        plain = arpa_path
        if arpa_path.suffix == ".gz":
            plain = Path(tmp) / "lm.arpa"
            with _open_arpa(arpa_path) as src, open(plain, "w", encoding="utf-8") as dst:
                shutil.copyfileobj(src, dst)
        out = Path(tmp) / "G.fst"
        proc = subprocess.run([sys.executable, "-c", _CHILD, str(plain), str(out), str(words_txt),
                               WORD_DISAMBIG], capture_output=True, text=True, errors="replace")
        log = proc.stderr + proc.stdout
        notes = [m.group(1) for m in map(_WARNING.search, log.splitlines()) if m]
        if notes:
            shown = "\n  ".join(notes[:max_warnings])
            more = f"\n  ... and {len(notes) - max_warnings} more" if len(notes) > max_warnings else ""
            warnings.warn(f"{arpa_path}: {len(notes)} warnings from arpa2fst:\n  {shown}{more}", stacklevel=2)
        if proc.returncode != 0 or not out.is_file():
            for line in log.splitlines():
                m = _ERROR.search(line)
                if m:
                    lineno = int(m.group(1))
                    # kaldilm counts lines of the (decompressed) text; same numbering.
                    raise InputFileError(arpa_path, lineno, f"{m.group(3)}: {m.group(2)!r}")
            for line in log.splitlines():
                m = _ERROR_NO_LINE.search(line)
                if m:
                    raise InputFileError(arpa_path, None, m.group(1))
            tail = "\n".join(log.strip().splitlines()[-5:])
            raise InputFileError(arpa_path, None, f"arpa2fst failed (exit {proc.returncode}):\n{tail}")
        G = fst.Fst.read(str(out))
    if not isinstance(G, fst.MutableFst):
        G = fst.convert(G, "vector")
    G.set_input_symbols(None)
    G.set_output_symbols(None)
    return G
