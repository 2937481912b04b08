"""Graph compilation: CTC topologies T, lexicon L, grammar G and TLG = T ∘ min(det(L ∘ G)).

    from wfst.graphs import compile_graph
    compile_graph("out/char_compact", tokens="tokens.txt", lm="lm.arpa",
                  word_boundary="|", topology="compact")
"""
from .compile import BuildResult, GraphBuildError, compile_graph
from .topology import TOPOLOGIES, ctc_topology, topology_size

__all__ = ["TOPOLOGIES", "BuildResult", "GraphBuildError", "compile_graph", "ctc_topology", "topology_size"]
