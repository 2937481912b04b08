"""On-the-fly rescoring with a big LM: the LM store against kenlm, the store file, and
decoding a small-LM graph with rescoring against OpenFST's exact shortest path of
TLG_small ∘ D, D the automaton that replaces the small LM's score by the big LM's."""
from __future__ import annotations

import itertools
import math
import warnings
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
import pywrapfst as fst
from arpa_files import random_arpa
from conftest import TINY_ARPA, TINY_ARPA_DEAR_END
from decoding import random_log_probs
from fst_paths import shortest_decode
from wfst.graphs import compile_graph
from wfst.kernels.common import BUCKET_NONE, GAIN_BUCKETS, bucket_bound, bucket_code, context_final, context_step

import wfst
from wfst import contexts, synthetic
from wfst.boost import NO_PHRASES
from wfst.decoder import Decoder
from wfst.errors import MissingFileError, OutputFileError
from wfst.graph import read_fst
from wfst.lm import (
    LmStoreError,
    Rescorer,
    VocabularyError,
    load_lm,
    open_lm,
    prepare_lm,
    read_arpa,
    save_lm,
    truncate_arpa,
)

WIDE = dict(beam=1e4, max_active=10**6, min_active=0, token_capacity=256)


def kenlm_cost(model, words) -> float:
    return -model.score(" ".join(words), bos=True, eos=True) * math.log(10)


@pytest.mark.parametrize("order", [3, 2])  # kenlm reads no unigram-only model
def test_store_scores_sentences_like_kenlm(demo, tmp_path, order):
    kenlm = pytest.importorskip("kenlm")
    arpa = demo / "lm.arpa" if order == 3 else truncate_arpa(demo / "lm.arpa", tmp_path / "lm.arpa", order)
    store, model = read_arpa(arpa), kenlm.Model(str(arpa))
    assert store.order == model.order == order
    sentences = [line.split() for line in (demo / "test.txt").read_text().splitlines()[:150]]
    sentences += [["zzz", "the"], [], ["the", "the", "the"]]  # an unknown word, empty, repeats
    for words in sentences:
        assert store.score(words) == pytest.approx(kenlm_cost(model, words), abs=2e-3)


def test_store_scores_unknown_words_like_kenlm_without_unk(tmp_path):
    """An LM without <unk>: a word it lacks costs kenlm's log10 -100 (after the backoffs to
    the root), not nothing."""
    kenlm = pytest.importorskip("kenlm")
    arpa = tmp_path / "lm.arpa"
    arpa.write_text("\\data\\\nngram 1=4\nngram 2=2\n\n\\1-grams:\n-0.5\t</s>\n-99\t<s>\t-0.2\n-0.4\tab\t-0.3\n"
                    "-0.6\tba\t-0.1\n\n\\2-grams:\n-0.2\t<s> ab\n-0.1\tab ba\n\n\\end\\\n")
    store, model = read_arpa(arpa), kenlm.Model(str(arpa))
    for words in (["ab"], ["ab", "zzz"], ["zzz", "zzz", "zzz"], ["ab", "zzz", "ba"], []):
        assert store.score(words) == pytest.approx(kenlm_cost(model, words), abs=1e-3), words


def test_lexicon_words_the_lms_lack_and_no_arc_outputs_need_no_unk(tmp_path):
    """A lexicon word the graph's LM lacks is left out of the graph (no arc outputs it), so
    rescoring with LMs that lack it too and have no <unk> scores every path as usual."""
    (tmp_path / "tokens.txt").write_text("<blk> 0\na 1\nb 2\n")
    (tmp_path / "lexicon.txt").write_text("ab a b\nba b a\nbb b b\n")  # bb: in no LM
    lm = "\\data\\\nngram 1=4\nngram 2={}\n\n\\1-grams:\n-0.5\t</s>\n-99\t<s>\t-0.3\n-0.6\tab\t-0.2\n" \
         "-0.7\tba\t-0.2\n\n\\2-grams:\n-0.2\t<s> ab\n-0.3\tab ba\n{}\n\\end\\\n"
    (tmp_path / "small.arpa").write_text(lm.format(2, ""))
    (tmp_path / "big.arpa").write_text(lm.format(3, "-0.1\tba ab\n"))
    r = compile_graph(tmp_path / "g", tokens=tmp_path / "tokens.txt", lm=tmp_path / "small.arpa",
                      lexicon=tmp_path / "lexicon.txt")
    g = wfst.load_graph(r.directory)
    assert g.words.ids()["bb"] not in set(g.olabel.tolist())
    x = random_log_probs(3, batch=6, frames=10, columns=3, sharpness=1.0)
    plain = Decoder(g, **WIDE).decode(x)
    assert Decoder(g, rescore_lm=tmp_path / "small.arpa", **WIDE).decode(x) == plain  # its own LM: no change
    dec = Decoder(g, rescore_lm=tmp_path / "big.arpa", **WIDE)
    for got in dec.decode(x):
        if got.reached_final:
            assert got.rescore_cost == pytest.approx(dec.rescorer.big.score(got.words)
                                                     - dec.rescorer.small.score(got.words), abs=1e-4)


UNK_ARPA = ("\\data\\\nngram 1=5\nngram 2=2\n\n\\1-grams:\n-99\t<s>\t-0.5\n-0.9\t</s>\n-1.0\ta\t-0.3\n-1.2\tb\n"
            "-1.5\t{unk}\n\n\\2-grams:\n-0.3\t<s> a\n-0.4\ta b\n\n\\end\\\n")


def test_an_lm_that_spells_its_unknown_word_UNK_reads_it_as_kenlm_does(tmp_path):
    """Kaldi's and LibriSpeech's LMs spell the unknown word <UNK>, which kenlm reads as its
    <unk>: an unknown word cost log10 -100 instead (~230 nats), and a graph word the big
    LM lacks was refused as if it had no unknown word."""
    kenlm = pytest.importorskip("kenlm")
    big = tmp_path / "big.arpa"
    big.write_text(UNK_ARPA.format(unk="<UNK>"))
    small = tmp_path / "small.arpa"
    small.write_text("\\data\\\nngram 1=5\nngram 2=1\n\n\\1-grams:\n-99\t<s>\t-0.5\n-0.9\t</s>\n-1.0\ta\n-1.2\tb\n"
                     "-1.5\tc\n\n\\2-grams:\n-0.3\t<s> a\n\n\\end\\\n")
    models = {p: kenlm.Model(str(p)) for p in (big, small)}
    for words in (["a", "b"], ["a", "zzz"], ["<UNK>"], ["<unk>", "b"]):
        assert read_arpa(big).score(words) == pytest.approx(kenlm_cost(models[big], words), abs=1e-3)
    with pytest.warns(UserWarning, match="scored as <unk>: 'c'"):
        rescorer = Rescorer(read_arpa(big), read_arpa(small), ("<eps>", "a", "b", "c"))
    assert rescorer.path_cost([1, 3]) == pytest.approx(kenlm_cost(models[big], ["a", "c"])
                                                       - kenlm_cost(models[small], ["a", "c"]), abs=1e-3)


def test_a_graph_word_unk_is_scored_as_the_big_lm_scores_it_or_refused(tmp_path):
    """A lexicon that spells <unk> (Kaldi's and icefall's do) puts it on the graph's arcs: it is
    scored as the big LM's <unk>, or refused where the big LM has none; it was read as the
    big LM's word 0 (</s> here) without a word."""
    kenlm = pytest.importorskip("kenlm")
    small = tmp_path / "small.arpa"
    small.write_text(UNK_ARPA.format(unk="<unk>"))
    words, on_arcs = ("<eps>", "a", "b", "<unk>"), np.array([0, 1, 2, 3])
    big = tmp_path / "big.arpa"
    big.write_text(UNK_ARPA.format(unk="<unk>").replace("-1.5\t<unk>", "-2.5\t<unk>"))
    rescorer = Rescorer(read_arpa(big), read_arpa(small), words, on_arcs)
    models = {p: kenlm.Model(str(p)) for p in (big, small)}
    assert rescorer.path_cost([1, 3]) == pytest.approx(kenlm_cost(models[big], ["a", "<unk>"])
                                                       - kenlm_cost(models[small], ["a", "<unk>"]), abs=1e-3)
    big.write_text(UNK_ARPA.format(unk="<unk>").replace("-1.5\t<unk>\n", "").replace("ngram 1=5", "ngram 1=4"))
    with pytest.raises(VocabularyError, match=r"not in the big LM, which has no <unk> to stand for them: '<unk>'"):
        Rescorer(read_arpa(big), read_arpa(small), words, on_arcs)


@pytest.mark.parametrize("order", [2, 3, 4])
def test_backoff_weights_of_ngrams_nothing_continues_apply(tmp_path, order):
    """An n-gram's backoff weight applies to the next word even where no n-gram continues it
    (pruned LMs keep such weights; <s> may have one): the store's sentence costs equal kenlm's,
    and so do the Rescorer's big - small differences with a graph LM cut from the big LM."""
    kenlm = pytest.importorskip("kenlm")
    symbols = ("a", "b", "c", "d", "e")
    big = random_arpa(tmp_path / "big.arpa", symbols, order, seed=order, density=0.1 if order == 2 else 0.2,
                      orphan_backoffs=0.6)
    small = truncate_arpa(big, tmp_path / "small.arpa", order - 1) if order > 2 else big
    models = {p: kenlm.Model(str(p)) for p in (big, small)}
    rescorer = Rescorer(read_arpa(big), read_arpa(small), ("<eps>", *symbols))
    rng = np.random.default_rng(order)
    for _ in range(200):
        words = [symbols[i] for i in rng.integers(len(symbols), size=int(rng.integers(0, 7)))]
        for p in (big, small):
            assert read_arpa(p).score(words) == pytest.approx(kenlm_cost(models[p], words), abs=1e-3)
        ids = [1 + symbols.index(w) for w in words]
        assert rescorer.path_cost(ids) == pytest.approx(kenlm_cost(models[big], words)
                                                        - kenlm_cost(models[small], words), abs=1e-3)
    graph = SimpleNamespace(words=("<eps>", *symbols))  # (all the bound check reads of a decoder)
    _check_gain_bounds(SimpleNamespace(rescorer=rescorer, graph=graph), range(rescorer.big.num_states))


def test_store_file_is_memory_mapped_and_equal(tmp_path):
    (tmp_path / "lm.arpa").write_text(TINY_ARPA.lstrip())
    store = read_arpa(tmp_path / "lm.arpa")
    path = prepare_lm(tmp_path / "lm.arpa", progress=False)
    assert path == tmp_path / "lm.arpa.lmstore"
    loaded = load_lm(path)
    assert isinstance(loaded.labels, np.memmap)
    for name in ("offsets", "labels", "weights", "nexts", "backoff", "bo_weight", "depth"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(store, name))
    assert loaded.words == store.words and loaded.start == store.start
    before = path.stat().st_mtime_ns
    assert prepare_lm(tmp_path / "lm.arpa", progress=False) == path and path.stat().st_mtime_ns == before
    (tmp_path / "lm.arpa").write_text(TINY_ARPA.lstrip().replace("-0.3\t<s> ab", "-0.31\t<s> ab"))
    prepare_lm(tmp_path / "lm.arpa", progress=False)  # changed ARPA: made again
    assert load_lm(path).source["sha256"] != store.source["sha256"]
    assert open_lm(tmp_path / "lm.arpa").num_arcs == store.num_arcs == open_lm(path).num_arcs


def test_damaged_store_files_are_refused(tmp_path):
    (tmp_path / "lm.arpa").write_text(TINY_ARPA.lstrip())
    good = save_lm(read_arpa(tmp_path / "lm.arpa"), tmp_path / "good.lmstore").read_bytes()
    with pytest.raises(MissingFileError):
        load_lm(tmp_path / "absent.lmstore")
    import json
    n = int(np.frombuffer(good[8:16], np.uint64)[0])
    meta = json.loads(good[16:16 + n])

    def patched(name: str, i: int, value) -> bytes:
        """The store with element i of array `name` set to value."""
        spec = meta["arrays"][name]
        at = -(-(16 + n) // 64) * 64 + spec["offset"] + i * np.dtype(spec["dtype"]).itemsize
        value = np.array(value, spec["dtype"]).tobytes()
        return good[:at] + value + good[at + len(value):]

    deep = int(np.argmax(read_arpa(tmp_path / "lm.arpa").depth))  # a state whose backoff chain has two steps
    cases = {"magic": (b"NOTASTORE" + good[9:], "not an LM store"),
             "truncated": (good[:-64], "truncated"),
             "header": (good[:17] + b"}}}" + good[20:], "damaged header"),
             "offsets": (patched("offsets", 1, 10**6), "damaged store: offsets are not a CSR index"),
             # each would hang every walk of the chain, or give wrong words without a word of warning
             "cycle": (patched("backoff", deep, deep), "damaged store: a backoff chain that does not end at the root"),
             "nan_backoff": (patched("bo_weight", 1, np.nan), "damaged store: NaN or infinite backoff costs"),
             "negative": (patched("weights", 0, -1e30), r"damaged store: NaN or negative word costs"),
             "nan_weight": (patched("weights", 3, np.nan), r"damaged store: NaN or negative word costs"),
             "label": (patched("labels", 2, 99), "damaged store: labels or next states out of range"),
             "next": (patched("nexts", 2, -1), "damaged store: labels or next states out of range"),
             "backoff": (patched("backoff", 1, 10**6), "damaged store: backoff or start states out of range"),
             "root": (patched("depth", 0, 1), "damaged store: a backoff chain that does not end at the root"),
             "final": (patched("final", 2, np.nan), "damaged store: NaN final costs")}
    def with_header(fields) -> bytes:
        """The store with a hand-edited header (its data moved to the new alignment)."""
        head = good[:8] + np.uint64(len(fields)).tobytes() + fields
        return head + b"\0" * (-len(head) % 64) + good[-(-(16 + n) // 64) * 64:]

    for field, value in (("arrays", {}), ("arrays", {"labels": 3}), ("start", "0"), ("num_states", None),
                         ("data_bytes", "x")):  # fields missing or of the wrong type
        cases[f"{field}_{type(value).__name__}"] = (with_header(json.dumps({**meta, field: value}).encode()),
                                                    "damaged header")
    cases["start"] = (with_header(json.dumps({**meta, "start": meta["num_states"]}).encode()),
                      "damaged store: backoff or start states out of range")
    labels = {**meta["arrays"]["labels"], "offset": 10**9}  # an array past the file's end
    cases["beyond"] = (with_header(json.dumps({**meta, "arrays": {**meta["arrays"], "labels": labels}}).encode()),
                       "damaged header")
    cases["short"] = (good[:10], r"truncated \(10 bytes, no header\)")
    cases["cut"] = (good[:-1], rf"truncated \({len(good) - 1} bytes, the header says {len(good)}\); prepare it again$")
    cases["longer"] = (good + b"x" * 64, rf"damaged \({len(good) + 64} bytes, the header says {len(good)}\)")
    cases["empty"] = (b"", "not an LM store file")
    for name, (data, message) in cases.items():
        (tmp_path / f"{name}.lmstore").write_bytes(data)
        for load in (load_lm, open_lm):  # (open_lm: a damaged .lmstore is no ARPA file to parse)
            with pytest.raises(LmStoreError, match=message) as e:
                load(tmp_path / f"{name}.lmstore")
            assert "LmStoreError" not in str(e.value), e.value  # (was one inside another)


def test_truncate_and_prepare_refuse_what_they_cannot_write(tmp_path, monkeypatch):
    """truncate_arpa: order >= 1, a .gz destination gzipped (it was plain text under a .gz
    name), an unwritable one an OutputFileError; prepare_lm: an explicit store path that
    cannot be written is an error (it went silently to ./.wfst-cache), and a store in the
    fallback folder is reused (it was parsed again at every open)."""
    from wfst.errors import OptionError, OutputFileError

    (tmp_path / "lm.arpa").write_text(TINY_ARPA.lstrip())
    for order in (0, -1, "2", 1.5, True):
        with pytest.raises(OptionError, match="order=.*must be an integer >= 1"):
            truncate_arpa(tmp_path / "lm.arpa", tmp_path / "x.arpa", order)
    small = truncate_arpa(tmp_path / "lm.arpa", tmp_path / "small.arpa.gz", 2)
    assert small.read_bytes()[:2] == b"\x1f\x8b" and read_arpa(small).order == 2
    for dst in (tmp_path, tmp_path / "no" / "x.arpa"):
        with pytest.raises(OutputFileError, match="cannot write ARPA file"):
            truncate_arpa(tmp_path / "lm.arpa", dst, 2)
    with pytest.raises(OutputFileError, match="cannot write LM store file"):
        prepare_lm(tmp_path / "lm.arpa", tmp_path, progress=False)
    monkeypatch.chdir(tmp_path)
    real_save = save_lm

    def beside_unwritable(store, path):
        if path.name == "lm.arpa.lmstore":
            raise PermissionError(13, "Permission denied")
        return real_save(store, path)

    monkeypatch.setattr("wfst.lm.save_lm", beside_unwritable)
    first = prepare_lm(tmp_path / "lm.arpa", progress=False)
    assert first.parent.name == ".wfst-cache"
    monkeypatch.setattr("wfst.lm.read_arpa", lambda *a, **kw: pytest.fail("parsed again"))
    assert prepare_lm(tmp_path / "lm.arpa", progress=False) == first


@pytest.fixture
def small_graph(tiny, tmp_path):
    """The tiny lexicon's graph built on a bigram cut from the tiny 3-gram (the big LM)."""
    small = truncate_arpa(tiny / "lm.arpa", tmp_path / "small.arpa", 2)
    r = compile_graph(tmp_path / "g", tokens=tiny / "tokens.txt", lm=small, lexicon=tiny / "lexicon.txt",
                      word_boundary="|", topology="compact")
    return wfst.load_graph(r.directory), read_fst(r.directory / "TLG.fst"), tiny / "lm.arpa", small


def rescoring_fst(decoder: Decoder, final: bool = True) -> fst.VectorFst:
    """D: one state per big-LM state, an arc per word adding big - small LM cost (what
    context_step adds), final cost big </s> - small </s> (0 unless `final`)."""
    r = decoder.rescorer
    c = contexts.context(r, [NO_PHRASES])
    d = fst.VectorFst()
    for _ in range(r.big.num_states):
        d.add_state()
    d.set_start(r.big.start)
    W = len(decoder.graph.words)
    for s in range(r.big.num_states):
        d.set_final(s, fst.Weight(d.weight_type(), float(context_final(c, 0, s)) if final else 0.0))
        for w in range(1, W):
            if decoder.graph.words[w].startswith("#") or decoder.graph.words[w] in ("<s>", "</s>"):
                continue
            cost, nxt = context_step(c, 0, s, w)
            d.add_arc(s, fst.Arc(w, w, fst.Weight(d.weight_type(), float(cost)), int(nxt)))
    return d.arcsort("ilabel")


def test_rescoring_equals_exact_composition(small_graph):
    g, tlg, big, small = small_graph
    dec = Decoder(g, rescore_lm=big, graph_lm=small, **WIDE)
    composed = fst.compose(tlg.copy().arcsort("olabel"), rescoring_fst(dec))
    x = random_log_probs(5, batch=8, frames=12, columns=5, sharpness=1.5)
    results = dec.decode(x)
    plain = Decoder(g, **WIDE).decode(x)
    changed = 0
    for b, got in enumerate(results):
        words, cost = shortest_decode(composed, x[b])
        assert got.word_ids == tuple(words)
        assert got.cost == pytest.approx(cost, abs=1e-4)
        assert got.acoustic_cost + got.graph_cost + got.rescore_cost == pytest.approx(got.cost)
        expected = dec.rescorer.big.score(got.words) - dec.rescorer.small.score(got.words)
        assert got.rescore_cost == pytest.approx(expected, abs=1e-4)
        changed += got.words != plain[b].words or got.cost != pytest.approx(plain[b].cost)
    assert changed, "the big LM should change some result"
    # the LM's memo of steps is kept from call to call: a second batch decodes as if alone
    assert dec.decode(x[::-1].copy()) == results[::-1]


def _sequences(f: fst.VectorFst, n: int) -> list[tuple[tuple[int, ...], float]]:
    """The n best distinct output word sequences of an acyclic FST and their costs (OpenFST)."""
    words = f.copy().project("output").rmepsilon()
    best = fst.shortestpath(fst.determinize(words), nshortest=n, unique=True)
    out = []
    for first in best.arcs(best.start()) if best.start() >= 0 else []:
        labels, cost, s = [first.olabel] if first.olabel else [], float(first.weight), first.nextstate
        while float(best.final(s)) == math.inf:
            (arc,) = list(best.arcs(s))
            labels += [arc.olabel] if arc.olabel else []
            cost, s = cost + float(arc.weight), arc.nextstate
        out.append((tuple(labels), cost + float(best.final(s))))
    if best.start() >= 0 and float(best.final(best.start())) < math.inf:
        out.append(((), float(best.final(best.start()))))
    return sorted(out, key=lambda p: p[1])


@pytest.mark.parametrize("lattice_beam", [3.0, 6.0])
def test_lattice_rescoring_equals_the_lattice_composed_with_the_big_lm(small_graph, lattice_beam):
    """rescore_mode="lattice": the search keeps the small graph's word lattice and it is
    rescored after it.  The result is OpenFST's shortest path of (the search's lattice ∘ D),
    its lattice holds that composition's word sequences within the lattice beam of it (the
    N-best lists agree, costs too), and its costs add up as on-the-fly rescoring's do."""
    g, _, big, small = small_graph
    config = dict(beam=8.0, max_active=200, lattice_beam=lattice_beam)
    first = Decoder(g, **config)
    dec = Decoder(g, rescore_lm=big, graph_lm=small, rescore_mode="lattice", **config)
    assert dec._searched_lm is None and dec.rescorer is not None
    x = random_log_probs(5, batch=8, frames=12, columns=5, sharpness=1.0)
    plain, got = first.decode(x), dec.decode(x, nbest=4)
    assert dec.stats.lm == {"lm_bytes": dec.rescorer.host_bytes}  # (the search reads no LM; the lattices do)
    finals = {True: rescoring_fst(dec), False: rescoring_fst(dec, final=False)}
    changed = 0
    for p, r in zip(plain, got):
        composed = fst.compose(p.lattice.to_fst().arcsort("olabel"), finals[p.reached_final])
        want = [(w, c) for w, c in _sequences(composed, 4)]
        assert r.word_ids == want[0][0] and r.cost == pytest.approx(want[0][1], abs=1e-4)
        kept = [(w, c) for w, c in want if c <= want[0][1] + lattice_beam - 1e-3]
        listed = [(h.word_ids, h.cost) for h in r.nbest]
        assert [w for w, _ in listed[:len(kept)]] == [w for w, _ in kept]
        assert [c for _, c in listed[:len(kept)]] == pytest.approx([c for _, c in kept], abs=1e-4)
        assert all(c <= r.cost + lattice_beam + 1e-3 for _, c in listed)  # pruned to the beam
        assert r.acoustic_cost + r.graph_cost + r.rescore_cost == pytest.approx(r.cost, abs=1e-4)
        expected = dec.rescorer.big.score(r.words) - dec.rescorer.small.score(r.words) if r.reached_final else None
        if expected is not None:
            assert r.rescore_cost == pytest.approx(expected, abs=1e-4)
        changed += r.words != p.words
    assert changed, "the big LM should change some result"


def test_lattice_rescoring_on_threads_equals_one_thread(small_graph):
    """A batch's lattices are made and rescored on the decoder's threads: each utterance
    gets its own result, lattice and N-best list, as on one thread (empty utterances too)."""
    g, _, big, small = small_graph
    x = random_log_probs(7, batch=9, frames=12, columns=5, sharpness=1.0)
    lengths = np.array([12, 0, 5, 12, 1, 9, 12, 3, 12])
    got = {t: Decoder(g, rescore_lm=big, graph_lm=small, rescore_mode="lattice", lattice_beam=4.0, beam=8.0,
                      max_active=200, num_threads=t).decode(x, lengths, nbest=3) for t in (1, 3)}
    assert len({r.words for r in got[1]}) > 3  # (utterances that differ)
    for a, b in zip(got[1], got[3]):
        assert a == b and [(h.word_ids, h.cost) for h in a.nbest] == [(h.word_ids, h.cost) for h in b.nbest]
        assert (a.lattice.num_states, a.lattice.num_arcs) == (b.lattice.num_states, b.lattice.num_arcs)
        assert np.array_equal(a.lattice.src, b.lattice.src) and np.array_equal(a.lattice.graph_cost,
                                                                              b.lattice.graph_cost)


def test_lattice_rescoring_with_a_wide_lattice_is_the_exact_search(small_graph):
    """With a lattice as wide as the search, rescoring it finds what on-the-fly rescoring
    finds: the same words and costs."""
    g, _, big, small = small_graph
    x = random_log_probs(6, batch=8, frames=12, columns=5, sharpness=1.5)
    exact = Decoder(g, rescore_lm=big, graph_lm=small, **WIDE).decode(x)
    got = Decoder(g, rescore_lm=big, graph_lm=small, rescore_mode="lattice", lattice_beam=1e3, **WIDE).decode(x)
    for a, b in zip(got, exact):
        assert (a.word_ids, a.word_frames, a.reached_final) == (b.word_ids, b.word_frames, b.reached_final)
        assert a.cost == pytest.approx(b.cost, abs=1e-4) and a.rescore_cost == pytest.approx(b.rescore_cost, abs=1e-4)


def test_lattice_rescoring_prunes_the_composition_as_it_is_made(small_graph):
    """The composition expands a (lattice state, history) only within the beam of the best
    estimate so far (its cost + the lattice's best rest): on wide lattices it makes far fewer
    states than the full composition (beam +inf) and finds the same best path."""
    from wfst.kernels.lattice import rescore_lattice

    g, _, big, small = small_graph
    dec = Decoder(g, rescore_lm=big, graph_lm=small)
    x = random_log_probs(3, batch=6, frames=14, columns=5, sharpness=0.5)
    made = {2.0: 0, np.inf: 0}
    for r in Decoder(g, lattice_beam=1e3, **WIDE).decode(x):
        raw = r.lattice._raw
        out = {beam: rescore_lattice(raw.src, raw.dst, r.lattice.olabel, raw.graph_cost + raw.acoustic_cost, raw.arc,
                                     r.lattice.num_states, raw.final_states, raw.final_costs, raw.reached_final,
                                     dec.rescorer.context, beam, beam) for beam in made}
        assert out[2.0][9] == pytest.approx(out[np.inf][9], abs=1e-4)  # the best path's cost
        assert list(out[2.0][4][out[2.0][8]]) == list(out[np.inf][4][out[np.inf][8]])  # its lattice arcs
        for beam in made:
            made[beam] += out[beam][10]
    assert made[2.0] < 0.5 * made[np.inf]


def test_lattice_rescoring_keeps_a_path_where_the_big_lm_makes_every_path_dearer(tmp_path):
    """The composition's estimate is the small LM's: where the big LM makes every path dearer
    by more than the margin ('a b' by 6.4 nats, 'c b' by 4.1), pruning against it left no
    path, and the result had no words and cost +inf.  It is made again wider: the big LM's
    best, 'c b', as on the fly."""
    (tmp_path / "tokens.txt").write_text("<blk> 0\n| 1\na 2\nb 3\nc 4\n")
    (tmp_path / "lexicon.txt").write_text("a a\nb b\nc c\n")
    (tmp_path / "small.arpa").write_text("\\data\\\nngram 1=5\n\n\\1-grams:\n-99\t<s>\n-0.602\t</s>\n"
                                         "-0.602\ta\n-0.602\tb\n-0.602\tc\n\n\\end\\\n")
    (tmp_path / "big.arpa").write_text(
        "\\data\\\nngram 1=5\nngram 2=5\n\n\\1-grams:\n-99\t<s>\t0\n-0.602\t</s>\n-0.602\ta\t0\n"
        "-0.602\tb\t0\n-0.602\tc\t0\n\n\\2-grams:\n-0.5\t<s> a\n-3.5\t<s> c\n-4.0\ta b\n-0.004\tc b\n"
        "-0.1\tb </s>\n\n\\end\\\n")
    r = compile_graph(tmp_path / "g", tokens=tmp_path / "tokens.txt", lm=tmp_path / "small.arpa",
                      lexicon=tmp_path / "lexicon.txt", word_boundary="|", topology="compact", progress=False)
    g = wfst.load_graph(r.directory)
    x = np.full((1, 5, 5), -30.0, np.float32)  # a blank, a or c alike, the boundary, b, a blank
    x[0, 0, 0] = x[0, 4, 0] = x[0, 2, 1] = x[0, 3, 3] = 0.0
    x[0, 1, 2] = x[0, 1, 4] = math.log(0.5)
    options = dict(rescore_lm=tmp_path / "big.arpa", graph_lm=tmp_path / "small.arpa", beam=16.0, num_threads=1)
    on_the_fly = Decoder(g, **options).decode(x)[0]
    rescored = Decoder(g, **options, rescore_mode="lattice", lattice_beam=3.0).decode(x, nbest=5)[0]
    assert on_the_fly.words == rescored.words == ("c", "b")
    assert rescored.cost == pytest.approx(on_the_fly.cost, abs=1e-4)
    assert [n.words for n in rescored.nbest] == [("c", "b"), ("a", "b")]


def test_lattice_rescoring_options_are_checked(small_graph):
    g, _, big, small = small_graph
    with pytest.raises(wfst.WfstError, match="rescore_mode='nope': must be one of 'on_the_fly', 'lattice'"):
        Decoder(g, rescore_lm=big, graph_lm=small, rescore_mode="nope")
    with pytest.raises(wfst.WfstError, match="rescore_mode='lattice' rescores with a big LM: give rescore_lm="):
        Decoder(g, rescore_mode="lattice", lattice_beam=4.0)
    with pytest.raises(wfst.WfstError, match="set lattice_beam"):
        Decoder(g, rescore_lm=big, graph_lm=small, rescore_mode="lattice")
    with pytest.raises(wfst.WfstError, match="graph_lm= is the graph's LM, which rescoring subtracts: give rescore"):
        Decoder(g, graph_lm=small)  # (it did nothing)
    r = Decoder(g, lattice_beam=4.0).decode(random_log_probs(1, batch=1, frames=6, columns=5))[0]
    rescorer = Decoder(g, rescore_lm=big, graph_lm=small).rescorer
    for beam in (-1.0, float("nan"), "4", None):
        with pytest.raises(wfst.WfstError, match="rescored: beam=.* must be a number >= 0"):
            r.lattice.rescored(rescorer, beam)
    assert r.lattice.rescored(rescorer, 0.0)[1].cost == pytest.approx(r.lattice.rescored(rescorer, 4.0)[1].cost)


def test_a_lattice_with_a_cycle_is_refused_not_looped():
    """The composition visits the lattice's states in topological order; arcs that form a
    cycle (a graph with an epsilon cycle) leave states unvisited: refused, status 1."""
    from wfst.kernels.lattice import rescore_lattice, topological_order

    src, dst = np.array([0, 1, 2, 2], np.int32), np.array([1, 2, 1, 3], np.int32)
    order, first, out = topological_order(src, dst, 4)
    assert list(order) == [0] and list(first) == [0, 1, 2, 4, 4] and sorted(out) == [0, 1, 2, 3]
    assert list(topological_order(src[[0, 1, 3]], dst[[0, 1, 3]], 4)[0]) == [0, 1, 2, 3]
    c = contexts.context(None, [NO_PHRASES])
    status = rescore_lattice(src, dst, np.zeros(4, np.int32), np.zeros(4, np.float32), np.arange(4, dtype=np.int32), 4,
                             np.array([3], np.int32), np.zeros(1, np.float32), True, c, 5.0, 7.0)[0]
    assert status == 1


def test_context_beam_expands_only_the_cheapest_contexts_of_a_state(small_graph):
    """context_beam: of the tokens at one graph state (they differ in the big LM's history),
    only those within it of the cheapest are expanded.  As wide as the beam, it is the exact
    search; at 0 one history goes on per state: fewer tokens, each result still scored as its
    words say, never cheaper than the exact composition's best, and some dearer (the big LM
    here finds "ab ba" a dear end of a sentence, which the bigram in the graph cannot see)."""
    g, tlg, _, small = small_graph
    big = small.parent / "big.arpa"
    big.write_text(TINY_ARPA_DEAR_END.lstrip())
    x = random_log_probs(2, batch=8, frames=12, columns=5, sharpness=1.0)
    exact = Decoder(g, rescore_lm=big, graph_lm=small, **WIDE)
    want = exact.decode(x)
    assert Decoder(g, rescore_lm=big, graph_lm=small, context_beam=WIDE["beam"], **WIDE).decode(x) == want
    dec = Decoder(g, rescore_lm=big, graph_lm=small, context_beam=0.0, **WIDE)
    got = dec.decode(x)
    assert dec.stats.tokens_per_frame < 0.8 * exact.stats.tokens_per_frame
    for r, w in zip(got, want):
        assert r.cost >= w.cost - 1e-4
        assert r.acoustic_cost + r.graph_cost + r.rescore_cost == pytest.approx(r.cost)
        expected = dec.rescorer.big.score(r.words) - dec.rescorer.small.score(r.words)
        assert r.rescore_cost == pytest.approx(expected, abs=1e-4)
    assert sum(r.cost > w.cost + 1e-4 for r, w in zip(got, want)) >= 1


def test_graph_lm_is_found_through_graph_json(small_graph, capsys):
    g, _, big, small = small_graph
    x = random_log_probs(2, batch=2, frames=8, columns=5)
    found = Decoder(g, rescore_lm=big, **WIDE).decode(x)
    assert found == Decoder(g, rescore_lm=big, graph_lm=small, **WIDE).decode(x)
    small.write_text(small.read_text() + "\n")
    with pytest.raises(wfst.WfstError, match="changed since the graph was built"):
        Decoder(g, rescore_lm=big)
    with pytest.warns(UserWarning, match=r"graph_lm= .*small.arpa is not the file the graph was built with"):
        Decoder(g, rescore_lm=big, graph_lm=small)  # given: it may hold the same n-grams (gzipped, say)
    small.unlink()
    with pytest.raises(MissingFileError, match=r"the graph's LM \(graph.json inputs.lm.path\) .*small.arpa: not "
                                               r"found; pass graph_lm="):  # (the path came after the hint)
        Decoder(g, rescore_lm=big)
    from wfst.cli import decode_main

    x_file = small.parent / "x.npz"
    synthetic.save_npz(x_file, x, np.full(2, 8))
    assert decode_main(["--graph", str(g.directory), "--emissions", str(x_file), "--rescore-lm", str(big)]) == 2
    assert "not found; pass --graph-lm the ARPA file" in capsys.readouterr().err  # the command's option
    with pytest.raises(MissingFileError, match=r"language model \(ARPA or LM store file\) .*: is a directory"):
        Decoder(g, rescore_lm=big.parent, graph_lm=big)


def test_big_lm_vocabulary_mismatch(small_graph, tmp_path):
    g, _, big, small = small_graph
    no_unk = tmp_path / "no_unk.arpa"
    no_unk.write_text(TINY_ARPA.lstrip().replace("ngram 1=8", "ngram 1=6").replace("-2.0\t<unk>\n", "")
                      .replace("-1.6\tcab\n", "").replace("-0.45\ta cab\n", "").replace("ngram 2=7", "ngram 2=6"))
    with pytest.raises(VocabularyError, match="1 of the graph's 5 words are not in the big LM.*'cab'"):
        Decoder(g, rescore_lm=no_unk, graph_lm=small)
    with_unk = tmp_path / "with_unk.arpa"
    with_unk.write_text(TINY_ARPA.lstrip().replace("-1.6\tcab\n", "").replace("a cab", "a ab")
                        .replace("ngram 1=8", "ngram 1=7"))
    with pytest.warns(UserWarning, match="scored as <unk>: 'cab'"):
        dec = Decoder(g, rescore_lm=with_unk, graph_lm=small)
    assert dec.rescorer.big_report["graph_words_as_unk"] == 1
    unigram = truncate_arpa(small, tmp_path / "unigram.arpa", 1)
    with pytest.raises(VocabularyError, match="not histories of the big LM"):
        Decoder(g, rescore_lm=unigram, graph_lm=small)


def test_rescoring_with_phrases_and_words_together(small_graph):
    """Both context automata at once: the token context is (LM state, phrase state)."""
    g, tlg, big, small = small_graph
    dec = Decoder(g, rescore_lm=big, graph_lm=small, **WIDE)
    x = random_log_probs(9, batch=6, frames=12, columns=5, sharpness=1.5)
    boost = {"ab ba": 2.0, "abc": 0.5}
    got = dec.decode(x, boost=boost)
    for r in got:
        assert r.acoustic_cost + r.graph_cost + r.boost_cost + r.rescore_cost == pytest.approx(r.cost)
    plain = Decoder(g, rescore_lm=big, graph_lm=small, **WIDE).decode(x)
    for a, b in zip(got, plain):  # a boost only ever lowers the best cost
        assert a.cost <= b.cost + 1e-4
    assert dec.decode(x) == plain  # the phrases' memos were the utterances' own


def test_demo_rescoring_finds_the_big_lm_graphs_words(demo, tmp_path_factory):
    """A character graph on a bigram cut from the demo 3-gram, rescored with the 3-gram,
    against the graph built on the 3-gram itself: the same words nearly everywhere (G's
    epsilon backoffs let the static graph score some word pairs below the exact LM)."""
    from wfst import synthetic

    out = tmp_path_factory.mktemp("rescore")
    small = truncate_arpa(demo / "lm.arpa", out / "lm2.arpa", 2)
    graphs = {}
    for name, lm in [("small", small), ("big", demo / "lm.arpa")]:
        r = compile_graph(out / name, tokens=demo / "chars_tokens.txt", word_boundary="|", lm=lm,
                          topology="compact", cache_dir=out / "cache")
        graphs[name] = wfst.load_graph(r.directory)
    texts = [t for t in (demo / "test.txt").read_text().splitlines() if t.strip()][:40]
    x, lengths = synthetic.from_texts(texts, graphs["small"].tokens, word_boundary="|", seed=3, confusion=0.15,
                                      noise=1.5)
    rescored = Decoder(graphs["small"], rescore_lm=demo / "lm.arpa").decode(x, lengths)
    static = Decoder(graphs["big"]).decode(x, lengths)
    same = sum(a.words == b.words for a, b in zip(rescored, static))
    assert same >= 0.95 * len(texts)


def _check_gain_bounds(dec, states):
    """Every word step of these big-LM states gives back at most the state's gain bound and
    at most the bound of its word's bucket; a bucket's bound is at most the state's (its
    codes round up by less than 1/8 nat a backoff level); at the root the state's bound is
    attained (it is exact there), and so is nearly every bucket's, to its rounding.  Returns
    how many of the states bound most buckets tighter than the state by over half a nat."""
    r = dec.rescorer
    c = contexts.context(r, [NO_PHRASES])
    words = [w for w in range(1, len(dec.graph.words))
             if not dec.graph.words[w].startswith("#") and dec.graph.words[w] not in ("<s>", "</s>", "<eps>")]
    bucket = r.lm_map[words] & (GAIN_BUCKETS - 1)
    tighter = 0
    for s in states:
        gains = np.array([-float(context_step(c, 0, np.int32(s), w)[0]) for w in words])
        bounds = np.array([bucket_bound(q) for q in r.buckets[s]], np.float64)
        assert gains.max() <= float(r.gain[s]) + 1e-5, s
        assert (gains <= bounds[bucket] + 1e-5).all(), s
        assert (bounds <= float(r.gain[s]) + 0.5).all(), s
        if s == 0:
            assert gains.max() == pytest.approx(float(r.gain[s]), abs=1e-5)
            attained = [bounds[j] - gains[bucket == j].max() < 0.125 + 1e-5 for j in set(bucket.tolist())]
            assert sum(attained) >= len(attained) - 2  # (an LM word the graph lacks may set one: </s>, <unk>)
        tighter += np.median(bounds) < r.gain[s] - 0.5
    assert np.isfinite(r.gain).all() and (r.buckets < BUCKET_NONE).all()
    return tighter


@pytest.mark.parametrize("labels_dtype", [np.int32, np.uint16])  # uint16: the GPU's labels
def test_automaton_locate_finds_labels_as_a_sorted_search_does(labels_dtype):
    """automaton_locate against np.searchsorted and the backoff chain, on states of every
    kind (dense as an LM's unigrams, sparse, small, empty) and labels below, between and
    above a state's."""
    from wfst.kernels.common import automaton_locate

    rng = np.random.default_rng(7)
    V = 3000
    sets = [np.arange(V), np.delete(np.arange(V), 1234), np.arange(V - 64, V), np.arange(0)]
    sets += [np.sort(rng.choice(V, k, replace=False)) for k in (1500, 700, 40, 33, 32, 5)]
    offsets = np.concatenate(([0], np.cumsum([len(x) for x in sets]))).astype(np.int64)
    labels = np.concatenate(sets).astype(np.int32)
    n = len(sets)
    backoff = np.array([-1] + [int(rng.integers(0, i)) for i in range(1, n)], np.int32)
    bo_weight = rng.random(n).astype(np.float32)
    a = contexts.automata([(offsets, labels, np.zeros(len(labels), np.float32), np.zeros(len(labels), np.int32),
                            backoff, bo_weight, np.zeros(n, np.float32))], labels_dtype=labels_dtype)
    for state in range(n):
        for label in [*sets[state], *sets[backoff[state]][::7], *rng.integers(0, V, 100), 0, V - 1, V, 1234]:
            cost, s, want = np.float32(0.0), state, -1
            while True:
                lo, hi = offsets[s], offsets[s + 1]
                i = lo + np.searchsorted(labels[lo:hi], label)
                if i < hi and labels[i] == label:
                    want = i
                    break
                if backoff[s] < 0:
                    break
                cost, s = np.float32(cost + bo_weight[s]), backoff[s]
            got = automaton_locate(a, 0, state, label)
            assert (int(got[1]), int(got[2])) == (want, s), (state, label)
            assert got[0] == cost


def test_gain_bounds_bound_every_word_step(small_graph):
    g, _, big, small = small_graph
    dec = Decoder(g, rescore_lm=big, graph_lm=small)
    _check_gain_bounds(dec, range(dec.rescorer.big.num_states))


def test_gain_bounds_on_the_demo_lms(demo, tmp_path):
    small = truncate_arpa(demo / "lm.arpa", tmp_path / "lm2.arpa", 2)
    r = compile_graph(tmp_path / "g", tokens=demo / "chars_tokens.txt", word_boundary="|", lm=small,
                      topology="compact")
    dec = Decoder(wfst.load_graph(r.directory), rescore_lm=demo / "lm.arpa")
    states = np.random.default_rng(0).choice(dec.rescorer.big.num_states, 12, replace=False)
    assert _check_gain_bounds(dec, [0, *states.tolist()]) >= 7  # the buckets are tighter on most states


def test_gain_bounds_in_pieces_on_threads_equal_one_pass(demo, tmp_path, monkeypatch):
    """The bounds are computed depth by depth, each depth's states in pieces on the cores: bit
    for bit the one pass in state order (the demo LMs' pieces are cut small to have many)."""
    import wfst.lm as lm

    small = open_lm(truncate_arpa(demo / "lm.arpa", tmp_path / "lm2.arpa", 2))
    big = open_lm(demo / "lm.arpa")
    words = ["<eps>", *small.words, "#0"]
    monkeypatch.setattr(lm, "usable_cores", lambda: 1)
    one = lm.Rescorer(big, small, words)
    monkeypatch.setattr(lm, "usable_cores", lambda: 3)
    monkeypatch.setattr(lm, "_GAIN_PIECE", 97)
    pieces = lm.Rescorer(big, small, words)
    assert big.num_states > 50 * 97 and len(set(big.depth.tolist())) == 3
    assert np.array_equal(one.gain, pieces.gain) and np.array_equal(one.buckets, pieces.buckets)


@pytest.fixture(scope="module")
def demo_bigram(demo, tmp_path_factory):
    """The demo's character graph on a bigram cut from its 3-gram, and 12 noisy test sentences."""
    from wfst import synthetic

    tmp = tmp_path_factory.mktemp("bigram")
    small = truncate_arpa(demo / "lm.arpa", tmp / "lm2.arpa", 2)
    r = compile_graph(tmp / "g", tokens=demo / "chars_tokens.txt", word_boundary="|", lm=small, topology="compact")
    g = wfst.load_graph(r.directory)
    texts = [t for t in (demo / "test.txt").read_text().splitlines() if t.strip()][:12]
    x, lengths = synthetic.from_texts(texts, g.tokens, word_boundary="|", seed=5, confusion=0.2, noise=2.0)
    return g, texts, x, lengths


def test_skipped_lookups_and_shared_arcs_change_nothing(demo, demo_bigram):
    """At a beam narrow enough to prune, the search that skips out-of-reach LM lookups (by
    the state's gain bound and by the bound of its word's bucket) and lets
    survivors of one state share the arcs of the cheapest finds exactly what a search with
    no gain bound finds (every lookup made), with word boosts in the weights too."""
    g, texts, x, lengths = demo_bigram
    config = dict(beam=9.0, max_active=400, num_threads=1, rescore_lm=demo / "lm.arpa")
    dec, unbounded = Decoder(g, **config), Decoder(g, **config)
    unbounded.rescorer.gain = np.full_like(unbounded.rescorer.gain, np.inf)
    unbounded.rescorer.buckets = np.full_like(unbounded.rescorer.buckets, BUCKET_NONE)
    boost = {texts[0].split()[0]: 3.0, texts[1].split()[-1]: 1.5}
    # penalties too: a penalised word arc weighs more than later arcs of its state, whose
    # weights the search's order assumes no lower than its own less the largest reward
    # (it cut them: one of these utterances ended 4.6 dearer)
    frequent = [w for w, _ in Counter(w for t in texts for w in t.split()).most_common(40)]
    penalties = {w: -8.0 for w in frequent} | {frequent[-1]: 2.0}
    for kw in [{}, dict(boost=boost), dict(boost=penalties)]:
        got, want = dec.decode(x, lengths, **kw), unbounded.decode(x, lengths, **kw)
        assert got == want
        lm, everything = dec.stats.lm, unbounded.stats.lm
        assert lm["lookups"] < everything["lookups"] and lm["word_arcs"] == everything["word_arcs"]
        assert lm["hits"] + lm["misses"] == lm["lookups"] + lm["closure_lookups"]
        assert lm["lookups"] <= lm["word_arcs"] and lm["closure_lookups"] <= lm["closure_word_arcs"]
        assert lm["frames"] == lengths.sum() and lm["lm_bytes"] == dec.rescorer.host_bytes > 0


def test_deferred_lm_steps_done_one_by_one_change_nothing(demo, demo_bigram, monkeypatch):
    """ExpandArcs and the closure on the CPU defer the LM steps of their word arcs (their
    memo slots are prefetched meanwhile) and do them when their buffer of them is full, or
    the frame's arcs are done, or the closure's work list ran out; the closure drops a step
    of a token expanded again since.  With room for one deferred step (every step done at
    the next word arc), they find the same results and lattices as with the usual room, with
    boosts too (it fails where the closure keeps the steps of an earlier expansion: a
    lattice gets a link twice)."""
    from wfst.kernels import cpu

    g, texts, x, lengths = demo_bigram
    config = dict(beam=9.0, max_active=400, num_threads=1, rescore_lm=demo / "lm.arpa", lattice_beam=4.0)
    boost = {texts[0].split()[0]: 3.0, texts[1].split()[-1]: 1.5}
    runs = [{}, dict(boost=boost)]
    dec = Decoder(g, **config)
    want = [dec.decode(x, lengths, nbest=5, **kw) for kw in runs]
    roomy = cpu.new_workspace

    def one_step_room(capacity):
        ws = roomy(capacity)
        steps = {f: getattr(ws.sg, f)[:1] for f in ws.sg._fields if f.startswith("step_")}
        return ws._replace(sg=ws.sg._replace(**steps))

    monkeypatch.setattr(cpu, "new_workspace", one_step_room)
    dec = Decoder(g, **config)  # its workspaces are made when it first decodes
    for kw, expected in zip(runs, want):
        got = dec.decode(x, lengths, nbest=5, **kw)
        assert got == expected
        for r, s in zip(got, expected):
            assert r.lattice.num_arcs == s.lattice.num_arcs
            assert [(h.words, h.cost) for h in r.nbest] == [(h.words, h.cost) for h in s.nbest]


def test_bucket_codes_round_gain_bounds_up():
    """A bucket's uint8 code stands for at least its bound, less than 1/8 nat above it in
    range, -16 below it and no bound above it (the search then never skips)."""
    x = np.concatenate([np.linspace(-20, 20, 4001), [np.inf, np.nan, -np.inf, 15.75, 15.76, -16.0]]).astype(np.float32)
    codes = np.array([bucket_code(v) for v in x])
    back = np.array([bucket_bound(q) for q in codes])
    finite = ~np.isnan(x)
    assert (back[finite] >= x[finite]).all() and np.isinf(back[np.isnan(x)]).all()
    inside = (x > -16) & (x <= 15.75)
    assert (back[inside] - x[inside] < 0.125).all()
    assert (back[x <= -16] == -16).all() and np.isinf(back[x > 15.75]).all()
    assert (np.diff(codes[:4001].astype(int)) >= 0).all()


def test_no_gain_bounds_where_the_lms_read_a_graph_word_differently(tiny, tmp_path):
    """A graph word the big LM lacks (read as its <unk>) but the graph's LM has: the bounds'
    word map would pair the wrong words, so there are none (no lookup is skipped), and the
    decode is still the exact composition."""
    base = TINY_ARPA.replace("\ta\t-0.30", "\ta").replace("-0.45\ta cab\n", "").replace("ngram 2=7", "ngram 2=6")
    (tmp_path / "base.arpa").write_text(base)
    small = truncate_arpa(tmp_path / "base.arpa", tmp_path / "small.arpa", 2)
    big = tmp_path / "big.arpa"
    big.write_text(base.replace("-1.6\tcab\n", "").replace("ngram 1=8", "ngram 1=7"))
    r = compile_graph(tmp_path / "g", tokens=tiny / "tokens.txt", lm=small, lexicon=tiny / "lexicon.txt",
                      word_boundary="|", topology="compact")
    g = wfst.load_graph(r.directory)
    with pytest.warns(UserWarning, match="'cab'"):
        dec = Decoder(g, rescore_lm=big, **WIDE)
    assert np.isinf(dec.rescorer.gain).all() and (dec.rescorer.buckets == BUCKET_NONE).all()
    composed = fst.compose(read_fst(r.directory / "TLG.fst").arcsort("olabel"), rescoring_fst(dec))
    x = random_log_probs(6, batch=4, frames=12, columns=5, sharpness=1.5)
    for b, got in enumerate(dec.decode(x)):
        words, cost = shortest_decode(composed, x[b])
        assert got.word_ids == tuple(words) and got.cost == pytest.approx(cost, abs=1e-4)


def test_a_graph_word_the_big_lm_lacks_leaves_the_graph_lm_in_its_own_state(tiny, tmp_path):
    """A graph word the big LM reads as its <unk> ('cab'), where both LMs give <unk> a
    history: after it the graph's LM is in its state after 'cab', not after its <unk> (that
    subtracted the next word's graph-LM cost in the wrong history: other words won)."""
    base = (TINY_ARPA.replace("-2.0\t<unk>\n", "-2.0\t<unk>\t-0.5\n").replace("ngram 2=7", "ngram 2=9")
            .replace("\\2-grams:\n", "\\2-grams:\n-0.2\t<unk> ab\n-2.5\t<unk> ba\n"))
    (tmp_path / "base.arpa").write_text(base)
    small = truncate_arpa(tmp_path / "base.arpa", tmp_path / "small.arpa", 2)
    big = tmp_path / "big.arpa"
    big.write_text(base.replace("-1.6\tcab\n", "").replace("-0.45\ta cab\n", "").replace("ngram 1=8", "ngram 1=7")
                   .replace("ngram 2=9", "ngram 2=8"))
    r = compile_graph(tmp_path / "g", tokens=tiny / "tokens.txt", lm=small, lexicon=tiny / "lexicon.txt",
                      word_boundary="|", topology="compact")
    g = wfst.load_graph(r.directory)
    with pytest.warns(UserWarning, match="scored as <unk>: 'cab'"):
        dec = Decoder(g, rescore_lm=big, graph_lm=small, **WIDE)
    ids = g.words.ids()
    scores = dec.rescorer.big.score, dec.rescorer.small.score  # (equal to kenlm's: the tests above)
    for n in (1, 2, 3):
        for words in itertools.product(["a", "ab", "ba", "abc", "cab"], repeat=n):
            expected = scores[0](words) - scores[1](words)
            assert dec.rescorer.path_cost([ids[w] for w in words]) == pytest.approx(expected, abs=1e-4), words
    x = random_log_probs(7, batch=8, frames=12, columns=5, sharpness=1.5)
    for got in dec.decode(x):
        assert got.rescore_cost == pytest.approx(scores[0](got.words) - scores[1](got.words), abs=1e-4)


def test_a_word_that_starts_with_a_hash_is_scored(tiny, tmp_path):
    """'#cab' is a word (only #0, #1, ... are disambiguation symbols): the big LM scores it,
    and where it lacks it and has no <unk>, that is refused as for any word (it was read as
    the big LM's word 0, silently)."""
    base = TINY_ARPA.lstrip().replace("cab", "#cab").replace("-2.0\t<unk>\n", "").replace("ngram 1=8", "ngram 1=7")
    (tmp_path / "lm.arpa").write_text(base)
    (tmp_path / "lexicon.txt").write_text("a a\nab a b\nba b a\nabc a b c\n#cab c a b\n")
    small = truncate_arpa(tmp_path / "lm.arpa", tmp_path / "small.arpa", 2)
    r = compile_graph(tmp_path / "g", tokens=tiny / "tokens.txt", lm=small, lexicon=tmp_path / "lexicon.txt",
                      word_boundary="|", topology="compact")
    g = wfst.load_graph(r.directory)
    dec = Decoder(g, rescore_lm=tmp_path / "lm.arpa", graph_lm=small)
    ids = g.words.ids()
    for words in (["#cab"], ["a", "#cab", "ba"], ["#cab", "a"]):
        expected = dec.rescorer.big.score(words) - dec.rescorer.small.score(words)
        assert dec.rescorer.path_cost([ids[w] for w in words]) == pytest.approx(expected, abs=1e-4)
    lacking = tmp_path / "lacking.arpa"
    lacking.write_text(base.replace("-1.6\t#cab\n", "").replace("-0.45\ta #cab\n", "")
                       .replace("ngram 1=7", "ngram 1=6").replace("ngram 2=7", "ngram 2=6"))
    with pytest.raises(VocabularyError, match="1 of the graph's 5 words are not in the big LM.*'#cab'"):
        Decoder(g, rescore_lm=lacking, graph_lm=small)


def test_an_arpa_whose_store_cannot_be_written_anywhere_is_read_into_memory(tmp_path, monkeypatch):
    """A read-only model folder and working folder: opening the ARPA parsed it whole, then
    failed naming only the relative fallback.  It now warns, naming both places and why, and
    decodes from the store parsed in memory; prepare_lm itself raises so."""
    from wfst import lm as wlm

    arpa = tmp_path / "lm.arpa"
    arpa.write_text(TINY_ARPA.lstrip())
    monkeypatch.chdir(tmp_path)

    def read_only(store, path):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(wlm, "save_lm", read_only)
    places = rf"{arpa}.lmstore: Read-only file system; nor {tmp_path}/.wfst-cache/lm-\w+.lmstore: Read-only"
    with pytest.warns(UserWarning, match=rf"cannot write LM store file {places}.*read from {arpa} into memory"):
        store = open_lm(arpa)
    assert store.score(["a", "cab"]) == read_arpa(arpa).score(["a", "cab"])
    with pytest.raises(OutputFileError, match=places):
        prepare_lm(arpa)


def test_a_store_whose_arpa_changed_since_is_warned_about(tmp_path):
    """A store file given as such keeps the numbers of the ARPA it was made from; a change of
    that file (its size, or another time than the store recorded: a copy that kept an older
    time too, as cp -p makes, which was silent) is said, not used silently.  prepare_lm, as
    the warning advises, keeps a store whose ARPA was only touched, and the warning goes."""
    import os

    arpa = tmp_path / "lm.arpa"
    arpa.write_text(TINY_ARPA.lstrip())
    store = prepare_lm(arpa)
    made = arpa.stat().st_mtime_ns
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        open_lm(store)  # (unchanged: nothing said)
    changed = r"which may have changed since \(modified since the store was made, its size the same\)"
    for when in (made - 10**10, made + 10**10):  # the same size, an older time (cp -p) or a newer one
        arpa.write_text(TINY_ARPA.lstrip().replace("-0.45\ta cab", "-0.55\ta cab"))
        os.utime(arpa, ns=(when, when))
        with pytest.warns(UserWarning, match=rf"{store.name} was made from .*lm.arpa, {changed}; the store keeps "
                                             r"the old file's scores"):
            open_lm(store)
    arpa.write_text(TINY_ARPA.lstrip())  # the content of the store, touched
    with pytest.warns(UserWarning, match=changed):
        open_lm(store)
    before = store.read_bytes()
    assert prepare_lm(arpa) == store and load_lm(store).source["mtime_ns"] == arpa.stat().st_mtime_ns
    assert store.read_bytes() != before  # (its record of the ARPA's time, anew: the same numbers)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        open_lm(store)
    arpa.write_text(TINY_ARPA.lstrip().replace("-0.45\ta cab", "-0.455\ta cab"))
    with pytest.warns(UserWarning, match=rf"\({arpa.stat().st_size} bytes, it had {arpa.stat().st_size - 1}\)"):
        open_lm(store)
    assert open_lm(arpa).source["bytes"] == arpa.stat().st_size  # (the ARPA given: its store made again)
    for _ in ("made again", "its ARPA gone"):  # (a store travels without its ARPA)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            open_lm(store)
        arpa.unlink(missing_ok=True)


def test_graph_words_one_big_lm_word_stands_for_are_refused_where_histories_differ(tmp_path):
    """A foreign graph's words 'cab' (only the graph's LM has it) and 'zzz' (neither has it)
    are both the big LM's <unk>, but 'cab' and <unk> in the graph's LM, where <unk> begins a
    history: no one map of big-LM histories follows both (refused); without that history
    both lead to the graph LM's root."""
    base = (TINY_ARPA.lstrip().replace("-2.0\t<unk>\n", "-2.0\t<unk>\t-0.5\n").replace("ngram 2=7", "ngram 2=8")
            .replace("\\2-grams:\n", "\\2-grams:\n-0.2\t<unk> ab\n"))
    (tmp_path / "small.arpa").write_text(base)
    (tmp_path / "big.arpa").write_text(base.replace("-1.6\tcab\n", "").replace("-0.45\ta cab\n", "")
                                       .replace("ngram 1=8", "ngram 1=7").replace("ngram 2=8", "ngram 2=7"))
    words = ("<eps>", "a", "ab", "ba", "abc", "cab", "zzz")
    big, small = read_arpa(tmp_path / "big.arpa"), read_arpa(tmp_path / "small.arpa")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the words scored as <unk>)
        with pytest.raises(VocabularyError, match=r"the big LM reads the graph words 'cab', 'zzz' as one word "
                                                  r"\('<unk>'\), the graph's LM as different words"):
            Rescorer(big, small, words)
        plain = base.replace("<unk>\t-0.5\n", "<unk>\n").replace("-0.2\t<unk> ab\n", "").replace("ngram 2=8",
                                                                                                 "ngram 2=7")
        (tmp_path / "small.arpa").write_text(plain)
        (tmp_path / "big.arpa").write_text(plain.replace("-1.6\tcab\n", "").replace("-0.45\ta cab\n", "")
                                           .replace("ngram 1=8", "ngram 1=7").replace("ngram 2=7", "ngram 2=6"))
        big, small = read_arpa(tmp_path / "big.arpa"), read_arpa(tmp_path / "small.arpa")
        r = Rescorer(big, small, words)
    for seq in (["cab", "ab"], ["zzz", "ab"], ["a", "cab", "ba"]):
        expected = big.score(seq) - small.score(seq)
        assert r.path_cost([words.index(w) for w in seq]) == pytest.approx(expected, abs=1e-4), seq
