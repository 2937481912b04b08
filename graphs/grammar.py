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
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import NamedTuple

import pywrapfst as fst

from wfst.arpa import ArpaReader, check_sentence_marks, is_gzip, open_arpa, parse_ngram
from wfst.errors import InputFileError
from wfst.memory import note_child_peak
from wfst.symbols import EPSILON, WORD_DISAMBIG, is_disambig_symbol

_ERROR = re.compile(r"\[E\] line (\d+) \[(.*?)\]: (.*)")
_ERROR_NO_LINE = re.compile(r"\[E\] (.*)")
_WARNING = re.compile(r"\[W\] (.*)")


class ArpaVocabulary(NamedTuple):
    words: list[str]  # the unigrams, in the file's order
    counts: list[int]  # the header's n-gram count per order
    orphans: list[int]  # line numbers of the n-grams G leaves out: their history is no n-gram of the file, or
    #                     a word of theirs no unigram


def arpa_vocabulary(path: str | os.PathLike) -> ArpaVocabulary:
    """The unigram words of an ARPA file, its n-gram counts per order and its orphan n-grams.

    Checks the structure (wfst.arpa.ArpaReader) and every n-gram line (wfst.arpa.parse_ngram:
    fields, numbers, no probability above 1), n-grams listed twice, <s> and </s>, with
    line numbers, as the rescoring LM's reader does; kaldilm builds G from the lines.

    An n-gram of order 3 or more whose history is not an n-gram of the file (or is one
    skipped so) is an orphan, skipped with a warning, as the rescoring LM's reader skips it.
    arpa2fst skips it too, but only while no earlier n-gram has made its history's state: a
    file's line order decided whether the graph had it (grammar_fst leaves them out itself).
    So is an n-gram with a word that is no unigram: arpa2fst skipped it only where the word
    was not in words.txt, so a lexicon that spelled the word put it in the graph.
    """
    reader = ArpaReader(path)
    words: list[str] = []
    seen: dict[int, set] = {}
    orphans: list[int] = []
    unknown: list[int] = []  # lines of n-grams with a word that is no unigram
    orphan_keys: dict[int, set] = {}
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
        if order == 1:
            continue
        if not all(w in seen[1] for w in gram):
            unknown.append(no)
        elif order > 2:
            history = key[:len(key) - len(gram[-1]) - 1]
            if history not in seen[order - 1] or history in orphan_keys.get(order - 1, ()):
                orphans.append(no)
                orphan_keys.setdefault(order, set()).add(key)
    check_sentence_marks(path, seen.get(1, ()))
    if unknown:
        warnings.warn(f"{path}: {len(unknown)} n-grams skipped with a word that is not a unigram of the file (the "
                      f"first on line {unknown[0]}), as Kaldi's arpa2fst skips them", stacklevel=2)
    if orphans:
        warnings.warn(f"{path}: {len(orphans)} n-grams skipped whose history is not an n-gram of the file (the "
                      f"first on line {orphans[0]}), as Kaldi's arpa2fst skips them", stacklevel=2)
    return ArpaVocabulary(words, [reader.counts[k] for k in sorted(reader.counts)], sorted(orphans + unknown))


_CHILD = """
import resource, sys, kaldilm
arpa, out, syms, disambig = sys.argv[1:5]
kaldilm.arpa2fst(input_arpa=arpa, output_fst=out, disambig_symbol=disambig,
                 read_symbol_table=syms, max_arpa_warnings=-1)
print("wfst-child-peak-kib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
"""
_CHILD_PEAK = re.compile(r"^wfst-child-peak-kib (\d+)$", re.M)


_INDENTED_SECTION = re.compile(rb"\n[ \t]+\\")  # a section line (\data\, \1-grams:, \end\) after spaces


def _plain_text(path: Path) -> bool:
    """Whether kaldilm can read the file as it is: not gzip, no byte-order mark, no \\r, no
    indented section line (which it takes for an n-gram)."""
    if is_gzip(path):
        return False
    with open(path, "rb") as f:
        head = f.read(1 << 20)
        if head.startswith(codecs.BOM_UTF8):
            return False
        tail = b"\n"
        while head:
            if b"\r" in head or _INDENTED_SECTION.search(tail + head):
                return False
            tail = head[-64:]
            head = f.read(1 << 20)
    return True


def _flush_section(line: str) -> str:
    """A section line flush left, any other line as it is."""
    if line[:1] not in (" ", "\t"):
        return line
    stripped = line.lstrip(" \t")
    return stripped if stripped.startswith("\\") else line


def grammar_fst(arpa_path: str | os.PathLike, words_txt: str | os.PathLike, max_warnings: int = 5,
                orphans: list[int] | None = None) -> fst.MutableFst:
    """G for `arpa_path` with word ids from `words_txt` (which must hold every ARPA word and #0),
    without the file's orphan n-grams (orphans: their line numbers, arpa_vocabulary's; found
    here when not given)."""
    arpa_path = Path(arpa_path)
    if orphans is None:
        orphans = arpa_vocabulary(arpa_path).orphans
    with tempfile.TemporaryDirectory(prefix="wfst-G-") as tmp:
        plain = arpa_path
        if orphans or not _plain_text(arpa_path):  # kaldilm reads LF text only: a \r would end each line's
            plain = Path(tmp) / "lm.arpa"  # last field
            skip = set(orphans)  # (blanked, so that kaldilm's line numbers stay the file's: it skips blank lines)
            with open_arpa(arpa_path) as src, open(plain, "w", encoding="utf-8") as dst:
                dst.writelines("\n" if no in skip else _flush_section(line) for no, line in enumerate(src, start=1))
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
