"""WFST graph compilation and decoding for CTC speech recognition.

    g = wfst.load_graph("build/demo/char_compact")    # CSR arrays of TLG.fst
    dec = wfst.Decoder(g, beam=16.0, max_active=7000, device="cpu")   # or "cuda"
    results = dec.decode(log_probs, lengths)           # (B, T, V) float32 log-posteriors
    s = dec.stream(); dec.advance([s], [chunk]); dec.finish([s])   # live streams (wfst.stream)
    beam = wfst.CtcBeamDecoder(tokens="tokens.txt", lm="token_lm.arpa")  # lexicon-free, no graph

Graph compilation lives in :mod:`wfst.graphs`.  Importing this package compiles nothing:
Numba comes in with the first decode.
"""
from .beam_search import CtcBeamDecoder
from .config import DecoderConfig
from .decoder import Decoder
from .errors import (
    BoostError,
    DecodeInputError,
    DecoderMemoryError,
    GraphBuildError,
    GraphFormatError,
    InputFileError,
    LmStoreError,
    MissingFileError,
    OptionError,
    OutputFileError,
    SearchStateError,
    VocabularyError,
    WfstError,
)
from .graph import Graph, load_graph
from .results import DecodeResult, DecodeStats
from .stream import EndpointConfig, EndpointRule, Partial, Stream
from .symbols import TokenTable, WordTable

__version__ = "0.1.0"

__all__ = ["BoostError", "CtcBeamDecoder", "DecodeInputError", "DecodeResult", "DecodeStats", "Decoder",
           "DecoderConfig", "DecoderMemoryError", "EndpointConfig", "EndpointRule", "Graph", "GraphBuildError",
           "GraphFormatError", "InputFileError", "LmStoreError", "MissingFileError", "OptionError", "OutputFileError",
           "Partial", "SearchStateError", "Stream", "TokenTable", "VocabularyError", "WfstError", "WordTable",
           "load_graph", "__version__"]
