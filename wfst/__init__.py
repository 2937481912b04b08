"""WFST graph compilation and decoding for CTC speech recognition.

    g = wfst.load_graph("graphs/demo_char_compact")   # CSR arrays of TLG.fst

Graph compilation lives in :mod:`wfst.graphs`.
"""
from .errors import GraphFormatError, InputFileError, MissingFileError, WfstError
from .graph import Graph, load_graph
from .symbols import TokenTable, WordTable

__version__ = "0.1.0"

__all__ = ["Graph", "GraphFormatError", "InputFileError", "MissingFileError", "TokenTable",
           "WfstError", "WordTable", "load_graph", "__version__"]
