"""The demo graphs (character and BPE token sets × three topologies) on held-out text."""
import math

import pytest
import pywrapfst as fst
import sentencepiece as spm
from fst_paths import best_path, ctc_alignment, linear_fsa
from wfst.graphs import TOPOLOGIES, compile_graph

from wfst import load_graph
from wfst.graph import read_fst

kenlm = pytest.importorskip("kenlm", reason="kenlm is a test dependency: pip install -e '.[test]'")


@pytest.fixture(scope="module")
def graphs(demo, tmp_path_factory):
    out = tmp_path_factory.mktemp("demo_graphs")
    token_sets = {"char": dict(tokens=demo / "chars_tokens.txt", word_boundary="|"),
                  "bpe": dict(tokens=demo / "bpe_tokens.txt", spm=demo / "bpe.model")}
    return {(name, topo): compile_graph(out / f"{name}_{topo}", lm=demo / "lm.arpa", topology=topo,
                                        cache_dir=out / "cache", progress=False, **kw).directory
            for name, kw in token_sets.items() for topo in TOPOLOGIES}


@pytest.fixture(scope="module")
def speller(demo):
    sp = spm.SentencePieceProcessor(model_file=str(demo / "bpe.model"))

    def spell(name, sentence, graph):
        column = {s: c for c, s in enumerate(graph.tokens.symbols)}
        if name == "char":
            return [column[ch] for ch in "|".join(sentence)]
        return [column[p] for w in sentence for p in sp.encode(w, out_type=str)]

    return spell


def held_out(demo, graph, limit):
    ids = graph.words.ids()
    lines = [ln.split() for ln in (demo / "test.txt").read_text().splitlines() if ln.strip()]
    return [s for s in lines if all(w in ids for w in s)][:limit]


@pytest.mark.parametrize("name", ["char", "bpe"])
@pytest.mark.parametrize("topo", TOPOLOGIES)
def test_tlg_outputs_the_sentence(demo, graphs, speller, name, topo):
    d = graphs[name, topo]
    g = load_graph(d)
    tlg = read_fst(d / "TLG.fst")
    sentences = held_out(demo, g, 15)
    assert len(sentences) >= 10
    for s in sentences:
        words, _ = best_path(tlg, ctc_alignment(speller(name, s, g), g.tokens.blank, topo))
        assert words is not None and [g.words[w] for w in words] == s
    # A non-word is rejected: no word of the demo LM is spelled 'qzqzq'.
    column = {s: c for c, s in enumerate(g.tokens.symbols)}
    if name == "char":
        junk = [column[c] for c in "qzqzq"]
        assert best_path(tlg, ctc_alignment(junk, g.tokens.blank, topo))[0] is None


def sentence_cost(tlg, frames, word_ids):
    """Cheapest TLG path that reads `frames` and outputs exactly `word_ids`."""
    A = linear_fsa([c + 1 for c in frames])
    W = linear_fsa(word_ids)
    W.arcsort("ilabel")
    d = fst.shortestdistance(fst.compose(fst.compose(A, tlg), W), reverse=True)
    return float(d[0]) if d else math.inf


@pytest.mark.parametrize("name,topo", [("char", "compact"), ("bpe", "normal")])
def test_tlg_cost_is_never_above_kenlm(demo, graphs, speller, name, topo, record_property):
    """Epsilon backoff may make a sentence cheaper than its LM score, never costlier."""
    d = graphs[name, topo]
    g = load_graph(d)
    tlg = read_fst(d / "TLG.fst")
    model = kenlm.Model(str(demo / "lm.arpa"))
    ids = g.words.ids()
    sentences = held_out(demo, g, 200)
    assert len(sentences) >= 100
    diffs = []
    for s in sentences:
        ours = sentence_cost(tlg, ctc_alignment(speller(name, s, g), g.tokens.blank, topo), [ids[w] for w in s])
        ref = -model.score(" ".join(s), bos=True, eos=True) * math.log(10)
        assert ours <= ref + 1e-3, (s, ours, ref)
        diffs.append(ref - ours)
    cheaper = [x for x in diffs if x > 1e-3]
    summary = (f"{name}_{topo}: {len(cheaper)}/{len(diffs)} sentences cheaper through TLG than kenlm, "
               f"by up to {max(diffs):.3f} nats (mean over those {sum(cheaper) / max(len(cheaper), 1):.3f})")
    record_property("epsilon_backoff", summary)
    print("\n" + summary)
