"""Tiny fixtures made by code, and the bundled demo data."""
import os
from pathlib import Path

# CI has no GPU: there the CUDA kernels run in Numba's simulator (set before numba is
# imported).  On a machine with an NVIDIA GPU they run for real, unless told otherwise.
if "NUMBA_ENABLE_CUDASIM" not in os.environ and not os.path.exists("/dev/nvidia0"):
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

import pytest

DEMO = Path(__file__).resolve().parent.parent / "recipes" / "demo" / "data"

# A small but real 3-gram: backoffs, a missing bigram, a trigram, <unk>.
TINY_ARPA = """
\\data\\
ngram 1=8
ngram 2=7
ngram 3=2

\\1-grams:
-1.2\t<s>\t-0.40
-0.9\t</s>
-2.0\t<unk>
-0.8\ta\t-0.30
-0.7\tab\t-0.25
-1.1\tba\t-0.20
-1.3\tabc\t-0.10
-1.6\tcab

\\2-grams:
-0.3\t<s> ab\t-0.15
-0.5\t<s> a
-0.4\tab ba\t-0.05
-0.6\tba abc
-0.2\tabc </s>
-0.45\ta cab
-0.35\tba </s>

\\3-grams:
-0.1\t<s> ab ba
-0.05\tab ba abc

\\end\\
"""
# the same with a trigram that makes "ab ba" a dear end of a sentence, which a bigram cut from
# it cannot see: rescoring's histories at one graph state then differ (context beam tests)
TINY_ARPA_DEAR_END = TINY_ARPA.replace("ngram 3=2", "ngram 3=3").replace("-0.05\tab ba abc\n",
                                                                       "-0.05\tab ba abc\n-3.0\tab ba </s>\n")


@pytest.fixture
def tiny(tmp_path):
    """tokens (blank first, '|' word boundary), an ARPA, a lexicon with a homophone and prefixes."""
    (tmp_path / "tokens.txt").write_text("<blk> 0\n| 1\na 2\nb 3\nc 4\n")
    (tmp_path / "lm.arpa").write_text(TINY_ARPA.lstrip())
    (tmp_path / "lexicon.txt").write_text("a a\nab a b\nba b a\nabc a b c\ncab c a b\ncab c a b c\n")
    return tmp_path


@pytest.fixture(scope="session")
def demo():
    if not (DEMO / "lm.arpa").is_file():
        raise FileNotFoundError(f"the bundled demo data is missing from {DEMO}")
    return DEMO

@pytest.fixture(scope="session")
def demo_graphs(demo, tmp_path_factory):
    """The six demo graphs (built once per test session into a temp dir; LG is shared)."""
    from wfst.graphs import TOPOLOGIES, compile_graph

    out = tmp_path_factory.getbasetemp() / "demo_graphs"
    sets = {"char": dict(tokens=demo / "chars_tokens.txt", word_boundary="|"),
            "bpe": dict(tokens=demo / "bpe_tokens.txt", spm=demo / "bpe.model")}
    graphs = {}
    for name, kw in sets.items():
        for topo in TOPOLOGIES:
            r = compile_graph(out / f"{name}_{topo}", lm=demo / "lm.arpa", topology=topo,
                              cache_dir=out / ".cache", **kw)
            graphs[f"{name}_{topo}"] = (r.directory, kw)
    return graphs


# CI machines are small and shared: time limits per example only make tests flaky.
from hypothesis import settings as _settings  # noqa: E402

_settings.register_profile("ci", deadline=None)
_settings.load_profile("ci")
