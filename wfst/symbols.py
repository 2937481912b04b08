"""Token and word tables, and the one place that fixes how logit columns map to FST labels.

Convention (riva/Kaldi CTC): FST label 0 is epsilon, so the FST input label of a token
is its logit column + 1.  Disambiguation symbols #0, #1, ... follow the tokens.
A graph directory's tokens.txt is the FST input symbol table:

    <eps> 0
    <blk> 1        (or wherever the model's blank column is)
    ...tokens, id = column + 1...
    #0 V+1
    #1 V+2 ...
"""
from __future__ import annotations

import dataclasses
import json
import operator
import os
import re

from .errors import InputFileError, OptionError
from .files import read_lines, split_fields, write_text_atomic

EPSILON = "<eps>"
BLANK_NAMES = ("<blk>", "<blank>", "<b>")
HF_BLANK = "<pad>"  # the CTC blank of a HuggingFace vocab.json (its tokenizer's pad token)
_DISAMBIG = re.compile(r"#\d+")

# Word-level specials, as Kaldi's words.txt has them.
WORD_DISAMBIG = "#0"
BOS = "<s>"
EOS = "</s>"


def ilabel_of_column(column: int) -> int:
    """FST input label of the token in logit column `column`."""
    return column + 1


def column_of_ilabel(ilabel: int) -> int:
    """Logit column read by an arc with FST input label `ilabel` (> 0)."""
    return ilabel - 1


def is_disambig_symbol(symbol: str) -> bool:
    return _DISAMBIG.fullmatch(symbol) is not None


@dataclasses.dataclass(frozen=True)
class TokenTable:
    """CTC units by logit column, the blank's column, and the number of #k symbols."""

    symbols: tuple[str, ...]
    blank: int | None
    num_disambig: int = 0

    def __post_init__(self):
        if isinstance(self.symbols, str) or not isinstance(self.symbols, (tuple, list)):
            raise OptionError(f"TokenTable: symbols must be a tuple of str, one per logit column; got "
                              f"{type(self.symbols).__name__}")
        object.__setattr__(self, "symbols", tuple(self.symbols))  # (a list would make the table unhashable)
        if not self.symbols:
            raise OptionError("TokenTable: no symbols")
        seen: dict[str, int] = {}
        for column, sym in enumerate(self.symbols):
            if not isinstance(sym, str) or split_fields(sym) != [sym]:
                raise OptionError(f"TokenTable: column {column}'s symbol {sym!r} is not a str without whitespace "
                                  f"(tokens.txt lines are 'symbol id')")
            if sym == EPSILON or is_disambig_symbol(sym):
                raise OptionError(f"TokenTable: column {column}'s symbol {sym!r} is reserved for the FST's "
                                  f"epsilon or disambiguation symbols (num_disambig counts those)")
            if sym in seen:
                raise OptionError(f"TokenTable: symbol {sym!r} at columns {seen[sym]} and {column}")
            seen[sym] = column
        if self.blank is not None:
            try:
                blank = None if isinstance(self.blank, bool) else operator.index(self.blank)
            except TypeError:
                blank = None
            if blank is None or not 0 <= blank < len(self.symbols):
                raise OptionError(f"TokenTable: blank must be a column in [0, {len(self.symbols)}) or None; "
                                  f"got {self.blank!r}")
            object.__setattr__(self, "blank", blank)
        if not isinstance(self.num_disambig, int) or isinstance(self.num_disambig, bool) or self.num_disambig < 0:
            raise OptionError(f"TokenTable: num_disambig must be an int >= 0; got {self.num_disambig!r}")

    def __repr__(self) -> str:
        blank = "no blank" if self.blank is None else f"blank {self.symbols[self.blank]!r} at column {self.blank}"
        return f"TokenTable({self.num_columns} columns, {blank}, {self.num_disambig} disambiguation symbols)"

    @property
    def num_columns(self) -> int:
        """V: the number of logit columns the acoustic model outputs (blank included)."""
        return len(self.symbols)

    @property
    def blank_ilabel(self) -> int | None:
        return None if self.blank is None else ilabel_of_column(self.blank)

    def disambig_ilabel(self, k: int) -> int:
        """FST input label of disambiguation symbol #k."""
        return ilabel_of_column(self.num_columns) + k

    def with_disambig(self, num_disambig: int) -> "TokenTable":
        return dataclasses.replace(self, num_disambig=num_disambig)

    def ilabels(self) -> dict[str, int]:
        """Symbol -> FST input label, tokens and disambiguation symbols."""
        table = {s: ilabel_of_column(c) for c, s in enumerate(self.symbols)}
        table.update({f"#{k}": self.disambig_ilabel(k) for k in range(self.num_disambig)})
        return table

    def fst_symbol_lines(self) -> list[str]:
        lines = [f"{EPSILON} 0"]
        lines += [f"{s} {ilabel_of_column(c)}" for c, s in enumerate(self.symbols)]
        lines += [f"#{k} {self.disambig_ilabel(k)}" for k in range(self.num_disambig)]
        return lines

    def write(self, path: str | os.PathLike) -> None:
        """Write tokens.txt as the FST input symbol table."""
        write_text_atomic(path, "\n".join(self.fst_symbol_lines()) + "\n")

    @classmethod
    def read(cls, path: str | os.PathLike, blank: str | int | None = None) -> "TokenTable":
        """Read a token list in any of the usual forms.

        * the FST input symbol table (has ``<eps> 0``; riva/NeMo/Kaldi TLG directories
          and ours): logit column = id - 1; ``#k`` lines are disambiguation symbols;
        * the model's vocabulary as ``symbol column`` lines (k2/icefall tokens.txt; ``#k``
          lines after the tokens are disambiguation symbols there too);
        * one symbol per line, the line number being the column;
        * HuggingFace's vocab.json (wav2vec2's): a JSON object symbol -> column, whose
          ``<pad>`` is the CTC blank where no other is named.

        The blank is the symbol named `blank` (or the column `blank`, an int), else the
        one of <blk>, <blank>, <b> the table has; a table with none has ``blank=None``, and
        one with several of them must be told which.  ``blank="<eps>"`` reads icefall's
        phone tables, whose ``<eps> 0`` is the CTC blank (not an FST's epsilon): ids are
        columns, and the blank is called <blk>.
        """
        rows: list[tuple[int | None, str, int | None]] = []
        lines = read_lines(path, "token table")
        text = "\n".join(lines).strip()
        if text.startswith("{") and text.endswith("}"):  # HuggingFace's vocab.json, its pad the CTC blank
            rows = _json_rows(path, text)
            if blank is None and not any(sym in BLANK_NAMES for _, sym, _ in rows):
                blank = HF_BLANK if any(sym == HF_BLANK for _, sym, _ in rows) else None
            lines = []
        for no, raw in enumerate(lines, start=1):
            fields = split_fields(raw)
            if not fields:
                continue
            if len(fields) > 2:
                raise InputFileError(path, no, f"expected 'symbol [id]', got {raw!r}")
            ident = None
            if len(fields) == 2:
                if not re.fullmatch(r"-?[0-9]+", fields[1]):  # (int() would take "1_0", "+3" and other scripts' digits)
                    raise InputFileError(path, no, f"id {fields[1]!r} is not an integer")
                ident = int(fields[1])
                if ident < 0:
                    raise InputFileError(path, no, f"negative id {ident}")
            rows.append((no, fields[0], ident))
        if not rows:
            raise InputFileError(path, None, "no tokens in the file")
        with_ids = sum(r[2] is not None for r in rows)
        if 0 < with_ids < len(rows):
            no = next(r[0] for r in rows if r[2] is None)
            raise InputFileError(path, no, "some lines have ids and some do not")
        if with_ids == 0:
            rows = [(no, sym, i) for i, (no, sym, _) in enumerate(rows)]

        fst_table = any(sym == EPSILON and i == 0 for _, sym, i in rows)
        if blank == EPSILON:  # icefall's phone tables: id 0 is the model's blank, written <eps>
            if not fst_table:
                raise InputFileError(path, None, f"blank={EPSILON!r} names an icefall table's blank, '{EPSILON} 0'; "
                                                 f"this table has no such line")
            if any(sym == BLANK_NAMES[0] for _, sym, _ in rows):
                raise InputFileError(path, None, f"blank={EPSILON!r}: the blank would be called {BLANK_NAMES[0]}, "
                                                 f"which the table has already")
            rows = [(no, BLANK_NAMES[0] if (sym, i) == (EPSILON, 0) else sym, i) for no, sym, i in rows]
            fst_table, blank = False, BLANK_NAMES[0]
        seen_sym: dict[str, int] = {}
        seen_id: dict[int, int] = {}
        tokens: dict[int, str] = {}
        disambig: list[str] = []
        disambig_ids: list[tuple[int, int]] = []  # (line, id) of #k in a table without <eps>
        for no, sym, i in rows:
            if sym in seen_sym:
                raise InputFileError(path, no, f"symbol {sym!r} already on line {seen_sym[sym]}")
            if i in seen_id:
                raise InputFileError(path, no, f"id {i} already used on line {seen_id[i]}")
            seen_sym[sym], seen_id[i] = no, no
            if fst_table:
                if sym == EPSILON:
                    continue
                if i == 0:
                    raise InputFileError(path, no, f"id 0 is reserved for {EPSILON}")
                if is_disambig_symbol(sym):
                    disambig.append(sym)
                    disambig_ids.append((no, i))
                    continue
                tokens[column_of_ilabel(i)] = sym
            else:
                if sym == EPSILON:
                    raise InputFileError(path, no, f"{sym!r} is reserved and cannot be a model token")
                if is_disambig_symbol(sym):  # k2/icefall list #0, #1, ... after the tokens
                    disambig.append(sym)
                    disambig_ids.append((no, i))
                    continue
                tokens[i] = sym
        if not tokens:
            raise InputFileError(path, None, "no tokens in the file")
        columns = sorted(tokens)
        early = [no for no, i in disambig_ids if i < columns[-1]]
        if early:
            raise InputFileError(path, early[0], "a disambiguation symbol among the model's tokens (#k must "
                                 "follow them: they are no logit columns)")
        if columns != list(range(len(columns))):
            missing = next(k for k, c in enumerate(columns) if c != k)
            first = 1 if fst_table else 0
            line = next(no for no, sym, i in rows if i == columns[missing] + first)
            raise InputFileError(path, line, f"token ids must run from {first} without gaps: id {missing + first} "
                                 f"is missing before id {columns[missing] + first}")
        symbols = tuple(tokens[c] for c in columns)
        if disambig:
            expected = [f"#{k}" for k in range(len(disambig))]
            if sorted(disambig, key=lambda s: int(s[1:])) != expected:
                raise InputFileError(path, None, f"disambiguation symbols must be #0..#{len(disambig) - 1}")
            if fst_table:  # the graph's labels of #k: right after the tokens' (the kernels read them so)
                for (no, i), sym in zip(disambig_ids, disambig):
                    want = ilabel_of_column(len(columns)) + int(sym[1:])
                    if i != want:
                        raise InputFileError(path, no, f"{sym} has id {i}; the disambiguation symbols must follow "
                                                       f"the tokens, whose last id is {want - int(sym[1:]) - 1}: "
                                                       f"{sym} {want}")
        return cls(symbols, _blank_column(path, symbols, blank), len(disambig))


def _json_rows(path, text: str) -> list[tuple[None, str, int]]:
    """TokenTable.read's rows of a JSON object symbol -> column (no line numbers)."""
    try:
        vocab = json.loads(text)
    except ValueError as e:
        raise InputFileError(path, None, f"not JSON, though it starts with '{{': {e}") from None
    if not isinstance(vocab, dict) or not all(type(i) is int and i >= 0 for i in vocab.values()):
        raise InputFileError(path, None, "a JSON token table must map each symbol to its column, an integer >= 0 "
                                         "(as wav2vec2's vocab.json)")
    bad = next((sym for sym in vocab if not sym or split_fields(sym) != [sym]), None)
    if bad is not None:  # (the graph's text tables could not hold it)
        raise InputFileError(path, None, f"symbol {bad!r}: a token must be non-empty and hold no space")
    by_id: dict[int, str] = {}
    for sym, i in vocab.items():
        if i in by_id:
            raise InputFileError(path, None, f"symbols {by_id[i]!r} and {sym!r} both have column {i}")
        by_id[i] = sym
    return [(None, sym, i) for i, sym in sorted(by_id.items())]


def _blank_column(path, symbols: tuple[str, ...], blank: str | int | None) -> int | None:
    if isinstance(blank, int) and not isinstance(blank, bool):
        if not 0 <= blank < len(symbols):
            raise InputFileError(path, None, f"blank column {blank} is outside its columns 0..{len(symbols) - 1}")
        return blank
    if blank is not None:
        if blank not in symbols:
            raise InputFileError(path, None, f"blank symbol {blank!r} is not in the table")
        return symbols.index(blank)
    found = [n for n in BLANK_NAMES if n in symbols]
    if len(found) > 1:  # a wrong pick would decode every frame's blank as a token
        named = ", ".join(f"{n} (column {symbols.index(n)})" for n in found)
        raise InputFileError(path, None, f"several symbols could be the blank: {named}; name it "
                                         f"with blank=SYMBOL (wfst-make-graph and wfst-decode: --blank)")
    return symbols.index(found[0]) if found else None


@dataclasses.dataclass(frozen=True)
class WordTable:
    """Word symbols by id (Kaldi words.txt: <eps> 0, words..., #0, <s>, </s>)."""

    symbols: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.symbols)

    def __repr__(self) -> str:  # (not every word: a vocabulary of 100k is a megabyte)
        return f"WordTable({len(self.symbols)} symbols: {', '.join(self.symbols[:4])}, ...)"

    def __getitem__(self, word_id: int) -> str:
        return self.symbols[word_id]

    def __iter__(self):
        return iter(self.symbols)

    def ids(self) -> dict[str, int]:
        return {s: i for i, s in enumerate(self.symbols) if s}

    @classmethod
    def from_words(cls, words) -> "WordTable":
        """The table the compiler writes: <eps>, the words sorted, then #0, <s>, </s>."""
        specials = {EPSILON, WORD_DISAMBIG, BOS, EOS}
        body = sorted(set(words) - specials)
        return cls((EPSILON, *body, WORD_DISAMBIG, BOS, EOS))

    def write(self, path: str | os.PathLike) -> None:
        write_text_atomic(path, "".join(f"{s} {i}\n" for i, s in enumerate(self.symbols) if s))

    @classmethod
    def read(cls, path: str | os.PathLike) -> "WordTable":
        table: dict[int, str] = {}
        lines: dict[str, int] = {}
        for no, raw in enumerate(read_lines(path, "word table"), start=1):
            fields = split_fields(raw)
            if not fields:
                continue
            if len(fields) != 2 or not (fields[1].isascii() and fields[1].isdigit()):  # (int() fails on "²")
                raise InputFileError(path, no, f"expected 'word id', got {raw!r}")
            i = int(fields[1])
            if i in table:
                raise InputFileError(path, no, f"id {i} already used by {table[i]!r}")
            if fields[0] in lines:
                raise InputFileError(path, no, f"word {fields[0]!r} already on line {lines[fields[0]]}")
            table[i], lines[fields[0]] = fields[0], no
        if not table:
            raise InputFileError(path, None, "no words in the file")
        if len(table) != max(table) + 1:  # output labels index the table: a gap would print as ''
            gap = next(i for i in range(len(table) + 1) if i not in table)
            raise InputFileError(path, None, f"word ids must run from 0 without gaps; id {gap} is missing "
                                 f"(the largest is {max(table)})")
        return cls(tuple(table[i] for i in range(len(table))))
