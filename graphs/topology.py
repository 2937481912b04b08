"""CTC topologies T: FSTs from frame-level token sequences to token sequences.

Following Laptev, Majumdar & Ginsburg, "CTC variations through new WFST topologies"
(Interspeech 2022) and the riva CUDA WFST decoder paper.  Labels follow
:mod:`wfst.symbols`: a token's input label is its logit column + 1 and T's output
label is the same id, so L reads T's output directly.  With N logit columns (blank
included) and D disambiguation symbols (#0..#D-1, labels N+1..N+D), each topology
carries D self-loops ``#k:#k`` so that the disambiguation symbols of L and G pass
through T ∘ LG; they become epsilons afterwards.

normal   The correct CTC rules: blanks vanish, a repeated token is one output unless
         a blank separates the repeats.  One state per column (the blank's state is
         the start); from every state an arc to every column's state, outputting the
         token unless it is the blank or the state's own token (a repeat).  All
         states final.  States N, arcs N^2 + N*D.
compact  The blank self-loop at the start state 0; per token k an arc 0 -> k (k:k),
         a self-loop on k (k:eps) and an epsilon arc k -> 0.  Repeats are not forced
         to collapse: a run of r frames of token k (no blank inside) may output k
         1..r times, j times along C(r-1, j-1) paths (the ways to cut the run).
         Only state 0 is final, so ending in a token state adds no extra path;
         disambiguation loops only on state 0 (every state reaches it by epsilon).
         States N, arcs 3(N-1) + 1 + D.
minimal  One state: a blank self-loop (blank:eps) and a self-loop per token (k:k).
         No repeat collapsing at all: every non-blank frame outputs its token.
         States 1, arcs N + D.
"""
from __future__ import annotations

import pywrapfst as fst

from wfst.errors import OptionError
from wfst.symbols import BLANK_NAMES, TokenTable, ilabel_of_column

TOPOLOGIES = ("normal", "compact", "minimal")


def check_topology(kind: str) -> str:
    if kind not in TOPOLOGIES:
        raise OptionError(f"unknown topology {kind!r}; choose one of {', '.join(TOPOLOGIES)}")
    return kind


def topology_size(kind: str, num_columns: int, num_disambig: int) -> tuple[int, int]:
    """(states, arcs) of T for N = `num_columns` (blank included) and D disambiguation symbols."""
    n, d = num_columns, num_disambig
    return {
        "normal": (n, n * n + n * d),
        "compact": (n, 3 * (n - 1) + 1 + d),
        "minimal": (1, n + d),
    }[check_topology(kind)]


def ctc_topology(kind: str, tokens: TokenTable) -> fst.VectorFst:
    """Build T of `kind` for `tokens` (its blank must be known), with its #k loops."""
    check_topology(kind)
    if tokens.blank is None:
        raise OptionError(f"the token table ({tokens.num_columns} symbols) has no blank; name it one of "
                          f"{', '.join(BLANK_NAMES)} or read it with TokenTable.read(path, blank=SYMBOL)")
    t = fst.VectorFst()
    one = fst.Weight.one(t.weight_type())
    columns = range(tokens.num_columns)
    blank = tokens.blank
    label = [ilabel_of_column(c) for c in columns]
    disambig = [tokens.disambig_ilabel(k) for k in range(tokens.num_disambig)]

    def arc(src, ilab, olab, dst):
        t.add_arc(src, fst.Arc(ilab, olab, one, dst))

    if kind == "minimal":
        s = t.add_state()
        t.set_start(s)
        t.set_final(s)
        for c in columns:
            arc(s, label[c], 0 if c == blank else label[c], s)
        for d in disambig:
            arc(s, d, d, s)
        return t

    # normal and compact: one state per column; the blank's state is the start.
    state = {c: t.add_state() for c in columns}
    t.set_start(state[blank])
    for c in columns if kind == "normal" else [blank]:
        t.set_final(state[c])
    if kind == "normal":
        for src in columns:
            for c in columns:
                out = 0 if c in (blank, src) else label[c]
                arc(state[src], label[c], out, state[c])
            for d in disambig:
                arc(state[src], d, d, state[src])
    else:  # compact
        home = state[blank]
        arc(home, label[blank], 0, home)
        for c in columns:
            if c == blank:
                continue
            arc(home, label[c], label[c], state[c])
            arc(state[c], label[c], 0, state[c])
            arc(state[c], 0, 0, home)
        for d in disambig:
            arc(home, d, d, home)
    return t
