"""WFST graph compilation and decoding for CTC speech recognition.

    g = wfst.load_graph("build/demo/char_compact")    # CSR arrays of TLG.fst
    dec = wfst.Decoder(g, beam=16.0, max_active=7000, device="cpu")   # or "cuda"
    results = dec.decode(log_probs, lengths)           # (B, T, V) float32 log-posteriors

Graph compilation lives in :mod:`wfst.graphs`.
"""
from .decoder import DecodeInputError, Decoder, DecoderConfig, DecodeResult, DecoderMemoryError
from .errors import GraphFormatError, InputFileError, MissingFileError, WfstError
from .graph import Graph, load_graph
from .symbols import TokenTable, WordTable

__version__ = "0.1.0"

__all__ = ["DecodeInputError", "DecodeResult", "Decoder", "DecoderConfig", "DecoderMemoryError", "Graph",
           "GraphFormatError", "InputFileError", "MissingFileError", "TokenTable", "WfstError", "WordTable",
           "load_graph", "__version__"]
