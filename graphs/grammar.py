"""The grammar G from an ARPA file, through Kaldi's arpa2fst (the kaldilm package).

G is Kaldi's: states are n-gram histories, the start state is the ``<s>`` history,
``</s>`` is a final weight, backoff arcs read ``#0`` and output epsilon, and costs are
natural-log (ARPA log10 × ln 10, negated).  kaldilm aborts the process on a malformed
ARPA file, so it runs in a child process and its message becomes an
:class:`~wfst.errors.InputFileError` naming the file and line.
"""
from __future__ import annotations

import codecs
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pywrapfst as fst

from wfst.arpa import ArpaReader, check_sentence_marks, is_gzip, open_arpa, parse_ngram
from wfst.errors import InputFileError
from wfst.memory import note_child_peak
from wfst.symbols import EPSILON, WORD_DISAMBIG, is_disambig_symbol

_ERROR = re.compile(r"\[E\] line (\d+) \[(.*?)\]: (.*)")
_ERROR_NO_LINE = re.compile(r"\[E\] (.*)")
_WARNING = re.compile(r"\[W\] (.*)")


def arpa_vocabulary(path: str | os.PathLike) -> tuple[list[str], list[int]]:
    """The unigram words of an ARPA file and its n-gram counts per order.

    Checks the structure (wfst.arpa.ArpaReader) and every n-gram line (wfst.arpa.parse_ngram:
    fields, numbers, no probability above 1), n-grams listed twice, <s> and </s>, with
    line numbers, as the rescoring LM's reader does; kaldilm builds G from the lines.
    """
    reader = ArpaReader(path)
    words: list[str] = []
    seen: dict[int, set] = {}
    for no, order, line in reader:
        _, gram, _ = parse_ngram(path, no, order, line, top=order == len(reader.counts))
        if order == 1:
            if gram[0] in (EPSILON, WORD_DISAMBIG) or is_disambig_symbol(gram[0]):  # G's epsilon, its backoff
                # label, and what the lexicon's disambiguation symbols are called (the graph's lexicon.txt of
                # such a word could not be read back)
                raise InputFileError(path, no, f"{gram[0]!r} is reserved and cannot be a word of the LM")
            words.append(gram[0])
        key = " ".join(gram)
        if key in seen.setdefault(order, set()):
            raise InputFileError(path, no, f"{order}-gram {key!r} listed twice")
        seen[order].add(key)
    check_sentence_marks(path, seen.get(1, ()))
    return words, [reader.counts[k] for k in sorted(reader.counts)]


_CHILD = """
import resource, sys, kaldilm
arpa, out, syms, disambig = sys.argv[1:5]
kaldilm.arpa2fst(input_arpa=arpa, output_fst=out, disambig_symbol=disambig,
                 read_symbol_table=syms, max_arpa_warnings=-1)
print("wfst-child-peak-kib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
"""
_CHILD_PEAK = re.compile(r"^wfst-child-peak-kib (\d+)$", re.M)


def _plain_text(path: Path) -> bool:
    """Whether kaldilm can read the file as it is: not gzip, no byte-order mark, no \\r."""
    if is_gzip(path):
        return False
    with open(path, "rb") as f:
        head = f.read(1 << 20)
        if head.startswith(codecs.BOM_UTF8):
            return False
        while head:
            if b"\r" in head:
                return False
            head = f.read(1 << 20)
    return True


def grammar_fst(arpa_path: str | os.PathLike, words_txt: str | os.PathLike,
                max_warnings: int = 5) -> fst.MutableFst:
    """G for `arpa_path` with word ids from `words_txt` (which must hold every ARPA word and #0)."""
    arpa_path = Path(arpa_path)
    with tempfile.TemporaryDirectory(prefix="wfst-G-") as tmp:
        plain = arpa_path
        if not _plain_text(arpa_path):  # kaldilm reads LF text only: a \r would end each line's last field
            plain = Path(tmp) / "lm.arpa"
            with open_arpa(arpa_path) as src, open(plain, "w", encoding="utf-8") as dst:
                shutil.copyfileobj(src, dst)
        out = Path(tmp) / "G.fst"
        proc = subprocess.run([sys.executable, "-c", _CHILD, str(plain), str(out), str(words_txt),
                               WORD_DISAMBIG], capture_output=True, text=True, errors="replace")
        log = proc.stderr + proc.stdout
        if peak := _CHILD_PEAK.search(log):
            note_child_peak(int(peak.group(1)) / 1024)
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
            tail = " | ".join(line.strip() for line in log.strip().splitlines()[-5:]) or "no message"
            raise InputFileError(arpa_path, None, f"arpa2fst failed (exit {proc.returncode}): {tail}")
        G = fst.Fst.read(str(out))
    if not isinstance(G, fst.MutableFst):
        G = fst.convert(G, "vector")
    G.set_input_symbols(None)
    G.set_output_symbols(None)
    return G
