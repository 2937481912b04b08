"""TLG = T ∘ min(det(L ∘ G)): the graph compiler behind ``make graph``.

Stages and what they cost are recorded in graph.json.  Work is rebuilt only when
stale: a graph directory whose graph.json fingerprint matches the inputs is left
alone, and min(det(L ∘ G)), which does not depend on the topology, is kept in a
content-addressed cache (by default ``.wfst-cache`` beside the graph directory) so
that the topologies of one token set share it.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import resource
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import numpy as np
import pywrapfst as fst
from tqdm.auto import tqdm

import wfst
from wfst.errors import (
    GraphBuildError,
    InputFileError,
    MissingFileError,
    OptionError,
    OutputFileError,
)
from wfst.files import atomic_path, check_path, sha256_file
from wfst.graph import FST_NAME, INFO_NAME, check_replaceable, graph_from_fst, write_graph_dir
from wfst.memory import reset_peak_rss, rss_mb, take_child_peak
from wfst.symbols import BOS, EOS, TokenTable, WordTable

from .grammar import arpa_vocabulary, grammar_fst
from .lexicon import (
    Lexicon,
    add_disambig,
    lexicon_from_chars,
    lexicon_from_sentencepiece,
    lexicon_fst,
    read_lexicon,
    read_word_list,
)
from .topology import check_topology, ctc_topology, topology_size

GRAPH_FORMAT = 1
# Bump when a change to the compiler changes the graphs it writes (4: lexicon.txt, T.fst; 5: an
# LM's orphan n-grams left out whatever their line order; 6: n-grams of a word no unigram has left
# out whatever the lexicon spells); LG_REVISION when it changes min(det(L ∘ G)), whose cache it keys.
COMPILER_REVISION = 6
LG_REVISION = 4
# The LG cache keeps the entries used last within this many bytes (the newest always): a sweep
# over many LMs would otherwise fill the disk with LGs of hundreds of MB each.
LG_CACHE_BYTES = 4 * 2**30


# --------------------------------------------------------------------------- measuring

class Stages:
    """Times each stage and records its peak resident memory; shows progress."""

    def __init__(self, names: list[str], progress: bool, label: str):
        self.records: dict[str, dict] = {}
        self.progress = progress
        # disable=None: a live bar on a terminal only; the per-stage lines print either way.
        self.bar = tqdm(total=len(names), desc=label, unit="stage", disable=None if progress else True,
                        bar_format="{desc}: {n_fmt}/{total_fmt} stages |{bar:12}| {elapsed} {postfix}")

    def run(self, name: str, fn, *args, **kwargs):
        self.bar.set_postfix_str(f"{name} ...", refresh=True)
        per_stage = reset_peak_rss()
        take_child_peak()
        t0 = time.perf_counter()
        result = fn(*args, **kwargs)
        seconds = time.perf_counter() - t0
        peak = rss_mb("VmHWM:") if per_stage else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        self.records[name] = {"seconds": round(seconds, 3), "peak_rss_mb": round(max(peak or 0, take_child_peak()), 1)}
        self._say(f"  {name:<28} {seconds:8.2f} s  peak {self.records[name]['peak_rss_mb']:8.1f} MiB")
        self.bar.update(1)
        return result

    def skip(self, name: str, why: str):
        self.records[name] = {"seconds": 0.0, "skipped": why}
        self._say(f"  {name:<28} {why}")
        self.bar.update(1)

    def _say(self, line: str):
        if self.progress:
            self.bar.write(line, file=sys.stderr)

    def close(self):
        self.bar.set_postfix_str("done", refresh=True)
        self.bar.close()


# --------------------------------------------------------------------------- helpers

def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:20]


def _size(f) -> dict:
    return {"states": f.num_states(), "arcs": sum(f.num_arcs(s) for s in f.states())}


def _versions() -> dict:
    out = {"wfst": wfst.__version__, "python": platform.python_version()}
    for pkg in ("pynini", "kaldilm", "sentencepiece", "numpy"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def _input_record(path, what: str) -> dict:
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(path, what, "not found" if not path.exists() else "not a file")
    try:
        return {"path": str(path.resolve()), "sha256": sha256_file(path), "bytes": path.stat().st_size}
    except OSError as e:
        raise MissingFileError(path, what, e.strerror or str(e)) from None


def _check_writable(out_dir: Path, what: str):
    """Fail before the build, not after it, when `out_dir` cannot be made or written, or
    holds what a build would lose (wfst.graph.check_replaceable)."""
    check_replaceable(out_dir)
    parent = out_dir
    while not parent.exists() and parent.parent != parent:
        parent = parent.parent
    if not parent.is_dir():
        raise OutputFileError(out_dir, what, f"{parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputFileError(out_dir, what, f"no permission to write in {parent}")


def _check_nonempty(f, what: str, hint: str):
    if f.start() < 0 or f.num_states() == 0:
        raise GraphBuildError(f"{what} is empty: {hint}")


# --------------------------------------------------------------------------- stages

def _lg_stages(stages: Stages, lexicon: Lexicon, entries, tokens: TokenTable, words: WordTable,
               lm: Path, orphans: list[int]) -> tuple[fst.MutableFst, dict]:
    """min(det(L ∘ G)) (orphans: the LM's n-grams G leaves out, arpa_vocabulary's)."""
    sizes = {}
    L = stages.run("L (lexicon FST)", lexicon_fst, entries, tokens, words, lexicon.separator, lexicon.costs)
    sizes["L"] = _size(L)
    with tempfile.TemporaryDirectory(prefix="wfst-words-") as tmp:
        words_txt = Path(tmp) / "words.txt"
        words.write(words_txt)
        G = stages.run("G (arpa2fst)", grammar_fst, lm, words_txt, orphans=orphans)
    sizes["G"] = _size(G)
    G.arcsort("ilabel")

    def compose(L, G):
        LG = fst.compose(L, G)
        if not any(a.olabel for s in LG.states() for a in LG.arcs(s)):
            spelled = ", ".join(sorted({w for w, _ in lexicon.entries})[:3])
            raise GraphBuildError(f"L ∘ G has no word arcs: no word the lexicon spells (e.g. {spelled}) is in the "
                                  f"language model {lm}")
        return LG

    LG = stages.run("L ∘ G", compose, L, G)
    del L, G
    sizes["LG_composed"] = _size(LG)

    LG = stages.run("det(L ∘ G)", fst.determinize, LG)

    def minimize(f):
        # Kaldi's fstminimizeencoded: encode labels and costs, minimize as an unweighted
        # acceptor, so word labels and costs never move.  It is twice as fast as OpenFST's
        # weighted minimize (which first pushes costs) for a graph <1% larger.  Kaldi also
        # quantizes costs to 1/1024 first; measured here, that merged almost no states and
        # moved sentence costs by up to 0.003 nats, so costs stay exact.
        mapper = fst.EncodeMapper(f.arc_type(), encode_labels=True, encode_weights=True)
        f.encode(mapper)
        f.minimize()
        f.decode(mapper)
        f.arcsort("ilabel")
        return f

    LG = stages.run("min(det(L ∘ G))", minimize, LG)
    sizes["LG"] = _size(LG)
    return LG, sizes


def _tlg_stages(stages: Stages, T, LG, tokens: TokenTable, epsilon_free: bool):
    T.arcsort("olabel")

    def compose():
        TLG = fst.compose(T, LG)
        # Disambiguation symbols have done their job; to the decoder they are epsilons.
        TLG.relabel_pairs(ipairs=[(tokens.disambig_ilabel(k), 0) for k in range(tokens.num_disambig)])
        TLG.connect()
        return TLG

    TLG = stages.run("T ∘ LG", compose)
    if epsilon_free:
        def rmeps(f):
            f.rmepsilon()
            f.connect()
            return f
        TLG = stages.run("rmepsilon(TLG)", rmeps, TLG)
    else:
        stages.skip("rmepsilon(TLG)", "not asked (epsilon arcs kept, riva-style)")
    TLG.arcsort("ilabel")
    _check_nonempty(TLG, "TLG", "no token sequence reaches a final state")
    return TLG


# --------------------------------------------------------------------------- public API

@dataclasses.dataclass(frozen=True)
class BuildResult:
    directory: Path
    info: dict
    rebuilt: bool

    def __repr__(self) -> str:  # (not the whole of graph.json)
        return f"BuildResult({str(self.directory)!r}, rebuilt={self.rebuilt})"

    def summary(self) -> str:
        """One line: the graph's topology, size and build time."""
        s = self.info["sizes"]["TLG"]
        return (f"{self.directory}: {self.info['topology']} TLG, {s['states']:,} states, "
                f"{s['arcs']:,} arcs ({s['epsilon_arcs']:,} epsilon), "
                f"{self.info['files'][FST_NAME] / 2**20:.1f} MiB, built in "
                f"{self.info['build_seconds']:.1f} s" + ("" if self.rebuilt else " (up to date)"))


def compile_graph(out_dir: str | os.PathLike, *, tokens: str | os.PathLike, lm: str | os.PathLike,
                  lexicon: str | os.PathLike | None = None, words: str | os.PathLike | None = None,
                  spm: str | os.PathLike | None = None, word_boundary: str | None = None,
                  blank: str | None = None, topology: str = "compact", epsilon_free: bool = False,
                  cache_dir: str | os.PathLike | None = None, force: bool = False,
                  progress: bool = True) -> BuildResult:
    """Build TLG = T ∘ min(det(L ∘ G)) and write a graph directory.

    Args:
      out_dir: the graph directory to write (created if needed).
      tokens: the model's token list (see :meth:`wfst.TokenTable.read`); must have a blank.
      lm: ARPA language model (``.arpa`` or ``.arpa.gz``), any order.
      lexicon: ``word tok1 tok2 ...`` lines.  Or, instead of a lexicon file:
      words: a word list to spell (default: the LM's unigrams), with `spm` (a
        sentencepiece model, BPE tokens) or per character (the default when no `spm`).
      word_boundary: the word-boundary unit (e.g. ``|``), a separator between words.
      blank: the blank's symbol when it is not one of <blk>, <blank>, <b>.
      topology: ``normal``, ``compact`` or ``minimal`` (see :mod:`wfst.graphs.topology`).
      epsilon_free: remove the epsilon (eps:eps) arcs of TLG: backoff arcs and, in the
        compact topology, the arcs back to the blank state.  What is left with an
        epsilon input carries a word that is certain only after its last token (a
        word that is a prefix of another, or a homophone); these are counted in
        graph.json (``epsilon_arcs_with_words``).  Removing them too needs arcs that
        output several words (k2's ragged labels), which one label per arc cannot hold.
      cache_dir: where min(det(L ∘ G)) is cached (default ``<out_dir>/../.wfst-cache``).
      force: rebuild even if the graph directory is up to date, min(det(L ∘ G)) too (not read
        from the cache, which gets the new one).
    """
    t_start = time.perf_counter()
    check_topology(topology)
    if type(epsilon_free) is not bool:
        raise OptionError(f"epsilon_free={epsilon_free!r}: must be True or False")
    for name, value in (("out_dir", out_dir), ("tokens", tokens), ("lm", lm), ("lexicon", lexicon),
                        ("words", words), ("spm", spm), ("cache_dir", cache_dir)):
        if isinstance(value, str) and not value.strip():  # Path("") is the current directory
            raise OptionError(f"{name}={value!r}: an empty path")
        if value is not None or name in ("out_dir", "tokens", "lm"):
            check_path(value, name)
    if lexicon is not None and (words is not None or spm is not None):
        given = ", ".join(f"{k}={v}" for k, v in (("words", words), ("spm", spm)) if v is not None)
        raise OptionError(f"give either a lexicon file or a word list (with spm / per character), not both: "
                          f"lexicon={lexicon}, {given}")
    if spm is not None and word_boundary is not None:
        raise OptionError(f"word_boundary={word_boundary!r} is for per-character spelling; the pieces of the "
                          f"sentencepiece model {spm} mark word starts themselves (give spm or word_boundary, "
                          f"not both)")
    out_dir = Path(out_dir)
    for path, what in ((out_dir, "graph directory"), (cache_dir, "cache directory")):
        try:
            if path is not None:
                Path(path).resolve()
        except (RuntimeError, OSError) as e:  # (a symlink loop: RuntimeError before Python 3.13)
            raise OutputFileError(path, what, str(e)) from None
    cache_dir = Path(cache_dir) if cache_dir is not None else out_dir.resolve().parent / ".wfst-cache"
    if cache_dir.resolve().is_relative_to(out_dir.resolve()):
        raise OptionError(f"the cache directory {cache_dir} is inside the graph directory {out_dir}, which a build "
                          f"replaces as a whole; put it beside (the default: {out_dir.resolve().parent}/.wfst-cache)")

    inputs = {"tokens": _input_record(tokens, "token table"), "lm": _input_record(lm, "ARPA language model")}
    for name, value, what in (("lexicon", lexicon, "lexicon"), ("words", words, "word list"),
                              ("spm", spm, "sentencepiece model")):
        if value is not None:
            inputs[name] = _input_record(value, what)
    source = "file" if lexicon else ("sentencepiece" if spm else "characters")
    options = {"topology": topology, "epsilon_free": bool(epsilon_free), "word_boundary": word_boundary,
               "blank": blank, "lexicon_source": source}
    fingerprint = _digest({"revision": COMPILER_REVISION, "options": options,
                           "inputs": {k: v["sha256"] for k, v in inputs.items()}})
    if not force:
        info = _up_to_date(out_dir, fingerprint)
        if info is not None:
            return BuildResult(out_dir, info, rebuilt=False)
    _check_writable(out_dir, "graph directory")

    tok = TokenTable.read(tokens, blank=blank)
    if tok.blank is None:
        raise GraphBuildError(f"{tokens}: no blank token; name it <blk> or pass blank=SYMBOL (--blank; an icefall "
                              f"phone table, whose '<eps> 0' is the blank: --blank '<eps>')")
    if word_boundary is not None and word_boundary not in tok.symbols:
        raise OptionError(f"word-boundary unit {word_boundary!r} is not in {tokens}")
    if word_boundary is not None and word_boundary == tok.symbols[tok.blank]:
        raise OptionError(f"word-boundary unit {word_boundary!r} is the blank of {tokens}; "
                          f"the word boundary must be another token")
    lm_words, ngram_counts, orphans = arpa_vocabulary(lm)

    if lexicon is not None:
        lex = read_lexicon(lexicon, tok, separator=word_boundary)
    else:
        spell_words = [w for w in (read_word_list(words) if words is not None else lm_words)
                       if w not in (BOS, EOS, "<unk>")]  # (<unk>: the LM's class of unknown words, never spelled)
        if not spell_words:
            raise InputFileError(lm, None, "the LM has no words to spell (no unigrams besides <s>, </s> and "
                                 "<unk>); give a lexicon or a word list, or an LM with words")
        try:
            lex = (lexicon_from_sentencepiece(spell_words, spm, tok) if spm is not None
                   else lexicon_from_chars(spell_words, tok, word_boundary))
        except OptionError as e:  # no word could be spelled: say with which token table
            raise OptionError(f"{tokens}: {e}") from None
    entries, num_disambig = add_disambig(lex)
    tok = tok.with_disambig(num_disambig)
    lm_set = set(lm_words) - {BOS, EOS}
    lex_words = lex.words
    spelled = lm_set - {"<unk>"}  # the LM's class of unknown words: never spelled, by design
    vocab_report = {
        "lexicon_words": len(lex_words),
        "lm_words": len(lm_set),
        "lexicon_words_not_in_lm": len(lex_words - lm_set),
        "lexicon_words_not_in_lm_examples": sorted(lex_words - lm_set)[:10],
        "lm_words_not_in_lexicon": len(spelled - lex_words),
        "lm_words_not_in_lexicon_examples": sorted(spelled - lex_words)[:10],
        "unspellable_words": len(lex.unspellable),
        "unspellable_examples": list(lex.unspellable[:10]),
    }
    word_table = WordTable.from_words(lex_words | lm_set)

    label = f"TLG {out_dir.name}"
    if progress:
        print(f"building {topology} TLG in {out_dir}: {len(lex.entries):,} spellings, "
              f"{tok.num_columns} tokens (blank column {tok.blank}), {num_disambig} disambiguation symbols, "
              f"LM {len(ngram_counts)}-gram with {sum(ngram_counts):,} n-grams", file=sys.stderr)
    _report_vocabulary(vocab_report)  # warnings, shown without progress too
    stages = Stages(["L (lexicon FST)", "G (arpa2fst)", "L ∘ G", "det(L ∘ G)", "min(det(L ∘ G))",
                     "T", "T ∘ LG", "rmepsilon(TLG)", "CSR arrays"], progress, label)
    try:
        lg_key = _digest({"revision": LG_REVISION, "tokens": tok.fst_symbol_lines(),
                          "lexicon": hashlib.sha256(lex.digest_text().encode()).hexdigest(),
                          "lm": inputs["lm"]["sha256"], **({"orphans": orphans} if orphans else {})})
        LG, sizes = (None, None) if force else _cached_lg(cache_dir, lg_key, stages)
        if LG is None:
            LG, sizes = _lg_stages(stages, lex, entries, tok, word_table, Path(lm), orphans)
            _store_lg(cache_dir, lg_key, LG, sizes)
        T = stages.run("T", ctc_topology, topology, tok)
        sizes["T"] = _size(T)
        expected = topology_size(topology, tok.num_columns, tok.num_disambig)
        if (sizes["T"]["states"], sizes["T"]["arcs"]) != expected:
            raise AssertionError(f"T has {sizes['T']}, documented {expected}")  # a bug, not bad input
        TLG = _tlg_stages(stages, T, LG, tok, epsilon_free)
        del LG
        info = {
            "format": GRAPH_FORMAT,
            "fingerprint": fingerprint,
            "topology": topology,
            "epsilon_free": bool(epsilon_free),
            "blank_column": tok.blank,
            "num_columns": tok.num_columns,
            "num_disambig": tok.num_disambig,
            "word_boundary": word_boundary,
            "lexicon_source": options["lexicon_source"],
            "inputs": inputs,
            "lm_ngrams": ngram_counts,
            "vocabulary": vocab_report,
            "sizes": sizes,
            "stages": stages.records,
            "versions": _versions(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }

        graph = stages.run("CSR arrays", graph_from_fst, TLG, tok, word_table, info, source="TLG")
        sizes["TLG"] = {"states": graph.num_states, "arcs": graph.num_arcs,
                        "emitting_arcs": graph.num_emitting_arcs,
                        "epsilon_arcs": graph.num_arcs - graph.num_emitting_arcs}
        special = graph.olabel[graph.olabel >= word_table.ids()["#0"]]
        if special.size:  # a compiler bug, not bad input
            raise AssertionError(f"TLG outputs special word ids {sorted(set(special.tolist()))}")
        # Left after rmepsilon: arcs that must keep an epsilon input because they carry
        # the word (see compile_graph's epsilon_free).
        sizes["TLG"]["epsilon_arcs_with_words"] = int(np.count_nonzero(graph.olabel[graph.num_emitting_arcs:]))
        if epsilon_free and sizes["TLG"]["epsilon_arcs"] != sizes["TLG"]["epsilon_arcs_with_words"]:
            raise AssertionError("eps:eps arcs left in an epsilon-free TLG")  # a compiler bug
        info["build_seconds"] = round(time.perf_counter() - t_start, 3)
        write_graph_dir(out_dir, TLG, graph, lexicon=lex.text(),
                        topology=ctc_topology(topology, tok.with_disambig(0)))
    finally:
        stages.close()
    return BuildResult(out_dir, info, rebuilt=True)


def _report_vocabulary(r: dict):
    def line(n, what, ex):
        if n:
            print(f"  note: {n:,} {what}, e.g. {' '.join(ex[:5])}", file=sys.stderr)
    line(r["lexicon_words_not_in_lm"], "lexicon words are not in the LM (unreachable in the graph)",
         r["lexicon_words_not_in_lm_examples"])
    line(r["lm_words_not_in_lexicon"], "LM words have no spelling (their n-grams are dropped by L ∘ G)",
         r["lm_words_not_in_lexicon_examples"])
    line(r["unspellable_words"], "words cannot be spelled with the tokens (left out of the lexicon)",
         r["unspellable_examples"])


def _up_to_date(out_dir: Path, fingerprint: str) -> dict | None:
    """graph.json, when it records these inputs and options and every file it lists is there
    at its size."""
    try:
        info = json.loads((out_dir / INFO_NAME).read_text(encoding="utf-8"))
        files = info.get("files") if isinstance(info, dict) else None
        if not isinstance(files, dict) or FST_NAME not in files or info.get("fingerprint") != fingerprint:
            return None
        if any((out_dir / name).stat().st_size != size for name, size in files.items()):
            return None
    except (OSError, ValueError, TypeError):
        return None
    return info


def _cached_lg(cache_dir: Path, key: str, stages: Stages):
    """min(det(L ∘ G)) of these inputs as cached, if its file is whole (its sha256 as stored)."""
    path, meta = cache_dir / f"LG-{key}.fst", cache_dir / f"LG-{key}.json"
    if not (path.is_file() and meta.is_file()):
        return None, None
    try:
        entry = json.loads(meta.read_text(encoding="utf-8"))
        if not (isinstance(entry, dict) and isinstance(entry.get("sizes"), dict)
                and entry.get("sha256") == sha256_file(path)):
            return None, None  # a damaged (or an older build's) cache entry is rebuilt
        sizes = entry["sizes"]
        LG = fst.Fst.read(str(path))
        os.utime(path)  # (used now: the last to be evicted)
    except (OSError, ValueError, fst.FstError):
        return None, None
    for name in ("L (lexicon FST)", "G (arpa2fst)", "L ∘ G", "det(L ∘ G)", "min(det(L ∘ G))"):
        stages.skip(name, f"cached ({path.name})")
    return LG, sizes


def _store_lg(cache_dir: Path, key: str, LG, sizes: dict):
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        with atomic_path(cache_dir / f"LG-{key}.fst") as tmp:
            LG.write(tmp)
            digest = sha256_file(tmp)
        with atomic_path(cache_dir / f"LG-{key}.json") as tmp:
            Path(tmp).write_text(json.dumps({"sizes": sizes, "sha256": digest}), encoding="utf-8")
    except OSError as e:
        print(f"  note: could not cache LG in {cache_dir}: {e}", file=sys.stderr)
        return
    _evict_lg(cache_dir, keep=key)


def _evict_lg(cache_dir: Path, keep: str) -> None:
    """The LG cache's entries beyond LG_CACHE_BYTES removed, those used longest ago first
    (never `keep`, the entry just stored)."""
    entries = []
    for path in cache_dir.glob("LG-*.fst"):
        try:
            st = path.stat()
        except OSError:  # (removed meanwhile by another build)
            continue
        entries.append((path.stem[3:] == keep, st.st_mtime, st.st_size, path))
    total = 0
    for kept, _, size, path in sorted(entries, key=lambda e: (not e[0], -e[1])):
        total += size
        if total > LG_CACHE_BYTES and not kept:
            for gone in (path, path.with_suffix(".json")):
                try:
                    gone.unlink()
                except OSError:
                    pass


__all__ = ["BuildResult", "GraphBuildError", "compile_graph"]
