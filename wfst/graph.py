"""The decoding graph: CSR arrays, and reading/writing of graph directories.

A graph directory holds ``TLG.fst`` (OpenFST binary, tropical), ``tokens.txt`` (the FST
input symbol table, see :mod:`wfst.symbols`), ``words.txt``, ``graph.json`` (how it was
built; absent in graphs from riva/NeMo/Kaldi) and ``TLG.csr.npz``, a cache of the CSR
arrays that is rebuilt whenever TLG.fst changes (its size or time; a time alone that
changed, as in a copy, is checked against the FST's content digest kept in the cache).

CSR layout (Kaldi cudadecoder's CudaFst, CuPy-style names): states are 0..S-1; arcs
live in one set of arrays, all emitting arcs (a token input label) first, grouped by
source state, then all non-emitting arcs (input epsilon), grouped by source state.
Emitting arcs of state s are ``[e_indptr[s], e_indptr[s+1])``, non-emitting arcs
``[ne_indptr[s], ne_indptr[s+1])``; ``ne_indptr[0] == e_indptr[S]``.
"""
from __future__ import annotations

import dataclasses
import functools
import glob
import hashlib
import json
import os
import shutil
import struct
import warnings
import zipfile
from pathlib import Path

import numpy as np

from .errors import GraphFormatError, MissingFileError, OptionError, OutputFileError, WfstError, user_stacklevel
from .files import atomic_path, check_path, write_text_atomic
from .symbols import BLANK_NAMES, EPSILON, TokenTable, WordTable

FST_NAME = "TLG.fst"
TOKENS_NAME = "tokens.txt"
WORDS_NAME = "words.txt"
INFO_NAME = "graph.json"
CSR_NAME = "TLG.csr.npz"
LEXICON_NAME = "lexicon.txt"  # the spellings, for word times (wfst.align)
TOPOLOGY_NAME = "T.fst"  # the CTC topology without disambiguation loops, for word times
CSR_FORMAT = 3  # bump when the cached arrays or their key change meaning


@dataclasses.dataclass(frozen=True, eq=False)
class Graph:
    """A CTC decoding graph in CSR form (host NumPy arrays)."""

    start: int
    final: np.ndarray  # float32 (S,), +inf where not final
    e_indptr: np.ndarray  # int64 (S+1,)
    ne_indptr: np.ndarray  # int64 (S+1,)
    ilabel: np.ndarray  # int32 (E,), 0 on non-emitting arcs
    olabel: np.ndarray  # int32 (E,), word id or 0
    weight: np.ndarray  # float32 (E,), cost (-log prob)
    nextstate: np.ndarray  # int32 (E,)
    tokens: TokenTable
    words: WordTable | None = None
    info: dict = dataclasses.field(default_factory=dict)
    directory: Path | None = None  # the graph directory it was loaded from

    def output_words(self) -> frozenset[str] | None:
        """The words some arc of the graph outputs, so the words it can decode (words.txt may hold
        more: an LM word no spelling reaches); None without words.txt."""
        if self.words is None:
            return None
        ids = np.unique(self.olabel)
        return frozenset(self.words.symbols[i] for i in ids[(ids > 0) & (ids < len(self.words.symbols))].tolist())

    @property
    def num_states(self) -> int:
        return len(self.final)

    @property
    def num_arcs(self) -> int:
        return len(self.ilabel)

    @property
    def num_emitting_arcs(self) -> int:
        return int(self.ne_indptr[0])

    @functools.cached_property
    def output_word_ids(self) -> dict[str, int]:
        """word -> id of the words some arc outputs: words.txt also holds the LM's words that no
        lexicon entry spells, which no path can hold (a boost of one changes nothing)."""
        if self.words is None:
            return {}
        out = np.zeros(len(self.words) + 1, bool)
        out[self.olabel[(self.olabel > 0) & (self.olabel < len(self.words))]] = True
        return {w: i for i, w in enumerate(self.words.symbols) if w and out[i]}

    def arcs(self, state: int, emitting: bool = True) -> range:
        """The ids of the state's emitting arcs (or of its epsilon arcs) in the arc arrays."""
        if isinstance(state, bool) or not isinstance(state, (int, np.integer)) or not 0 <= state < self.num_states:
            raise OptionError(f"{self!r}: no state {state!r}; states are 0..{self.num_states - 1}")
        indptr = self.e_indptr if emitting else self.ne_indptr
        return range(int(indptr[state]), int(indptr[state + 1]))

    def __repr__(self) -> str:
        return (f"Graph(states={self.num_states}, arcs={self.num_arcs}, "
                f"emitting={self.num_emitting_arcs}, tokens={self.tokens.num_columns}, "
                f"words={len(self.words) if self.words else None})")


# --------------------------------------------------------------------------- FST -> CSR

_STATE_DT = np.dtype([("final", "<f4"), ("pos", "<u4"), ("narcs", "<u4"),
                      ("niepsilons", "<u4"), ("noepsilons", "<u4")])
_ARC_DT = np.dtype([("ilabel", "<i4"), ("olabel", "<i4"), ("weight", "<f4"), ("nextstate", "<i4")])
_FST_MAGIC = 2125659606
_IS_ALIGNED = 4


def _check_nextstates(fst, source: str) -> None:
    """Refuse an FST with an arc to a state it has not, walked in Python: only for one that
    OpenFST's verify() refused (a walk of a big graph's arcs takes seconds)."""
    num_states = sum(1 for _ in fst.states())  # (an Fst read from a file has no num_states())
    for state in fst.states():
        for arc in fst.arcs(state):
            if not 0 <= arc.nextstate < num_states:
                raise GraphFormatError(f"{source}: an arc leaving state {state} goes to state {arc.nextstate}, but "
                                       f"the graph has states 0..{num_states - 1}")


def _check_symbol_tables(fst, tokens: TokenTable, words: WordTable | None, source: str) -> None:
    """Refuse an FST whose own symbol tables (kept by fstcompile --keep_isymbols, say) name
    its labels otherwise than tokens.txt and words.txt do: the decoder reads the labels by
    those files, so such a graph would decode into other tokens and words without a word
    said.  Labels only one side has are not compared, nor the blank's name (<blk>, <blank>,
    <b>) or label 0's <eps>."""
    ours = {label: symbol for symbol, label in tokens.ilabels().items()}
    for kind, table, mine, file in (("input", fst.input_symbols(), ours, TOKENS_NAME),
                                    ("output", fst.output_symbols(), None if words is None else dict(enumerate(words)),
                                     WORDS_NAME)):
        if table is None or mine is None:
            continue
        differ = [(label, symbol, mine[label]) for label, symbol in table
                  if label in mine and symbol != mine[label] and not (label == 0 and symbol == EPSILON)
                  and not (symbol in BLANK_NAMES and mine[label] in BLANK_NAMES)]
        if differ:
            shown = "; ".join(f"label {label} is {theirs!r} there, {ours_!r} in {file}"
                              for label, theirs, ours_ in differ[:3])
            raise GraphFormatError(
                f"{source}: its {kind} symbol table disagrees with {file} on {len(differ)} label(s) ({shown}): the "
                f"graph was built with other symbols. Decode it with the {file} it was built with (or, if {file} is "
                f"right and the FST's table stale, drop that table: pywrapfst's set_{kind}_symbols(None), then write)")


def _const_fst_arrays(fst, source: str = "FST") -> tuple[int, np.ndarray, np.ndarray]:
    """(start, states, arcs) of a tropical FST, read from its ConstFst serialization.

    ConstFst stores every state and every arc in two flat arrays, so a graph of tens of
    millions of arcs becomes NumPy arrays without a Python loop over arcs.
    """
    import pywrapfst

    if fst.arc_type() != "standard":
        raise GraphFormatError(f"{source}: arc type {fst.arc_type()!r}; only 'standard' (tropical) graphs work")
    if fst.input_symbols() is not None or fst.output_symbols() is not None:
        # Symbol tables would be serialized too; drop them from a copy, not the caller's FST.
        fst = fst.copy() if isinstance(fst, pywrapfst.MutableFst) else pywrapfst.convert(fst, "vector")
        fst.set_input_symbols(None)
        fst.set_output_symbols(None)
    if not fst.verify():  # (OpenFST's conversion below crashed the process on an arc to no state)
        _check_nextstates(fst, source)  # (the arrays' checks below name the other faults)
    buf = pywrapfst.convert(fst, "const").write_to_string()

    pos = 0

    def take(fmt):
        nonlocal pos
        vals = struct.unpack_from(fmt, buf, pos)
        pos += struct.calcsize(fmt)
        return vals

    def take_str():
        (n,) = take("<i")
        s = buf[pos:pos + n].decode()
        take(f"{n}s")
        return s

    (magic,) = take("<i")
    if magic != _FST_MAGIC:
        raise GraphFormatError("not an OpenFST binary")
    fst_type, _arc_type = take_str(), take_str()
    if fst_type != "const":
        raise GraphFormatError(f"unexpected FST type {fst_type!r} after conversion")
    _version, flags, _props, start, num_states, num_arcs = take("<iiQqqq")

    def align():
        nonlocal pos
        if flags & _IS_ALIGNED:
            pos += (-pos) % 16

    align()
    states = np.frombuffer(buf, _STATE_DT, num_states, pos)
    pos += states.nbytes
    align()
    arcs = np.frombuffer(buf, _ARC_DT, num_arcs, pos)
    return start, states, arcs


def _bad_costs(costs: np.ndarray) -> np.ndarray:
    """Where a cost is NaN or -inf (+inf is an arc never taken, or a state that is not final)."""
    return np.isnan(costs) | (costs == -np.inf)


def graph_from_fst(fst, tokens: TokenTable, words: WordTable | None = None, info: dict | None = None,
                   source: str = "FST") -> Graph:
    """Flatten an OpenFST FST (pywrapfst) into a CSR :class:`Graph`."""
    _check_symbol_tables(fst, tokens, words, source)
    start, states, arcs = _const_fst_arrays(fst, source)
    num_states = len(states)
    if num_states == 0 or start < 0:
        raise GraphFormatError(f"{source}: the graph is empty (no start state)")
    narcs = states["narcs"].astype(np.int64)
    expected_pos = np.concatenate(([0], np.cumsum(narcs)[:-1]))
    if not np.array_equal(states["pos"].astype(np.int64), expected_pos):
        raise GraphFormatError(f"{source}: arcs are not stored state by state")
    src = np.repeat(np.arange(num_states, dtype=np.int32), narcs)
    ilabel = arcs["ilabel"]
    weight = arcs["weight"]
    V, D = tokens.num_columns, tokens.num_disambig
    bad = np.flatnonzero((ilabel < 0) | (ilabel > V + D))
    if bad.size:
        a = bad[0]
        raise GraphFormatError(
            f"{source}: arc {a} leaving state {src[a]} has input label {ilabel[a]}, but the token "
            f"table has {V} columns (labels 1..{V}) and {D} disambiguation symbols")
    bad = np.flatnonzero(_bad_costs(weight))
    if bad.size:
        a = bad[0]
        raise GraphFormatError(f"{source}: arc {a} leaving state {src[a]} has weight {weight[a]}")
    if (arcs["olabel"] < 0).any():
        raise GraphFormatError(f"{source}: negative output label")
    bad = np.flatnonzero((arcs["nextstate"] < 0) | (arcs["nextstate"] >= num_states))
    if bad.size:
        a = bad[0]
        raise GraphFormatError(f"{source}: arc {a} leaving state {src[a]} goes to state {arcs['nextstate'][a]}, "
                               f"but the graph has states 0..{num_states - 1}")
    if start >= num_states:
        raise GraphFormatError(f"{source}: start state {start}, but the graph has states 0..{num_states - 1}")
    bad = np.flatnonzero(_bad_costs(states["final"]))
    if bad.size:
        raise GraphFormatError(f"{source}: state {bad[0]} has final weight {states['final'][bad[0]]}")
    if words is not None and arcs["olabel"].size and arcs["olabel"].max() >= len(words):
        a = int(np.argmax(arcs["olabel"]))
        raise GraphFormatError(f"{source}: arc {a} has output label {arcs['olabel'][a]}, "
                               f"but words.txt has ids 0..{len(words) - 1}")
    # Disambiguation symbols left on input are epsilons to a decoder.  Arcs are stored
    # state by state, so taking the emitting ones, then the others, keeps them grouped.
    # An epsilon self-loop that costs nothing or more is on no best path (a #0 loop of a
    # foreign T): dropped, where a tie could send a backpointer around it.
    nonemitting = (ilabel == 0) | (ilabel > V)
    idle_loop = nonemitting & (arcs["nextstate"] == src) & (weight >= 0)
    order = np.concatenate((np.flatnonzero(~nonemitting), np.flatnonzero(nonemitting & ~idle_loop)))
    e_count = np.bincount(src[~nonemitting], minlength=num_states)
    ne_count = np.bincount(src[nonemitting & ~idle_loop], minlength=num_states)
    del src
    e_indptr = np.concatenate(([0], np.cumsum(e_count))).astype(np.int64)
    ne_indptr = (e_indptr[-1] + np.concatenate(([0], np.cumsum(ne_count)))).astype(np.int64)
    ilabel = ilabel[order]
    ilabel[e_indptr[-1]:] = 0
    return Graph(
        start=int(start),
        final=states["final"].astype(np.float32),
        e_indptr=e_indptr,
        ne_indptr=ne_indptr,
        ilabel=np.ascontiguousarray(ilabel, dtype=np.int32),
        olabel=np.ascontiguousarray(arcs["olabel"][order], dtype=np.int32),
        weight=np.ascontiguousarray(weight[order], dtype=np.float32),
        nextstate=np.ascontiguousarray(arcs["nextstate"][order], dtype=np.int32),
        tokens=tokens, words=words, info=info or {},
    )


def _where(graph: Graph) -> str:
    """The graph's FST file where it was loaded from one, else its summary."""
    return str(graph.directory / FST_NAME) if graph.directory is not None else repr(graph)


def check_searchable(graph: Graph) -> None:
    """Refuse a graph that no search can walk: one whose start state reaches no arc that
    reads a frame through epsilon arcs (every non-empty utterance would die at its first
    frame, and the warning then would blame the emissions), or one with a cycle of epsilon
    arcs (the closure of a frame could improve a token around it forever, and a path
    around it cannot be traced back).  Graph builds give neither: G's backoff arcs go to
    lower orders, and the CSR drops epsilon self-loops that cost nothing or more."""
    from wfst.kernels.cpu import epsilon_cycle_state

    seen, todo = {graph.start}, [graph.start]
    while todo:
        s = todo.pop()
        if graph.e_indptr[s + 1] > graph.e_indptr[s]:
            break
        for a in graph.arcs(s, emitting=False):
            n = int(graph.nextstate[a])
            if n not in seen:
                seen.add(n)
                todo.append(n)
    else:
        raise GraphFormatError(f"{_where(graph)} reads no frame: no arc with a token leaves its start state "
                               f"{graph.start}{' or the states its epsilon arcs reach' if len(seen) > 1 else ''}")
    on_cycle = epsilon_cycle_state(graph.ne_indptr, graph.nextstate, graph.num_states)
    if on_cycle >= 0:
        raise GraphFormatError(f"{_where(graph)} has a cycle of epsilon arcs (or disambiguation symbols, read as "
                               f"epsilons) through state {on_cycle}: the search needs its epsilon arcs acyclic (the "
                               f"closure of a frame and the trace of a path back assume it, whatever the cycle "
                               f"costs); remove it (a graph whose #k symbols were not removed after composition?)")


# --------------------------------------------------------------------------- loading

_ARRAYS = ("final", "e_indptr", "ne_indptr", "ilabel", "olabel", "weight", "nextstate")


def _csr_key(fst_path: Path, tokens: TokenTable) -> np.ndarray:
    """What the cached arrays were made from: the format, the FST file's size, the tokens,
    and the file's mtime, ctime and inode (ctime and inode change with every write or
    replacement of the file, and no copy can set them: a same-size FST written within the
    mtime's resolution, or copied with its times, still misses)."""
    st = fst_path.stat()
    return np.array([CSR_FORMAT, st.st_size, tokens.num_columns, tokens.num_disambig,
                     st.st_mtime_ns, st.st_ctime_ns, st.st_ino], dtype=np.int64)


_KEY_FILE = 4  # a _csr_key's entries from here on are the file's times and inode, which a copy changes alone


def _fst_digest(fst_path: Path) -> np.ndarray:
    """The FST file's content digest (BLAKE2b, 16 bytes): a copy of the graph directory whose
    times changed (cp without -p, an upload, a tar) still loads from its cache, with no FST
    read (and no pynini on a machine that only decodes)."""
    h = hashlib.blake2b(digest_size=16)
    with open(fst_path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return np.frombuffer(h.digest(), np.uint8)


_CSR_DTYPES = {"final": np.float32, "e_indptr": np.int64, "ne_indptr": np.int64, "ilabel": np.int32,
               "olabel": np.int32, "weight": np.float32, "nextstate": np.int32}


def _read_csr_cache(cache: Path, key: np.ndarray, num_columns: int, num_words: int | None,
                    fst_path: Path) -> dict | None:
    """The cached arrays, or None when the cache is stale or damaged (then it is rebuilt).  A
    key that differs in the FST's time alone is of the same FST if its content digest is."""
    try:
        with np.load(cache) as z:
            if not np.array_equal(z["key"], key) and not (
                    np.array_equal(z["key"][:_KEY_FILE], key[:_KEY_FILE])
                    and "digest" in z.files and np.array_equal(z["digest"], _fst_digest(fst_path))):
                return None
            arrays = {name: z[name] for name in (*_ARRAYS, "start")}
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile):  # a half-written copy
        return None
    return arrays if _csr_consistent(arrays, num_columns, num_words) else None


def _csr_consistent(a: dict, num_columns: int, num_words: int | None) -> bool:
    """Whether cached arrays are of a graph the kernels can walk: the key matching says the
    FST has not changed, not that the arrays were not damaged (an index out of range would
    crash a kernel; num_words: words.txt's, which output labels index)."""
    if any(a[name].dtype != dt or a[name].ndim != 1 for name, dt in _CSR_DTYPES.items()) or a["start"].ndim:
        return False
    S, E = len(a["final"]), len(a["ilabel"])
    e, ne = a["e_indptr"], a["ne_indptr"]
    if S == 0 or len(e) != S + 1 or len(ne) != S + 1 or any(len(a[n]) != E for n in ("olabel", "weight", "nextstate")):
        return False
    if e[0] != 0 or ne[0] != e[-1] or ne[-1] != E or (np.diff(e) < 0).any() or (np.diff(ne) < 0).any():
        return False
    emitting = a["ilabel"][:e[-1]]
    return bool(0 <= a["start"] < S
                and ((emitting >= 1) & (emitting <= num_columns)).all() and not a["ilabel"][e[-1]:].any()
                and ((a["nextstate"] >= 0) & (a["nextstate"] < S)).all() and (a["olabel"] >= 0).all()
                and (num_words is None or (a["olabel"] < num_words).all())
                and not _bad_costs(a["final"]).any() and not _bad_costs(a["weight"]).any())


def write_csr_cache(graph: Graph, fst_path: str | os.PathLike, cache: str | os.PathLike,
                    key: np.ndarray | None = None, digest: np.ndarray | None = None) -> None:
    """The CSR cache of `graph`, read from `fst_path` (key and digest: the file's, taken
    before it was read; default: now)."""
    key = _csr_key(Path(fst_path), graph.tokens) if key is None else key
    digest = _fst_digest(Path(fst_path)) if digest is None else digest
    with atomic_path(cache) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, key=key, digest=digest, start=np.int64(graph.start),
                     **{name: getattr(graph, name) for name in _ARRAYS})


def read_fst(path: str | os.PathLike):
    """Read an OpenFST binary, turning OpenFST's failures into clear errors."""
    import pywrapfst

    path = Path(path)
    if not path.is_file():
        raise MissingFileError(path, "graph FST")
    with open(path, "rb") as f:  # (OpenFST would print its own error line on stderr first)
        head = f.read(4)
    if len(head) < 4 or struct.unpack("<i", head)[0] != _FST_MAGIC:
        text = all(32 <= c < 127 or c in b"\t\n\r" for c in head)
        what = ("gzip data: gunzip it" if head[:2] == b"\x1f\x8b" else "empty" if not head else
                "text? an FST in AT&T text form needs fstcompile first" if text else "another format")
        raise GraphFormatError(f"{path}: not an OpenFST binary ({what})")
    try:
        return pywrapfst.Fst.read(str(path))
    except pywrapfst.FstError as e:
        raise GraphFormatError(f"{path}: not a readable OpenFST binary ({e})") from None


def load_graph(path: str | os.PathLike, *, blank: str | int | None = None, use_cache: bool = True) -> Graph:
    """Load a decoding graph as CSR arrays.

    `path` is a graph directory (ours, or riva/NeMo/Kaldi-style: TLG.fst + tokens.txt
    + words.txt, no graph.json) or an FST file with tokens.txt (and optionally
    words.txt) beside it.  The CSR arrays are cached in ``TLG.csr.npz`` (``<name>.csr.npz``
    for another FST file) and rebuilt when the FST changes.  `blank`: the blank's symbol
    (or column) where the graph's files do not say it (a foreign table whose blank is not
    <blk>, <blank> or <b>: wav2vec2's <pad>, say); graph.json's, where it names one, must agree.
    """
    path = check_path(path, "graph directory or FST")
    for _ in range(_LOAD_TRIES):
        before = _identity(path)
        try:
            graph = _load_graph(path, blank, use_cache)
        except (WfstError, OSError):
            if _identity(path) == before:
                raise
            continue  # replaced while it loaded: its files may be of two builds, or gone
        if _identity(path) == before:
            return graph
    raise GraphFormatError(f"{path}: replaced by a rebuild during each of {_LOAD_TRIES} loads (files of two builds "
                           f"would mix); load it when the rebuilds stop")


# A rebuild swaps a new graph directory in (write_graph_dir), so one whose identity is the same
# before and after a load was read whole from one build; else the load is tried again.
_LOAD_TRIES = 4


def _identity(path: Path) -> tuple | None:
    """What changes when a rebuild swaps a graph directory in: the directory's inode (of an
    FST file's folder, for a file), and the FST file's."""
    try:
        folder = path if path.is_dir() else path.parent
        fst = path / FST_NAME if path.is_dir() else path
        a, b = folder.stat(), fst.stat()
        return a.st_dev, a.st_ino, b.st_ino, b.st_mtime_ns, b.st_size
    except OSError:
        return None


def _load_graph(path: Path, blank, use_cache: bool) -> Graph:
    if path.is_dir():
        fst_path = path / FST_NAME
        directory = path
    elif path.exists():
        fst_path, directory = path, path.parent
    else:
        raise MissingFileError(path, "graph directory or FST")
    if not fst_path.is_file():
        others = sorted(p.name for p in directory.glob("*.fst")) if path.is_dir() else []
        raise MissingFileError(fst_path, "graph FST", f"not found (the folder holds {', '.join(others)}: give the "
                                                      f"FST file's path, as {path / others[0]})" if others else None)
    tokens_path = directory / TOKENS_NAME
    if not tokens_path.is_file():
        raise MissingFileError(tokens_path, "token table (needed beside the graph FST)")
    info = {}
    info_path = directory / INFO_NAME
    if info_path.is_file():
        try:
            info = json.loads(info_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise GraphFormatError(f"{info_path}: not valid JSON ({e})") from None
        if not isinstance(info, dict):
            raise GraphFormatError(f"{info_path}: not a JSON object (found a {type(info).__name__})")
    recorded = info.get("blank_column")  # the graph's own blank (a build with blank=... names one of any symbol)
    if recorded is not None and (type(recorded) is not int or recorded < 0):
        raise GraphFormatError(f"{info_path} says the blank is column {recorded!r}: not a column number")
    tokens = TokenTable.read(tokens_path, blank=recorded if blank is None else blank)
    if recorded is not None and blank is not None and tokens.blank != recorded:
        raise OptionError(f"blank={blank!r} is column {tokens.blank}, but {info_path} says the graph's blank is "
                          f"column {recorded}")
    if tokens.blank is None:  # (a CTC model has one: FLToP would prune it as any token, blank_penalty is refused)
        warnings.warn(f"{tokens_path} names no blank (none of {', '.join(BLANK_NAMES)}): name the model's, "
                      f"load_graph(..., blank=SYMBOL) or wfst-decode --blank SYMBOL (an icefall phone table's is "
                      f"its '<eps> 0': blank='<eps>'); decoding as if there were none",
                      stacklevel=user_stacklevel())
    words_path = directory / WORDS_NAME
    words = WordTable.read(words_path) if words_path.is_file() else None
    if info:
        boundary = info.get("word_boundary")
        if boundary is not None and (type(boundary) is not str or boundary not in tokens.symbols):
            raise GraphFormatError(f"{info_path} says the word boundary is {boundary!r}, but {tokens_path} has "
                                   "no such token")
        if info.get("num_columns") is not None and info["num_columns"] != tokens.num_columns:
            raise GraphFormatError(f"{info_path} says the model has {info['num_columns']} tokens, {tokens_path} "
                                   f"has {tokens.num_columns}: the files are of different graphs")

    home = directory if fst_path.name == FST_NAME else None  # its lexicon.txt and graph.json are this FST's
    cache = fst_path.with_name(CSR_NAME if fst_path.name == FST_NAME else fst_path.stem + ".csr.npz")
    key = _csr_key(fst_path, tokens)
    arrays = (_read_csr_cache(cache, key, tokens.num_columns, None if words is None else len(words), fst_path)
              if use_cache and cache.is_file() else None)
    if arrays is not None:
        start = int(arrays.pop("start"))
        return Graph(start=start, tokens=tokens, words=words, info=info, directory=home, **arrays)
    digest = _fst_digest(fst_path) if use_cache else None  # (of the bytes read next, unless they change meanwhile)
    graph = dataclasses.replace(graph_from_fst(read_fst(fst_path), tokens, words, info, source=str(fst_path)),
                                directory=home)
    # a file written or replaced while it was read (a rebuild beside a loading server) keeps no
    # cache: its arrays may be of the old file, which the new file's key would then serve
    if use_cache and np.array_equal(_csr_key(fst_path, tokens), key):
        try:
            write_csr_cache(graph, fst_path, cache, key, digest)
        except OSError as e:  # a read-only foreign graph directory still loads
            warnings.warn(f"could not write the CSR cache {cache}: {e}", stacklevel=2)
    return graph


# --------------------------------------------------------------------------- writing

GRAPH_FILES = (FST_NAME, TOKENS_NAME, WORDS_NAME, LEXICON_NAME, TOPOLOGY_NAME, CSR_NAME, INFO_NAME)


def check_replaceable(directory: str | os.PathLike) -> None:
    """Refuse, before any work, a graph directory that writing would lose files of: one that
    exists, is not empty, and is not a graph directory written here (graph.json and only
    the files write_graph_dir writes).  Such a folder is the user's (inputs, another
    tool's graph): a build replaces the whole directory."""
    directory = _target(directory)
    if directory.exists() and not directory.is_dir():
        raise OutputFileError(directory, "graph directory", "it exists and is not a directory")
    here = Path.cwd().resolve()
    if here == directory.resolve() or directory.resolve() in here.parents:
        raise OutputFileError(directory, "graph directory", "it is (or holds) the current directory, which a build "
                              "would replace; give a directory below it")
    if not directory.is_dir():
        return
    try:
        names = sorted(p.name for p in directory.iterdir())
    except OSError as e:
        raise OutputFileError(directory, "graph directory", e.strerror or str(e)) from None
    if not names:
        return
    foreign = [n for n in names if n not in GRAPH_FILES and not _left_by_a_killed_write(n)]
    if foreign or INFO_NAME not in names:
        shown = foreign or names
        listed = f"{', '.join(shown[:5])}{' ...' if len(shown) > 5 else ''}"
        what = (f"it holds files a graph build does not write ({listed})" if foreign else
                f"it holds {listed} but no {INFO_NAME}: not a graph a build wrote (another tool's, or files of "
                f"your own)")
        raise OutputFileError(directory, "graph directory", f"{what}, which a build would replace; give a new or "
                              f"empty directory, or remove it first")


def _left_by_a_killed_write(name: str) -> bool:
    """A temporary file of atomic_path's for a graph file (a load writing TLG.csr.npz, killed)."""
    return name.endswith(".tmp") and any(name.startswith(f".{g}.") for g in GRAPH_FILES)


def _target(directory: str | os.PathLike) -> Path:
    """The directory a build replaces: a symlink's target (the link stays, and now leads to
    the new graph), else the path itself."""
    directory = Path(directory)
    return directory.resolve() if directory.is_symlink() else directory


def write_graph_dir(directory: str | os.PathLike, fst, graph: Graph, lexicon: str | None = None,
                    topology=None) -> Graph:
    """Write a complete graph directory for `fst` and its CSR form `graph` (and, for word
    times, `lexicon`, the text of lexicon.txt, and `topology`, T as an FST, when given).

    The files are written into a new directory beside it, which then takes its place
    (two renames), so a reader never sees files of two builds mixed, and a build that fails
    or is killed leaves the old graph as it was.  A directory holding anything else than
    such a graph is refused (check_replaceable).
    """
    directory = _target(directory)
    if graph.num_states == 0:
        raise GraphFormatError(f"refusing to write an empty graph to {directory}")
    check_replaceable(directory)
    parent = directory.absolute().parent
    stage = None
    try:
        parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_stages(parent, directory.name)
        stage = parent / f".{directory.name}.building-{os.getpid()}-{os.urandom(4).hex()}"
        stage.mkdir()
        with atomic_path(stage / FST_NAME) as tmp:
            fst.write(tmp)
        graph.tokens.write(stage / TOKENS_NAME)
        if graph.words is not None:
            graph.words.write(stage / WORDS_NAME)
        if lexicon is not None:
            write_text_atomic(stage / LEXICON_NAME, lexicon)
        if topology is not None:
            with atomic_path(stage / TOPOLOGY_NAME) as tmp:
                topology.write(tmp)
        write_csr_cache(graph, stage / FST_NAME, stage / CSR_NAME)
        graph.info["files"] = {name: (stage / name).stat().st_size for name in GRAPH_FILES
                               if (stage / name).is_file()}
        write_text_atomic(stage / INFO_NAME, json.dumps(graph.info, indent=2) + "\n")
        _swap_in(stage, directory.absolute())
        stage = None
    except OSError as e:
        reason = e.strerror or str(e)
        if e.filename and Path(e.filename) != directory:
            reason += f" ({e.filename})"
        raise OutputFileError(directory, "graph directory", reason) from None
    finally:
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
    return graph


def _swap_in(stage: Path, directory: Path) -> None:
    """Put the finished `stage` where `directory` is (the old one is removed)."""
    if not directory.exists():
        os.rename(stage, directory)
        return
    old = directory.with_name(f".{directory.name}.old-{os.getpid()}-{os.urandom(4).hex()}")
    os.rename(directory, old)
    try:
        os.rename(stage, directory)
    except OSError:
        os.rename(old, directory)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _remove_stale_stages(parent: Path, name: str) -> None:
    """The hidden directories of builds of `name` that were killed (their process is gone)."""
    for p in parent.glob(f".{glob.escape(name)}.*-*-*"):
        kind, _, pid = p.name[len(name) + 2:].partition("-")
        pid = pid.split("-")[0]
        if kind not in ("building", "old") or not pid.isdecimal():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(p, ignore_errors=True)
        except OSError:  # alive, another user's
            pass
