"""N-gram LMs as deterministic backoff automata in CSR form, for on-the-fly rescoring.

An ARPA file becomes an :class:`LmStore`: one state per history (the empty history, the
root, is state 0; an n-gram is a history when another continues it or it has a backoff
weight), each state's outgoing words sorted in ``labels[offsets[s]:offsets[s+1]]``
with their cost (``weights``, natural-log, negated) and next state (``nexts``: the longest
suffix of history + word that is a state), and per state its backoff state and backoff
cost.  A word missing at a state is looked up again at its backoff state after paying the
backoff cost (``kernels.common.automaton_locate``): exact ARPA semantics, unlike a G whose
backoff arcs are epsilons, which a path may take even where the n-gram exists.  ``</s>``
is a label like any word: a history's final cost is the cost of reading it.

`prepare_lm` parses an ARPA file once and writes a store file; `load_lm` memory-maps it.
The file is a header (magic, JSON with the words, the source's checksum and each array's
dtype, shape and offset) followed by the raw arrays, 64-byte aligned.

`Rescorer` pairs the big LM with the graph's own (small) LM: decoding a TLG built on the
small LM, each word arc adds big cost - small cost (Kaldi's biglm decoder), so complete
paths carry the big LM's score.  Tokens carry the big LM's state; the small LM's state is
the longest suffix of that history which is a small-LM state, a function of the big one
when every small-LM history is also a big-LM history (checked).
"""
from __future__ import annotations

import dataclasses
import functools
import gzip
import json
import math
import os
import warnings
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import MappingProxyType

import numpy as np

from .arpa import ArpaReader, CountMismatch, check_sentence_marks, is_gzip, parse_ngram
from .config import _int, usable_cores
from .errors import (
    InputFileError,
    LmStoreError,
    MissingFileError,
    OptionError,
    OutputFileError,
    VocabularyError,
    user_stacklevel,
)
from .files import atomic_path, check_path, sha256_file, split_fields
from .symbols import is_disambig_symbol

LN10 = math.log(10.0)
UNKNOWN_COST = 100.0 * LN10  # of a word that an LM without <unk> lacks: kenlm's log10 probability -100
MAGIC = b"WFSTLM01"
FORMAT = 3  # 2: the final costs stored; 3: a state for every n-gram with a backoff weight (older
# stores dropped the weights of n-grams that nothing continues: they are made again from their ARPA)
_ALIGN = 64
_ARRAYS = {"offsets": np.int64, "labels": np.int32, "weights": np.float32, "nexts": np.int32,
           "backoff": np.int32, "bo_weight": np.float32, "depth": np.int32, "final": np.float32}


@dataclasses.dataclass(frozen=True)
class LmStore:
    """A backoff LM as a CSR automaton (see the module doc).  Arrays may be memory-mapped."""

    words: tuple[str, ...]  # LM word id -> word
    order: int
    counts: tuple[int, ...]  # n-grams per order
    start: int  # the state of the history <s>
    offsets: np.ndarray  # (N + 1,) int64
    labels: np.ndarray  # (A,) int32, sorted within each state
    weights: np.ndarray  # (A,) float32 cost of the word given the state's history
    nexts: np.ndarray  # (A,) int32
    backoff: np.ndarray  # (N,) int32; -1 at the root
    bo_weight: np.ndarray  # (N,) float32 backoff cost
    depth: np.ndarray  # (N,) int32 length of the state's history (states come by depth)
    final: np.ndarray  # (N,) float32 the cost of </s> (its backoffs included): a sentence's end
    source: dict = dataclasses.field(default_factory=dict)  # path, sha256, bytes of the ARPA file

    @property
    def num_states(self) -> int:
        return len(self.backoff)

    @property
    def num_arcs(self) -> int:
        return len(self.labels)

    def word_ids(self) -> Mapping[str, int]:
        """Word -> id, made once (read-only)."""
        return MappingProxyType(self._ids())

    def _ids(self) -> dict[str, int]:
        if "_word_ids" not in self.__dict__:
            object.__setattr__(self, "_word_ids", {w: i for i, w in enumerate(self.words)})
        return self.__dict__["_word_ids"]

    @property
    def unk(self) -> int | None:
        """The id of the unknown word: <unk>, or <UNK> as Kaldi's and LibriSpeech's LMs spell it
        (kenlm reads either); None where the LM has neither."""
        ids = self._ids()
        return ids.get("<unk>", ids.get("<UNK>"))

    def ids_of(self, words, missing: int = -1) -> np.ndarray:
        """The ids of `words` (a sequence of strings) as int32, `missing` for those not here."""
        get = self._ids().get
        return np.fromiter((get(w, missing) for w in words), np.int32, len(words))

    def automaton(self):
        """The store as kernels.groups.Automata (one row; final costs = the cost of </s>), made once."""
        if "_automaton" not in self.__dict__:
            from .contexts import lm_automaton

            object.__setattr__(self, "_automaton", lm_automaton(self))
        return self.__dict__["_automaton"]

    def score(self, words) -> float:
        """Natural-log cost of a sentence from <s> to </s> (kenlm's full-sentence score x ln 10, negated)."""
        from wfst.kernels.common import automaton_step

        if isinstance(words, (str, bytes)) or not all(isinstance(w, str) for w in words):  # ("ab ba": 5 words)
            raise OptionError(f"score: the sentence must be a sequence of words (str), e.g. text.split(); got "
                              f"{words!r}")
        ids = self.word_ids()
        unk = self.unk if self.unk is not None else -1
        a = self.automaton()
        s, total = self.start, 0.0
        for w in [*words, "</s>"]:
            i = ids.get(w, unk)
            cost, s = automaton_step(a, 0, s, i)  # (an unknown word: the backoffs to the root, and it stays there)
            total += float(cost) + (UNKNOWN_COST if i < 0 else 0.0)
        return total


# ---------------------------------------------------------------------- ARPA -> store

def read_arpa(path: str | os.PathLike, *, progress: bool = False, sha256: str | None = None) -> LmStore:
    """Parse an ARPA file (plain or .gz) into an LmStore held in memory (the structure is
    checked by wfst.arpa.ArpaReader, the n-gram lines here).  The unigrams are read in
    Python; higher orders a block of lines at a time by kernels.lmbuild (a line it does not
    take goes to parse_ngram), into arrays sized by the header's counts: ~30 bytes an n-gram
    while reading, where tuples in dicts took ~350."""
    from wfst.kernels import lmbuild

    path = check_path(path, "ARPA file")
    reader = ArpaReader(path, progress=progress)
    words: list[str] = []
    ids: dict[str, int] = {}
    grams: dict[int, _Rows] = {}  # by order
    unknown, first_unknown = 0, None
    vocabulary = None  # (text, offsets, table) of the unigrams, for lmbuild
    try:
        for first, k, block, kept in reader.blocks():
            top = k == len(reader.counts)
            if k not in grams:
                grams[k] = _Rows(reader.counts[k], k, path)
            rows = grams[k]
            if k == 1:
                for i, raw in enumerate(block.split("\n")[:-1]):
                    line = raw.strip(" \t\r\n")
                    if line:
                        logp, gram, bo = parse_ngram(path, first + i, k, line, top=top)
                        if gram[0] in ids:
                            raise InputFileError(path, first + i, f"1-gram {gram[0]!r} listed twice")
                        ids[gram[0]] = len(words)
                        words.append(gram[0])
                        rows.add([ids[gram[0]]], logp, bo, first + i)
                continue
            if vocabulary is None:
                vocabulary = _vocabulary(words)
            outcome = np.empty(block.count("\n"), np.uint8)
            rows.room(kept)
            rows.at = lmbuild.parse_lines(np.frombuffer(block.encode(), np.uint8), first, k, top, *vocabulary,
                                          rows.ids, rows.costs, rows.bos, rows.lines, rows.at, outcome)
            odd = np.flatnonzero((outcome != lmbuild.LINE_OK) & (outcome != lmbuild.LINE_BLANK))
            lines = block.split("\n") if len(odd) else None
            for j in odd:
                no = first + int(j)
                if outcome[j] == lmbuild.LINE_SLOW:  # Python's float() reads it, or parse_ngram words the fault
                    logp, gram, bo = parse_ngram(path, no, k, lines[j].strip(" \t\r\n"), top=top)
                    if all(w in ids for w in gram):
                        rows.add([ids[w] for w in gram], logp, bo, no)
                        continue
                unknown += 1  # skipped, as the graph compiler (kaldilm) skips it
                first_unknown = min(first_unknown or no, no)
    except InputFileError as e:  # the file's first fault, as the graph compiler reports it: a repeated
        # n-gram before it (repeats are otherwise found in _build, and show as a count mismatch at the end)
        for k, rows in sorted(grams.items()):
            if k > 1:
                read, _, _, at = rows.kept(None if e.line is None or isinstance(e, CountMismatch)
                                           else rows.lines[:rows.at] < e.line)
                _refuse_repeats(path, words, read, at, k)
        raise
    check_sentence_marks(path, ids)
    if unknown:
        warnings.warn(f"{path}: {unknown} n-grams skipped with a word that is not a unigram of the file (the first "
                      f"on line {first_unknown}), as the graph compiler skips them", stacklevel=2)
    source = {"sha256": sha256 or sha256_file(path), **_stat_of(path)}
    return _build(path, words, [grams.get(k) or _Rows(0, k, path) for k in range(1, len(reader.counts) + 1)],
                  source)


class _Rows:
    """One order's n-grams as read: word ids, costs (-log10 x ln 10, float32, as the store
    keeps them), backoff costs and line numbers, in arrays of the header's count."""

    def __init__(self, count: int, k: int, path: Path):
        # the header's count, up to what the file could hold (a plain file: a line of at least
        # 2k + 2 bytes; gzip: as if compressed 64 times), so that a wrong count allocates nothing
        # huge; grown if a file does hold more
        self.at = 0
        self.ids = np.empty((0, k), np.int32)
        self.costs, self.bos, self.lines = np.empty(0, np.float32), np.empty(0, np.float32), np.empty(0, np.int64)
        size = path.stat().st_size * (64 if is_gzip(path) else 1)
        self._grow(min(count, size // (2 * k + 2) + 1))

    def _grow(self, capacity: int) -> None:
        for name in ("ids", "costs", "bos", "lines"):
            old = getattr(self, name)
            new = np.empty((capacity, *old.shape[1:]), old.dtype)
            new[:self.at] = old[:self.at]
            setattr(self, name, new)

    def room(self, n: int) -> None:
        """Room for n more rows (beyond the header's count too: the reader refuses such a file
        at its end)."""
        if self.at + n > len(self.lines):
            self._grow(max(2 * len(self.lines), self.at + n))

    def add(self, word_ids, logp: float, bo: float, no: int) -> None:
        self.room(1)
        self.ids[self.at] = word_ids
        self.costs[self.at], self.bos[self.at], self.lines[self.at] = -logp * LN10, -bo * LN10, no
        self.at += 1

    def release(self) -> None:
        self.ids = self.costs = self.bos = self.lines = None

    def kept(self, mask=None):
        """(ids, costs, bos, lines) of the rows read, where `mask` (over them) is True."""
        n = self.at
        arrays = (self.ids[:n], self.costs[:n], self.bos[:n], self.lines[:n])
        return arrays if mask is None else tuple(a[mask] for a in arrays)


def _vocabulary(words):
    from wfst.kernels import lmbuild

    encoded = [w.encode() for w in words]
    offsets = np.zeros(len(words) + 1, np.int64)
    offsets[1:] = np.cumsum([len(b) for b in encoded])
    text = np.frombuffer(b"".join(encoded), np.uint8) if offsets[-1] else np.zeros(0, np.uint8)
    return text, offsets, lmbuild.vocabulary_table(text, offsets)


def _build(path, words, rows, source) -> LmStore:
    """The store from each order's rows (_Rows).  States: the root, then every history that
    some n-gram continues or that has a backoff weight, by length, each length in the order
    of its word-id tuples; a state's arcs sorted by word (see kernels.lmbuild for the trie
    that numbers them)."""
    from wfst.kernels import lmbuild

    order, V = len(rows), len(words)
    total = sum(r.at for r in rows)
    keys, values = lmbuild.new_table(total)
    labels = np.empty(total, np.int32)  # the arcs, one an n-gram, in node order (node - 1); orphans cut at the end
    weights = np.empty(total, np.float32)
    per_order = []  # (ids, backoff costs, parent nodes) in node order
    base, orphans, first_orphan = 1, 0, None
    for k, r in enumerate(rows, start=1):
        ids, costs, bos, lines = r.kept()
        parent = np.zeros(len(ids), np.int64) if k == 1 else lmbuild.parents(ids, V, keys, values)
        if k > 2 and (parent < 0).any():  # no history state leads to it: skipped, as arpa2fst does
            bad = parent < 0
            _refuse_repeats(path, words, ids[bad], lines[bad], k)
            orphans += int(bad.sum())
            first_orphan = min(first_orphan or int(lines[bad].min()), int(lines[bad].min()))
            ids, costs, bos, lines = r.kept(~bad)
            parent = parent[~bad]
        key = parent * V + ids[:, -1]
        rank = np.argsort(key, kind="stable")
        key = key[rank]
        if len(key) > 1 and (key[1:] == key[:-1]).any():
            _refuse_repeats(path, words, ids, lines, k)
        lmbuild.add_nodes(key, base, keys, values)
        ids = ids[rank]
        labels[base - 1:base - 1 + len(ids)] = ids[:, -1]
        weights[base - 1:base - 1 + len(ids)] = costs[rank]
        per_order.append((ids, bos[rank], parent[rank].astype(np.int32)))
        base += len(key)
        r.release()
        del ids, costs, bos, lines, parent, key, rank
    if orphans:
        warnings.warn(f"{path}: {orphans} n-grams skipped whose history is not an n-gram of the file (the first "
                      f"on line {first_orphan}), as Kaldi's arpa2fst skips them", stacklevel=3)
    # states: the nodes some n-gram continues and those below the top order with a backoff
    # weight (it applies to the next word even where no n-gram continues them), by length, then rank
    is_history = np.zeros(base, bool)
    is_history[0] = True
    node = 1
    for k, (ids, bos, parent) in enumerate(per_order, start=1):
        is_history[parent] = True
        if k < order:
            is_history[node:node + len(ids)] |= bos != 0
        node += len(ids)
    N = int(is_history.sum())
    state_of = np.full(base, -1, np.int32)
    state_of[is_history] = np.arange(N, dtype=np.int32)
    del is_history
    nexts = np.empty(base - 1, np.int32)
    src = np.empty(base - 1, np.int32)
    backoff = np.full(N, -1, np.int32)
    bo_weight = np.zeros(N, np.float32)
    depth = np.zeros(N, np.int32)
    node = 1
    for k, (ids, bos, parent) in enumerate(per_order, start=1):
        lmbuild.order_arcs(ids, node, order, V, keys, values, state_of, nexts, backoff)
        src[node - 1:node - 1 + len(ids)] = state_of[parent]
        states = state_of[node:node + len(ids)]
        is_state = states >= 0
        bo_weight[states[is_state]] = bos[is_state]
        depth[states[is_state]] = k
        node += len(ids)
    del keys, values
    offsets = np.zeros(N + 1, np.int64)
    offsets[1:] = np.cumsum(np.bincount(src, minlength=N))
    start = int(max(state_of[1 + words.index("<s>")], 0))
    counts = tuple(len(ids) for ids, _, _ in per_order)
    del per_order
    labels, weights = labels[:base - 1], weights[:base - 1]
    final = lmbuild.final_costs(offsets, labels, weights, backoff, bo_weight, words.index("</s>"))
    return LmStore(tuple(words), order, counts, start, offsets, labels, weights, nexts, backoff, bo_weight, depth,
                   final, source)


def _refuse_repeats(path, words, ids, lines, k) -> None:
    """An InputFileError at the first line (in file order) that repeats an earlier n-gram
    of `ids`, if any."""
    rows = np.unique(ids, axis=0, return_inverse=True)[1].reshape(-1)
    order = np.lexsort((lines, rows))
    again = np.flatnonzero(rows[order][1:] == rows[order][:-1]) + 1
    if len(again):
        j = order[again[np.argmin(lines[order][again])]]
        raise InputFileError(path, int(lines[j]), f"{k}-gram {' '.join(words[w] for w in ids[j])!r} listed twice")


# ---------------------------------------------------------------------- store file

def save_lm(store: LmStore, path: str | os.PathLike) -> Path:
    """Write `store` as a store file (atomically)."""
    path = check_path(path, "LM store file")
    arrays, offset, layout = [], 0, {}
    for name, dtype in _ARRAYS.items():
        a = np.ascontiguousarray(getattr(store, name), dtype)
        layout[name] = {"dtype": np.dtype(dtype).str, "shape": list(a.shape), "offset": offset}
        arrays.append(a)
        offset += -(-a.nbytes // _ALIGN) * _ALIGN
    header = json.dumps({"format": FORMAT, "order": store.order, "counts": list(store.counts),
                         "start": store.start, "num_states": store.num_states, "num_arcs": store.num_arcs,
                         "source": store.source, "words": list(store.words), "arrays": layout,
                         "data_bytes": offset}).encode()
    data_start = -(-(len(MAGIC) + 8 + len(header)) // _ALIGN) * _ALIGN
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(MAGIC + np.uint64(len(header)).tobytes() + header)
            f.write(b"\0" * (data_start - f.tell()))
            for a in arrays:
                f.write(a.tobytes())
                f.write(b"\0" * (-a.nbytes % _ALIGN))
    return path


def load_lm(path: str | os.PathLike) -> LmStore:
    """Memory-map a store file, checking that it is whole and consistent."""
    path = check_path(path, "LM store file")
    if not path.is_file():
        raise MissingFileError(path, "LM store file")
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            magic = f.read(len(MAGIC))
            if magic != MAGIC:
                raise LmStoreError(f"{path}: not an LM store file (bad magic {magic!r}); "
                                   f"make one with wfst.lm.prepare_lm")
            if size < len(MAGIC) + 8:
                raise LmStoreError(f"{path}: truncated ({size} bytes, no header); prepare it again")
            n = int(np.frombuffer(f.read(8), np.uint64)[0])
            if n > size:
                raise LmStoreError(f"{path}: damaged header (length {n} > file size {size}); prepare it again")
            meta = json.loads(f.read(n))
    except LmStoreError:
        raise
    except (ValueError, IndexError, UnicodeDecodeError) as e:
        raise LmStoreError(f"{path}: damaged header ({e})") from None
    needed = ("format", "order", "counts", "start", "num_states", "num_arcs", "words", "arrays", "data_bytes")
    if not isinstance(meta, dict) or any(k not in meta for k in needed):
        raise LmStoreError(f"{path}: damaged header (fields missing)")
    if meta.get("format") != FORMAT:
        raise LmStoreError(f"{path}: store format {meta.get('format')!r}, this version reads {FORMAT}; "
                           f"prepare it again")
    data_start = -(-(len(MAGIC) + 8 + n) // _ALIGN) * _ALIGN
    try:
        if size != data_start + meta["data_bytes"]:  # (longer: another file's bytes after it, or a wrong header)
            raise LmStoreError(f"{path}: {'truncated' if size < data_start + meta['data_bytes'] else 'damaged'} "
                               f"({size} bytes, the header says {data_start + meta['data_bytes']}); prepare it again")
        arrays = {}
        for name, dtype in _ARRAYS.items():
            spec = meta["arrays"][name]
            if np.dtype(spec["dtype"]) != np.dtype(dtype):
                raise LmStoreError(f"{path}: array {name} has dtype {spec['dtype']}")
            arrays[name] = np.memmap(path, dtype, "r", data_start + spec["offset"], tuple(spec["shape"]))
        N, A = int(meta["num_states"]), int(meta["num_arcs"])
        if not (_int(meta["start"]) and _int(meta["order"]) and isinstance(meta["words"], list)
                and isinstance(meta["counts"], list) and isinstance(meta.get("source", {}), dict)):
            raise LmStoreError(f"{path}: damaged header (fields of the wrong type); prepare it again")
    except LmStoreError:
        raise
    except (KeyError, TypeError, ValueError) as e:  # a hand-edited or damaged header
        raise LmStoreError(f"{path}: damaged header ({type(e).__name__}: {e}); prepare it again") from None
    o = arrays["offsets"]
    problems = []
    backoff, depth = arrays["backoff"], arrays["depth"]
    if (o.shape != (N + 1,) or backoff.shape != (N,) or depth.shape != (N,) or arrays["bo_weight"].shape != (N,)
            or arrays["final"].shape != (N,) or arrays["labels"].shape != (A,) or arrays["weights"].shape != (A,)
            or arrays["nexts"].shape != (A,)):
        problems.append("array sizes disagree with the header")
    else:
        from wfst.kernels import lmbuild

        fault = lmbuild.store_fault(o, arrays["labels"], arrays["nexts"], backoff, depth, arrays["weights"],
                                    arrays["bo_weight"], arrays["final"], len(meta["words"]), meta["start"])
        if fault != lmbuild.STORE_OK:
            problems.append({lmbuild.STORE_OFFSETS: "offsets are not a CSR index",
                             lmbuild.STORE_RANGES: "labels or next states out of range",
                             lmbuild.STORE_BACKOFF: "backoff or start states out of range",
                             lmbuild.STORE_CHAIN: "a backoff chain that does not end at the root (each backoff "
                                                  "state must have a shorter history)",
                             lmbuild.STORE_WEIGHTS: "NaN or negative word costs (probabilities above 1)",
                             lmbuild.STORE_BO: "NaN or infinite backoff costs",
                             lmbuild.STORE_FINAL: "NaN final costs"}[fault])
    if problems:
        raise LmStoreError(f"{path}: damaged store: {problems[0]}; prepare it again")
    return LmStore(tuple(meta["words"]), meta["order"], tuple(meta["counts"]), meta["start"], **arrays,
                   source=meta.get("source", {}))


def prepare_lm(arpa: str | os.PathLike, out: str | os.PathLike | None = None, *, progress: bool = True) -> Path:
    """Parse `arpa` once and write its store file (default: `<arpa>.lmstore` beside it, or in
    ``.wfst-cache`` when that folder cannot be written); return the store's path.  An
    existing store made from the same ARPA content is kept."""
    place, _, error = _prepare(arpa, out, progress)
    if error is not None:
        raise error
    return place


def _prepare(arpa, out, progress: bool):
    """prepare_lm's work: (the store's path, None, None), or where no place could be written
    (None, the store parsed, the OutputFileError naming the places)."""
    arpa = check_path(arpa, "ARPA file")
    out = None if out is None else check_path(out, "LM store file")
    if not arpa.is_file():
        raise MissingFileError(arpa, "ARPA language model")
    sha = sha256_file(arpa)
    fallback = Path(".wfst-cache") / f"lm-{sha[:20]}.lmstore"
    places = [Path(out)] if out is not None else [arpa.with_name(arpa.name + ".lmstore"), fallback]
    for place in places:
        if place.is_file():
            try:
                kept = load_lm(place)
            except (LmStoreError, MissingFileError):
                continue  # damaged: made again
            if kept.source.get("sha256") == sha:
                if any(kept.source.get(k) != v for k, v in _stat_of(arpa).items()):
                    try:  # (the ARPA was touched, copied or moved: its store says so no more)
                        save_lm(dataclasses.replace(kept, source={**kept.source, **_stat_of(arpa)}), place)
                    except OSError:
                        pass  # (a store that cannot be written keeps its record; its numbers are right)
                return place, None, None
    store = read_arpa(arpa, progress=progress, sha256=sha)
    failed = []
    for place in places:
        try:
            place.parent.mkdir(parents=True, exist_ok=True)
            return save_lm(store, place), None, None
        except OSError as e:
            failed.append((place.resolve(), e.strerror or str(e)))
    (first, why), *others = failed
    return None, store, OutputFileError(first, "LM store file", "; ".join([why] + [f"nor {p}: {w}" for p, w in others]))


def open_lm(source: str | os.PathLike | LmStore) -> LmStore:
    """An LmStore from a store file, an ARPA file (prepared once, then memory-mapped) or a store."""
    if isinstance(source, LmStore):
        return source
    if not isinstance(source, (str, os.PathLike)) or not str(source):
        raise OptionError(f"the language model must be a path (ARPA or LM store file) or an LmStore; got {source!r}")
    path = Path(source)
    if not path.is_file():
        raise MissingFileError(path, "language model (ARPA or LM store file)")
    with open(path, "rb") as f:
        is_store = f.read(len(MAGIC)) == MAGIC or path.suffix == ".lmstore"  # (a damaged one: load_lm says so)
    if not is_store:
        place, store, error = _prepare(path, None, path.stat().st_size > 32 << 20)
        if error is None:
            return load_lm(place)
        warnings.warn(f"{error}: the LM is read from {path} into memory, and will be read again next time (give "
                      f"its store a writable place with wfst.lm.prepare_lm(arpa, out))", stacklevel=user_stacklevel())
        return store
    store = load_lm(path)
    _warn_if_stale(store, path)
    return store


def _stat_of(arpa: Path) -> dict:
    """What a store records of its ARPA file besides the digest, to tell without reading it
    whether it changed since: its path, size and modification time."""
    st = arpa.stat()
    return {"path": str(arpa.resolve()), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


def _warn_if_stale(store: LmStore, path: Path) -> None:
    """A store given as a file keeps its numbers when its ARPA file changes (an ARPA given is
    checked by its digest): say so where the ARPA, still in its place, has another size or
    another modification time than the store recorded (a copy that kept an older time, as
    cp -p and rsync -t make, included); stores that recorded none: a time newer than the
    store's.  A stat, not a read of the ARPA; prepare_lm reads it and, where its digest is
    the store's, records its time anew."""
    src = store.source.get("path")
    try:
        st = Path(src).stat() if src else None
    except OSError:
        return
    if st is None:
        return
    recorded = store.source.get("mtime_ns")
    if st.st_size != store.source.get("bytes"):
        why = f"{st.st_size} bytes, it had {store.source.get('bytes')}"
    elif recorded is not None:
        why = "modified since the store was made, its size the same" if st.st_mtime_ns != recorded else None
    else:
        why = "it is newer than the store" if st.st_mtime > path.stat().st_mtime else None
    if why:
        warnings.warn(f"{path} was made from {src}, which may have changed since ({why}); the store keeps the "
                      f"old file's scores: prepare it again (wfst.lm.prepare_lm, which keeps it where the "
                      f"content is the same) or give the ARPA file", stacklevel=user_stacklevel())


# ---------------------------------------------------------------------- rescoring

def truncate_arpa(src: str | os.PathLike, dst: str | os.PathLike, order: int) -> Path:
    """Write the ARPA LM of `src` cut to its n-grams up to `order` (a valid, normalised LM:
    the kept orders' probabilities and backoffs are unchanged; the top kept order's
    backoff weights are dropped), gzipped when `dst` ends in .gz.  Makes the small LM of
    the rescoring demo."""
    src, dst = Path(src), Path(dst)
    if not _int(order) or order < 1:
        raise OptionError(f"order={order!r}: must be an integer >= 1")
    reader = ArpaReader(src)
    sections: dict[int, list[str]] = {}
    for _, k, line in reader:
        if k <= order:
            sections.setdefault(k, []).append(" ".join(split_fields(line)[:order + 1]) if k == order else line)
    kept = [k for k in sorted(reader.counts) if k <= order]
    text = "\\data\\\n" + "".join(f"ngram {k}={reader.counts[k]}\n" for k in kept)
    for k in kept:
        text += f"\n\\{k}-grams:\n" + "".join(line + "\n" for line in sections.get(k, []))
    text += "\n\\end\\\n"
    try:
        with atomic_path(dst) as tmp:
            data = text.encode("utf-8")
            Path(tmp).write_bytes(gzip.compress(data, mtime=0) if dst.suffix == ".gz" else data)
    except OSError as e:
        raise OutputFileError(dst, "ARPA file", e.strerror or str(e)) from None
    return dst


class Rescorer:
    """The big LM and the graph's LM, with the maps the kernels need (see the module doc)."""

    def __init__(self, big: LmStore, small: LmStore, graph_words, output_labels=None):
        """output_labels: the graph's arcs' (a lexicon word no arc outputs, one the graph's
        LM lacks, is never scored: neither LM needs to know it); default: every word."""
        self.big, self.small = big, small
        graph_words = tuple(graph_words) or ("<eps>",)
        scored = np.fromiter((not _never_scored(w) for w in graph_words), bool, len(graph_words))
        if output_labels is not None:
            on_arcs = np.zeros(len(graph_words), bool)
            on_arcs[np.unique(np.asarray(output_labels))] = True
            scored &= on_arcs
        scored[0] = False  # (<eps>)
        self.lm_map, self.big_report = _word_map(big, graph_words, scored, "the big LM")
        self.lm0_map, _ = _word_map(small, graph_words, scored, "the graph's LM")
        self.small_of = _small_states(big, small, _big_to_small(big, small, graph_words, self.lm_map, self.lm0_map,
                                                                scored))
        self.automata()  # built now: a decode should not pay for it
        self.gain, self.buckets = _gain_bounds(self, scored)
        self._path_cost = None  # (made at its first call)

    def automata(self):
        """(big LM, graph LM) as kernels.groups.Automata."""
        return self.big.automaton(), self.small.automaton()

    @functools.cached_property
    def host_bytes(self) -> int:
        """Host memory a CPU search reads: both LMs as automata, the maps and the gain bounds
        (the store files' pages on top of it are the page cache's, shared and reclaimable;
        summed once: every rescored advance() call reports it)."""
        arrays = [*self.automata()[0], *self.automata()[1], self.lm_map, self.lm0_map, self.small_of, self.gain,
                  self.buckets]
        return sum(int(a.nbytes) for a in arrays)

    @functools.cached_property
    def context(self):
        """The kernels' Context of these LMs alone (no phrases)."""
        from .boost import NO_PHRASES
        from .contexts import context

        return context(self, [NO_PHRASES])

    def path_cost(self, word_ids, final: bool = True) -> float:
        """Big minus small LM cost of a word sequence, word by word as the decoder adds it."""
        if self._path_cost is None:
            from wfst.kernels import cpu

            from .cpu_backend import DirectCall

            self._path_cost = DirectCall(cpu.context_path_cost, fixed=1, checked=(1,))
        ids = np.asarray(word_ids)
        n = len(self.lm_map)
        if isinstance(word_ids, (str, bytes)) or ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
            raise OptionError(f"word_ids must be a sequence of graph word ids (integers); got {word_ids!r}")
        if ids.size and not (0 <= ids.min() and ids.max() < n):  # (read past the maps; a large one crashed)
            raise OptionError(f"word_ids: {int(ids.min() if ids.min() < 0 else ids.max())} is not a word id of the "
                              f"graph (0 to {n - 1})")
        return float(self._path_cost(self.context, ids.astype(np.int64), int(final)))


def _never_scored(word: str) -> bool:
    """Graph words that no path scores with an LM: disambiguation symbols and the specials."""
    return is_disambig_symbol(word) or word in ("<eps>", "<s>", "</s>")  # (#tag is a word; so is <unk>)


def _word_map(store: LmStore, graph_words, scored: np.ndarray, what: str):
    """Graph word id -> LM word id; graph words the LM lacks go to <unk> (counted), or fail.
    scored: which graph words a path scores (not _never_scored, not <eps>)."""
    unk = store.unk
    direct = store.ids_of(graph_words)
    direct[0] = -1
    m = direct.copy()
    never = ~scored
    never[0] = False
    m[never & (m < 0)] = unk if unk is not None else 0  # never a scored word on a path
    lacking = np.flatnonzero(scored & (m < 0))
    missing = [graph_words[w] for w in lacking]
    if missing and unk is None:
        shown = ", ".join(repr(w) for w in missing[:10])
        raise VocabularyError(f"{len(missing)} of the graph's {int(scored.sum())} words are not in {what}, which has "
                              f"no <unk> to stand for them: {shown}{' ...' if len(missing) > 10 else ''}")
    if missing:
        m[lacking] = unk
        warnings.warn(f"{len(missing)} of the graph's words are not in {what}; they are scored as <unk>: "
                      f"{', '.join(repr(w) for w in missing[:10])}{' ...' if len(missing) > 10 else ''}",
                      stacklevel=user_stacklevel())
    unused = np.ones(len(store.words), bool)  # the LM's words no graph word is, but the marks and <unk>
    unused[direct[direct >= 0]] = False
    ids = store.word_ids()
    unused[[ids[w] for w in ("<s>", "</s>") if w in ids] + ([unk] if unk is not None else [])] = False
    return m, {"graph_words_as_unk": len(missing), "examples": missing[:10], "lm_words_not_in_graph": int(unused.sum())}


def _gain_bounds(rescorer: Rescorer, scored: np.ndarray):
    """kernels.common.lm_gain_bounds for the rescorer's LMs: per big-LM state, the most a word
    arc's rescoring can lower its cost, and the same per bucket of words.  None at all (no
    skipping) when some graph word is not read as the same word by both LMs, which the
    bound's word map assumes."""
    from wfst.kernels.common import BUCKET_NONE, GAIN_BUCKETS, lm_gain_bounds

    big, small = rescorer.big, rescorer.small
    big_to_small = small.ids_of(big.words, small.unk if small.unk is not None else -1)
    graph = np.flatnonzero(scored)
    if len(graph) and np.any(np.where(rescorer.lm_map[graph] >= 0, big_to_small[rescorer.lm_map[graph]], -2)
                             != rescorer.lm0_map[graph]):
        none = np.full((big.num_states, GAIN_BUCKETS), BUCKET_NONE, np.uint8)
        return np.full(big.num_states, np.inf, np.float32), none
    known = big_to_small >= 0
    order = np.argsort(big_to_small[known], kind="stable")
    inv_ids = np.flatnonzero(known)[order].astype(np.int32)
    inv_offsets = np.searchsorted(big_to_small[known][order], np.arange(len(small.words) + 1)).astype(np.int64)
    args = (*rescorer.automata(), rescorer.small_of, big.depth, small.depth, big_to_small, (inv_offsets, inv_ids))
    n = big.num_states
    gain, buckets = np.empty(n, np.float32), np.empty((n, GAIN_BUCKETS), np.uint8)
    # depth by depth (a state reads its backoff state's bounds), each depth's states in pieces on the cores
    depth = np.asarray(big.depth)
    ends = np.searchsorted(depth, np.arange(int(depth.max(initial=0)) + 2))
    pieces = [[(lo, min(lo + _GAIN_PIECE, hi)) for lo in range(lo, hi, _GAIN_PIECE)] for lo, hi in zip(ends, ends[1:])]
    threads = min(usable_cores(), max(map(len, pieces), default=1))
    if threads == 1 or (np.diff(depth) < 0).any():  # (states not by depth: one pass in their order)
        lm_gain_bounds(0, n, gain, buckets, *args)
        return gain, buckets
    with ThreadPoolExecutor(threads) as pool:
        for level in pieces:
            list(pool.map(lambda piece: lm_gain_bounds(*piece, gain, buckets, *args), level))
    return gain, buckets


_GAIN_PIECE = 1 << 16  # big-LM states a thread takes at a time (the bounds of 10M n-grams: ~1.2 s on one core)


def _big_to_small(big: LmStore, small: LmStore, graph_words, lm_map, lm0_map, scored) -> np.ndarray:
    """Big-LM word id -> the graph LM's word id of the graph words a path scores as it (-1:
    none), so that a big-LM history maps to the graph LM's history of the same path.  A graph
    word the big LM lacks is the big LM's <unk> there but itself in the graph's LM: after it,
    the graph LM is in its own state after that word, not after its <unk>.  Graph words the
    big LM reads as one word (its <unk>) but the graph's LM as several: these lead to the
    graph LM's root (the state after a word in none of its histories), unless one of them
    is in a history of the graph's LM, which no single map can follow (refused)."""
    from wfst.kernels import lmbuild

    to_small = small.ids_of(big.words)
    g = np.flatnonzero(scored)
    pairs = np.unique(np.stack([lm_map[g], lm0_map[g]], 1), axis=0) if len(g) else np.zeros((0, 2), np.int64)
    b, s = pairs[:, 0], pairs[:, 1]
    to_small[b] = s
    shared = np.unique(b[np.flatnonzero(b[1:] == b[:-1])])  # big words read as several graph-LM words
    if len(shared):
        _, last = lmbuild.history_tree(small.offsets, small.labels, small.nexts, small.depth)
        in_history = np.zeros(len(small.words), bool)
        in_history[last[last >= 0]] = True
        for w in shared:
            alike = s[b == w]
            if in_history[alike].any():
                names = [graph_words[i] for i in g[lm_map[g] == w]]
                shown = ", ".join(repr(n) for n in names[:5]) + (" ..." if len(names) > 5 else "")
                raise VocabularyError(
                    f"the big LM reads the graph words {shown} as one word ({big.words[w]!r}), the graph's LM as "
                    f"different words with different histories after them; rescoring needs a big LM that has "
                    f"the graph LM's words, such as the unpruned LM the graph's LM was pruned from")
            to_small[w] = -1
    return to_small


def _small_states(big: LmStore, small: LmStore, to_small: np.ndarray) -> np.ndarray:
    """For each big-LM state, the small-LM state of the same history (its longest suffix
    that is a small-LM state, its words read by to_small: _big_to_small); every small-LM
    history must be a big-LM history."""
    from wfst.kernels import lmbuild

    trees = []
    for store in (big, small):
        parent, last = lmbuild.history_tree(store.offsets, store.labels, store.nexts, store.depth)
        if store.num_states and (parent[1:] < 0).any():
            raise LmStoreError(f"the LM store made from {store.source.get('path', 'an unknown ARPA file')} is "
                               f"damaged: an LM state cannot be reached from the root; prepare it again")
        trees.append((np.argsort(store.depth, kind="stable"), parent, last))
    to_big = big.ids_of(small.words)
    in_big = lmbuild.same_histories(*trees[1], to_big, big.offsets, big.labels, big.nexts, big.depth)
    missing = np.flatnonzero(in_big < 0)
    if len(missing):
        _, parent, last = trees[1]
        words, s = [], int(missing[0])
        while parent[s] >= 0:
            words.insert(0, small.words[last[s]])
            s = parent[s]
        raise VocabularyError(f"{len(missing)} histories of the graph's LM are not histories of the big LM (e.g. "
                              f"{' '.join(words)!r}); rescoring needs a big LM that contains the graph LM's "
                              f"contexts, such as the unpruned LM the graph's LM was pruned from")
    return lmbuild.suffix_states(*trees[0], to_small, small.offsets, small.labels, small.nexts, small.backoff)
