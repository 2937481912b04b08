"""The lexicon L: words spelled in CTC tokens, with disambiguation symbols.

A lexicon comes from a lexicon file (``word tok1 tok2 ...`` per line, alternative
spellings on separate lines; Kaldi's lexiconp.txt, ``word prob tok1 tok2 ...``, puts each
spelling's probability on its first arc as -ln prob), or is derived from a word list with a sentencepiece
model (BPE pieces) or per character.  Per-character lexicons usually have a
word-boundary unit (wav2vec2's ``|``): it is then a separator between words,
optional at the start and end of an utterance, and not part of any spelling.
"""
from __future__ import annotations

import collections
import dataclasses
import itertools
import json
import math
import os
import re
import warnings

import pywrapfst as fst
from tqdm.auto import tqdm

from wfst.errors import InputFileError, MissingFileError, OptionError
from wfst.files import read_lines, split_fields
from wfst.symbols import BOS, EOS, EPSILON, WORD_DISAMBIG, TokenTable, WordTable, is_disambig_symbol

_WORD_SPECIALS = {EPSILON, WORD_DISAMBIG, BOS, EOS}


@dataclasses.dataclass(frozen=True)
class Lexicon:
    """Spellings (word, tokens) in input order, and words that could not be spelled."""

    entries: tuple[tuple[str, tuple[str, ...]], ...]
    separator: str | None = None
    unspellable: tuple[str, ...] = ()  # derived lexicons: words with tokens outside the set
    costs: tuple[float, ...] = ()  # lexiconp.txt: each entry's -ln probability (empty: none)

    @property
    def words(self) -> set[str]:
        return {w for w, _ in self.entries}

    def text(self) -> str:
        """The spellings as a lexicon file, without their probabilities (read_lexicon reads it
        back; word times read the spellings alone)."""
        return "".join(f"{w} {' '.join(p)}\n" for w, p in self.entries)

    def digest_text(self) -> str:
        """A canonical text of the lexicon, for fingerprints."""
        head = f"separator={json.dumps(self.separator)}\n"  # (no separator is not one named "None")
        costs = self.costs or (None,) * len(self.entries)
        return head + "".join(f"{w}\t{' '.join(p)}" + ("" if c is None else f"\t{c!r}") + "\n"
                              for (w, p), c in zip(self.entries, costs))


def _check_word(path, no, word):
    if word in _WORD_SPECIALS or is_disambig_symbol(word):
        raise InputFileError(path, no, f"{word!r} is reserved and cannot be a word")


_NUMBER = re.compile(r"[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?")


def read_lexicon(path: str | os.PathLike, tokens: TokenTable, separator: str | None = None) -> Lexicon:
    """Read ``word tok1 tok2 ...`` lines, or Kaldi's lexiconp.txt ``word prob tok1 tok2 ...``
    (every line's second field a number: its probability, in (0, 1]; where those numbers are
    tokens too, the file's name decides, with a warning); every token must be in `tokens`
    and not the blank."""
    known = set(tokens.symbols)
    blank = tokens.symbols[tokens.blank] if tokens.blank is not None else None
    rows = [(no, fields) for no, raw in enumerate(read_lines(path, "lexicon"), start=1)
            if (fields := split_fields(raw))]
    with_probability = bool(rows) and all(len(f) > 1 and _NUMBER.fullmatch(f[1]) for _, f in rows)
    if with_probability and all(t in known for _, f in rows for t in f[1:]):  # both readings spell every word
        with_probability = "lexiconp" in os.path.basename(path)  # (Kaldi's and icefall's name for it)
        if all(len(f) > 2 and 0 < float(f[1]) <= 1 for _, f in rows):
            no, f = rows[0]
            how = ("as Kaldi's lexiconp.txt (`word prob tokens`), by its name" if with_probability else
                   "as `word tokens` lines; a file named lexiconp.txt is read as Kaldi's `word prob tokens`")
            warnings.warn(f"{path}: every line's second field is a number and a token (line {no}: {f[1]!r} of "
                          f"{f[0]!r}); read {how}", stacklevel=2)
    seen: dict[tuple[str, tuple[str, ...]], int] = {}
    entries, costs = [], []
    for no, fields in rows:
        word, pron = fields[0], tuple(fields[1:])
        _check_word(path, no, word)
        if with_probability:
            p = float(pron[0])
            if not 0 < p <= 1:
                raise InputFileError(path, no, f"probability {pron[0]} of word {word!r} is not in (0, 1] "
                                     f"(a lexiconp.txt: every line's second field is a number)")
            costs.append(-math.log(p))
            pron = pron[1:]
        if not pron:
            raise InputFileError(path, no, f"word {word!r} has no tokens")
        for i, tok in enumerate(pron):
            if tok not in known:
                hint = (" (a probability? a lexiconp.txt has one on every line)"
                        if i == 0 and _NUMBER.fullmatch(tok) else "")
                raise InputFileError(path, no, f"token {tok!r} of word {word!r} is not in the token table{hint}")
            if tok == blank:
                raise InputFileError(path, no, f"word {word!r} is spelled with the blank {tok!r}")
            if tok == separator:
                raise InputFileError(path, no, f"word {word!r} contains the word-boundary unit {tok!r}")
        if (word, pron) in seen:
            raise InputFileError(path, no, f"duplicate entry {word!r} {' '.join(pron)!r} "
                                 f"(first on line {seen[word, pron]})")
        seen[word, pron] = no
        entries.append((word, pron))
    if not entries:
        raise InputFileError(path, None, "the lexicon is empty")
    return Lexicon(tuple(entries), separator, costs=tuple(costs))


def read_word_list(path: str | os.PathLike) -> list[str]:
    """Words, one per line (a Kaldi words.txt with ids works too; its specials are skipped)."""
    words, seen = [], {}
    for no, raw in enumerate(read_lines(path, "word list"), start=1):
        fields = split_fields(raw)
        if not fields:
            continue
        if len(fields) > 2 or (len(fields) == 2 and not fields[1].isdigit()):
            raise InputFileError(path, no, f"expected one word per line, got {raw!r}")
        word = fields[0]
        if word in _WORD_SPECIALS:
            continue
        _check_word(path, no, word)
        if word in seen:
            raise InputFileError(path, no, f"duplicate word {word!r} (first on line {seen[word]})")
        seen[word] = no
        words.append(word)
    if not words:
        raise InputFileError(path, None, "the word list is empty")
    return words


def _derive(words, spell, tokens: TokenTable, separator, what) -> Lexicon:
    words = list(words)
    if not words:
        raise OptionError(f"no words to spell ({what}): the word list is empty")
    known = set(tokens.symbols) - {separator}
    if tokens.blank is not None:
        known.discard(tokens.symbols[tokens.blank])
    entries, unspellable = [], []
    for word in tqdm(words, desc=f"lexicon ({what})", unit="word", leave=False, mininterval=1.0, disable=None):
        pron = tuple(spell(word))
        if pron and all(t in known for t in pron):
            entries.append((word, pron))
        else:
            unspellable.append(word)
    if not entries:
        raise OptionError(f"no word could be spelled with the token table ({what}), e.g. "
                          f"{', '.join(map(repr, unspellable[:5]))}: the tokens do not match the words")
    return Lexicon(tuple(entries), separator, tuple(unspellable))


def lexicon_from_chars(words, tokens: TokenTable, separator: str | None) -> Lexicon:
    """Spell each word per character; `separator` (e.g. ``|``) is the word-boundary unit."""
    if separator is not None and separator not in tokens.symbols:
        raise OptionError(f"word-boundary unit {separator!r} is not in the token table")
    if separator is not None and tokens.blank is not None and separator == tokens.symbols[tokens.blank]:
        raise OptionError(f"word-boundary unit {separator!r} is the blank; the word boundary must be another token")
    return _derive(words, list, tokens, separator, "characters")


def lexicon_from_sentencepiece(words, model_path: str | os.PathLike, tokens: TokenTable) -> Lexicon:
    """Spell each word with a sentencepiece model; its pieces must be in the token table."""
    import sentencepiece as spm

    if not os.path.isfile(model_path):
        raise MissingFileError(model_path, "sentencepiece model")
    try:
        sp = spm.SentencePieceProcessor(model_file=os.fspath(model_path))
    except (RuntimeError, OSError) as e:
        raise InputFileError(model_path, None, f"not a sentencepiece model ({e})") from None
    unk = sp.id_to_piece(sp.unk_id()) if sp.unk_id() >= 0 else None

    def spell(word):
        pieces = sp.encode(word, out_type=str)
        return [] if unk in pieces else pieces

    return _derive(words, spell, tokens, None, "sentencepiece")


def add_disambig(lexicon: Lexicon) -> tuple[list[tuple[str, tuple[str, ...]]], int]:
    """Append #1, #2, ... to spellings that are shared or are a prefix of another.

    Kaldi's add_lex_disambig.pl: this keeps L ∘ G determinizable.  #0 is kept for G's
    backoff arcs.  Returns the entries and D, the number of #k symbols (#0 included).
    """
    count = collections.Counter(p for _, p in lexicon.entries)
    prefixes = {p[:i] for _, p in lexicon.entries for i in range(1, len(p))}
    last: dict[tuple[str, ...], int] = collections.defaultdict(int)
    out, top = [], 0
    for word, pron in lexicon.entries:
        if count[pron] > 1 or pron in prefixes:
            last[pron] += 1
            top = max(top, last[pron])
            pron = pron + (f"#{last[pron]}",)
        out.append((word, pron))
    return out, top + 1


def lexicon_fst(entries, tokens: TokenTable, words: WordTable, separator: str | None = None,
                costs=()) -> fst.VectorFst:
    """L with disambiguation symbols (Kaldi's L_disambig.fst), output-label sorted.

    State 0 is the start and a final state.  Each spelling is a path 0 -> ... -> end
    with the word on its first arc, and its cost there (costs: one per entry, -ln of its
    probability; empty: none).  Without a separator the path ends at 0; with one,
    it ends at state 1 ("after a word", final), and ``sep:eps`` arcs 1 -> 0 and 0 -> 0
    make the separator required between words and optional at the edges.  ``#0:#0``
    loops at 0 (and 1) let G's backoff arcs through L ∘ G.
    """
    ilab = tokens.ilabels()
    wid = words.ids()
    L = fst.VectorFst()
    one = fst.Weight.one(L.weight_type())
    home = L.add_state()
    L.set_start(home)
    L.set_final(home)
    end = home
    if separator is not None:
        end = L.add_state()
        L.set_final(end)
        L.add_arc(end, fst.Arc(ilab[separator], 0, one, home))
        L.add_arc(home, fst.Arc(ilab[separator], 0, one, home))
    for s in {home, end}:
        L.add_arc(s, fst.Arc(ilab["#0"], wid[WORD_DISAMBIG], one, s))
    costs = costs or itertools.repeat(None)
    for (word, pron), cost in tqdm(zip(entries, costs), total=len(entries), desc="L", unit="word", leave=False,
                                   mininterval=1.0, disable=None):
        src, w = home, wid[word]
        first = one if cost is None else fst.Weight(L.weight_type(), cost)
        for i, tok in enumerate(pron):
            dst = end if i == len(pron) - 1 else L.add_state()
            L.add_arc(src, fst.Arc(ilab[tok], w if i == 0 else 0, first if i == 0 else one, dst))
            src = dst
    L.arcsort("olabel")
    return L
