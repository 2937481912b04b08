"""CTC topologies: sizes as documented, and what each T outputs for every alignment."""
import collections
import itertools
import math

import pytest
import pywrapfst as fst
from fst_paths import linear_fsa
from hypothesis import given, settings
from hypothesis import strategies as st
from wfst.graphs import TOPOLOGIES, ctc_topology, topology_size

from wfst import TokenTable
from wfst.errors import OptionError

# ---- pure references -----------------------------------------------------------------


def ctc_collapse(seq, blank):
    """The CTC rule: merge repeats, then drop blanks."""
    out, prev = [], None
    for c in seq:
        if c != prev and c != blank:
            out.append(c)
        prev = c
    return tuple(out)


def compact_outputs(seq, blank):
    """Compact T's documented relaxation, as a multiset: a run of r equal non-blank frames
    outputs j copies (1 <= j <= r) along C(r-1, j-1) paths."""
    runs = [(c, len(list(g))) for c, g in itertools.groupby(seq)]
    choices = [[((c,) * j, math.comb(r - 1, j - 1)) for j in range(1, r + 1)] if c != blank else [((), 1)]
               for c, r in runs]
    out = collections.Counter()
    for combo in itertools.product(*choices):
        out[tuple(x for part, _ in combo for x in part)] += math.prod(n for _, n in combo)
    return out


def minimal_output(seq, blank):
    return tuple(c for c in seq if c != blank)


# ---- helpers -----------------------------------------------------------------------


def tokens_table(n, blank_first=True, num_disambig=0):
    syms = [f"t{i}" for i in range(n - 1)]
    syms = ["<blk>", *syms] if blank_first else [*syms, "<blk>"]
    return TokenTable(tuple(syms), 0 if blank_first else n - 1, num_disambig)


def all_outputs(f):
    """Output label sequences of every complete path of an acyclic FST (with multiplicity)."""
    zero = fst.Weight.zero(f.weight_type())
    paths = []

    def walk(s, out):
        if f.final(s) != zero:
            paths.append(tuple(out))
        for a in f.arcs(s):
            walk(a.nextstate, out + ([a.olabel] if a.olabel else []))

    if f.start() >= 0:
        walk(f.start(), [])
    return paths


def outputs_for(T, columns, tok):
    """T's outputs for an alignment given as logit columns, mapped back to columns."""
    A = linear_fsa([c + 1 for c in columns])  # FST input label = column + 1
    paths = all_outputs(fst.compose(A, T))
    return [tuple(lab - 1 for lab in p) for p in paths]


# ---- sizes ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", TOPOLOGIES)
@pytest.mark.parametrize("n,d", [(2, 0), (3, 1), (5, 4), (19, 3), (30, 0)])
@pytest.mark.parametrize("blank_first", [True, False])
def test_sizes_match_documented_formula(kind, n, d, blank_first):
    T = ctc_topology(kind, tokens_table(n, blank_first, d))
    arcs = sum(T.num_arcs(s) for s in T.states())
    assert (T.num_states(), arcs) == topology_size(kind, n, d)


def test_formulas_explicitly():
    assert topology_size("normal", 29, 3) == (29, 29 * 29 + 29 * 3)
    assert topology_size("compact", 29, 3) == (29, 3 * 28 + 1 + 3)
    assert topology_size("minimal", 29, 3) == (1, 29 + 3)


def test_unknown_topology_is_refused():
    with pytest.raises(OptionError, match="unknown topology 'fancy'.*normal, compact, minimal"):
        ctc_topology("fancy", tokens_table(3))
    with pytest.raises(ValueError, match="unknown topology"):  # OptionError is a ValueError
        topology_size("fancy", 3, 0)


def test_topology_needs_a_blank():
    with pytest.raises(OptionError, match=r"the token table \(2 symbols\) has no blank; name it one of <blk>"):
        ctc_topology("normal", TokenTable(("a", "b"), None))


# ---- what each T outputs, every alignment of small V ---------------------------------


@pytest.mark.parametrize("blank_first", [True, False])
@pytest.mark.parametrize("n,frames", [(3, 5), (4, 4)])
def test_every_alignment(blank_first, n, frames):
    tok = tokens_table(n, blank_first, num_disambig=2)
    T = {k: ctc_topology(k, tok) for k in TOPOLOGIES}
    for length in range(frames + 1):
        for seq in itertools.product(range(n), repeat=length):
            normal = outputs_for(T["normal"], seq, tok)
            assert normal == [ctc_collapse(seq, tok.blank)], seq  # exactly one path, the CTC output
            compact = outputs_for(T["compact"], seq, tok)
            assert collections.Counter(compact) == compact_outputs(seq, tok.blank), seq
            minimal = outputs_for(T["minimal"], seq, tok)
            assert minimal == [minimal_output(seq, tok.blank)], seq


def test_relaxations_are_real():
    """Compact and minimal really differ from CTC where documented."""
    tok = tokens_table(3)  # blank 0, tokens 1, 2
    a = 1
    T = {k: ctc_topology(k, tok) for k in TOPOLOGIES}
    assert outputs_for(T["normal"], [a, a], tok) == [(a,)]
    assert sorted(outputs_for(T["compact"], [a, a], tok)) == [(a,), (a, a)]
    assert sorted(outputs_for(T["compact"], [a, a, a], tok)) == [(a,), (a, a), (a, a), (a, a, a)]
    assert outputs_for(T["minimal"], [a, a], tok) == [(a, a)]
    # With a blank between repeats, all three output the token twice.
    for k in TOPOLOGIES:
        assert outputs_for(T[k], [a, 0, a], tok) == [(a, a)]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 7), blank_first=st.booleans(), data=st.data())
def test_normal_is_ctc_on_random_alignments(n, blank_first, data):
    seq = data.draw(st.lists(st.integers(0, n - 1), max_size=14))
    tok = tokens_table(n, blank_first)
    assert outputs_for(ctc_topology("normal", tok), seq, tok) == [ctc_collapse(seq, tok.blank)]


@pytest.mark.parametrize("kind", TOPOLOGIES)
def test_disambiguation_symbols_pass_through_and_labels_are_columns_plus_one(kind):
    tok = tokens_table(4, blank_first=False, num_disambig=3)
    T = ctc_topology(kind, tok)
    labels = {(a.ilabel, a.olabel) for s in T.states() for a in T.arcs(s)}
    for k in range(3):
        assert (tok.disambig_ilabel(k), tok.disambig_ilabel(k)) in labels
    assert tok.disambig_ilabel(0) == 5  # V + 1
    assert (4, 0) in labels  # blank in the last column (3) has input label 4, outputs nothing
    ilabels = {i for i, _ in labels}
    assert ilabels <= {0, 1, 2, 3, 4, 5, 6, 7}
