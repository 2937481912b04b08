"""The LM store's build (kernels.lmbuild behind wfst.lm.read_arpa and the Rescorer's state
map) against plain Python references on random ARPA files: every array bit for bit, the
n-gram lines kernels.lmbuild reads the same numbers as Python's float(), and what it hands
back to Python (unusual numbers, unknown words, orphans) read as Python reads it."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from wfst.kernels import lmbuild
from wfst.kernels.common import automaton_step

from wfst.arpa import ArpaReader
from wfst.lm import _small_states, read_arpa, truncate_arpa

LN10 = math.log(10.0)
ARRAYS = ("offsets", "labels", "weights", "nexts", "backoff", "bo_weight", "depth")


def reference_store(path):
    """(words, arrays) of an ARPA file, as the store defines them, with tuples in dicts:
    states the root and then each history some n-gram continues or that has a backoff weight
    (below the top order), by length, then by word-id tuple; an arc per n-gram to the longest
    suffix (up to order - 1 words) that is a state."""
    words, grams, section = [], {}, None
    for line in open(path, encoding="utf-8-sig"):
        line = line.strip()
        if line.startswith("\\") and line.endswith("-grams:"):
            section = int(line[1:-7])
            grams[section] = {}
        elif line == "\\end\\":
            section = None
        elif section and line:
            f = line.split()
            gram = f[1:section + 1]
            if section == 1:
                words.append(gram[0])
            ids = {w: i for i, w in enumerate(words)}
            if any(w not in ids for w in gram):
                continue
            key = tuple(ids[w] for w in gram)
            if section > 2 and key[:-1] not in grams[section - 1]:
                continue
            grams[section][key] = (float(f[0]), float(f[section + 1]) if len(f) > section + 1 else 0.0)
    order = max(grams)
    histories = [()] + [h for k in range(1, order) for h in sorted({g[:-1] for g in grams[k + 1]}
                                                                   | {g for g, (_, bo) in grams[k].items() if bo != 0})]
    state = {h: i for i, h in enumerate(histories)}

    def longest(h):
        while h not in state:
            h = h[1:]
        return state[h]

    arcs = sorted((state[g[:-1]], g[-1], np.float32(-p * LN10), longest(g[-(order - 1):] if order > 1 else ()))
                  for k in grams for g, (p, _) in grams[k].items())
    offsets = np.searchsorted([a[0] for a in arcs], np.arange(len(histories) + 1)).astype(np.int64)
    bo = [np.float32(-grams[len(h)][h][1] * LN10) if h else np.float32(0.0) for h in histories]
    return words, {"offsets": offsets, "labels": np.array([a[1] for a in arcs], np.int32),
                   "weights": np.array([a[2] for a in arcs], np.float32),
                   "nexts": np.array([a[3] for a in arcs], np.int32),
                   "backoff": np.array([longest(h[1:]) if h else -1 for h in histories], np.int32),
                   "bo_weight": np.array(bo, np.float32), "depth": np.array([len(h) for h in histories], np.int32)}


NUMBERS = ["-1.5", "-0.301029995663981", "-2", "-99", "-1e-3", "-2.5E+1", "-0.0", "0", "-.5", "-7.",
           "-1.234567890123456789", "-3.0000000000000000000001", "-1e-30", "-inf",
           "-12345.678e-4"]  # (not -1_0.5, which only Python's float() reads: refused)


def random_arpa(path, rng, order=4, vocab=40, lines=600, faults=True, grouped=False):
    """An ARPA file of random n-grams (prefix-closed where the draw allows), with numbers in
    every form above and, with `faults`, n-grams of an unknown word and n-grams whose
    history is missing (orphans), spaces and tabs mixed, blank lines and CRLF endings;
    `grouped`: each section's lines in order of their words, as ARPA writers group them."""
    words = ["<s>", "</s>", "<unk>"] + [f"w{i}" for i in range(vocab)] + ["ü", "a\\b"]
    grams = [[(w,) for w in words]]
    for k in range(2, order + 1):
        prefixes = grams[-1]
        new = {prefixes[rng.integers(len(prefixes))] + (words[rng.integers(len(words))],) for _ in range(lines)}
        if faults:
            new |= {(("w0",) * (k - 2) + ("nope", "w1"))[-k:]}  # an unknown word
            if k > 2:
                new |= {("ü",) * k}  # an orphan: its history is no (k - 1)-gram (most likely)
        grams.append(sorted(new))
    out = ["\\data\\"] + [f"ngram {k}={len(g)}" for k, g in enumerate(grams, start=1)]
    for k, gs in enumerate(grams, start=1):
        out += ["", f"\\{k}-grams:"]
        for i in range(len(gs)) if grouped else rng.permutation(len(gs)):
            p = NUMBERS[rng.integers(len(NUMBERS))] if rng.random() < 0.3 else f"{-rng.uniform(0, 6):.6f}"
            if p == "-inf" and k == 1:
                p = "-99"
            sep = "\t" if rng.random() < 0.5 else " "
            line = f"{p}{sep}{' '.join(gs[i])}"
            if k < order and rng.random() < 0.8:
                line += f"{sep}{-rng.uniform(0, 2):.{rng.integers(1, 9)}f}"
            indent = (" \t" if rng.random() < 0.05 else "") if faults else ""
            out.append(indent + line + ("  " if rng.random() < 0.1 else ""))
            if faults and rng.random() < 0.02:
                out.append(" \t" if rng.random() < 0.5 else "")
    if faults:
        out[out.index("\\2-grams:")] = "  \\2-grams:"  # (stripped as any line)
    out += ["", "\\end\\", ""]
    text = "\n".join(out)
    path.write_bytes(text.replace("\n", "\r\n" if faults else "\n").encode())
    return path


@pytest.mark.parametrize("seed", range(6))
def test_store_equals_the_reference_on_random_arpa_files(tmp_path, seed, monkeypatch):
    """(Seeds 3-5 read the file 50 characters at a time: blocks end in mid-section.)"""
    if seed >= 3:
        monkeypatch.setattr(ArpaReader, "block_chars", 50)
    rng = np.random.default_rng(seed)
    arpa = random_arpa(tmp_path / "lm.arpa", rng, order=2 + seed % 3, faults=seed % 2 == 0, grouped=seed % 3 == 0)
    words, expected = reference_store(arpa)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the skipped n-grams (test_grammar checks the warnings)
        store = read_arpa(arpa)
    assert store.words == tuple(words)
    for name in ARRAYS:
        got = getattr(store, name)
        assert got.dtype == expected[name].dtype and got.tobytes() == expected[name].tobytes(), name
    # final costs: reading </s> as the search reads a word
    a, eos = store.automaton(), words.index("</s>")
    finals = [automaton_step(a, 0, s, eos)[0] for s in range(store.num_states)]
    assert np.array(finals, np.float32).tobytes() == store.final.tobytes()


def test_numbers_read_as_python_reads_them():
    """_number reads what it takes exactly as float() does, and hands back the rest; the
    forms ARPA writers use (up to 15 significant digits, exponents) are all taken."""
    rng = np.random.default_rng(0)
    texts = list(NUMBERS) + ["+1", "1e", "--1", "1.2.3", "", ".", "e5", "1e99999", "nan", "1e22", "1e23",
                             "9" * 15, "9" * 16, "0.000000000000000000000000001", "4.9406564584124654e-324"]
    for _ in range(20000):
        digits = "".join(rng.choice(list("0123456789"), rng.integers(1, 18)))
        point = rng.integers(0, len(digits) + 1)
        text = ("-" if rng.random() < 0.8 else "") + digits[:point] + "." + digits[point:]
        if rng.random() < 0.3:
            text += f"e{rng.integers(-30, 30)}"
        texts.append(text)
    taken = 0
    for text in texts:
        value, ok = lmbuild._number(np.frombuffer(text.encode(), np.uint8), 0, len(text), lmbuild._POW10)
        if ok:
            assert np.float64(value).tobytes() == np.float64(float(text)).tobytes(), text
            taken += 1
        elif text in ("-1.5", "-0.301029995663981", "-2", "-99", "-1e-3", "-2.5E+1", "-12345.678e-4", "1e22"):
            pytest.fail(f"{text!r} not taken")
    assert taken > 10000


def test_small_states_equal_the_reference(demo, tmp_path):
    """Each big-LM state's small-LM state: the longest suffix of its history that is a
    small-LM history, against tuples of words walked down in Python."""
    big = read_arpa(demo / "lm.arpa")
    dropped = big.words[10]  # a small LM without one of the big LM's words (its states go to the root)
    lines = truncate_arpa(demo / "lm.arpa", tmp_path / "lm2.arpa", 2).read_text().splitlines()
    lines = [x for x in lines if dropped not in x.split()[1:] or x.startswith("ngram")]
    counts = {k: sum(1 for _ in section) for k, section in _sections(lines)}
    (tmp_path / "lacking.arpa").write_text("\n".join(f"ngram {x[6]}={counts[int(x[6])]}" if x.startswith("ngram")
                                                     else x for x in lines) + "\n")
    for name in ("lm2.arpa", "lacking.arpa", "lm1.arpa"):
        if name == "lm1.arpa":
            truncate_arpa(demo / "lm.arpa", tmp_path / name, 1)
        small = read_arpa(tmp_path / name)
        assert (dropped in small.words) == (name != "lacking.arpa")

        def histories(store):
            h = {0: ()}
            for s in np.argsort(store.depth, kind="stable"):
                for a in range(store.offsets[s], store.offsets[s + 1]):
                    t = store.nexts[a]
                    if store.depth[t] == store.depth[s] + 1:
                        h[t] = h[s] + (store.words[store.labels[a]],)
            return [h[s] for s in range(store.num_states)]

        small_state = {h: i for i, h in enumerate(histories(small))}
        expected = []
        for h in histories(big):
            while h not in small_state:
                h = h[1:]
            expected.append(small_state[h])
        assert _small_states(big, small, small.ids_of(big.words)).tolist() == expected


def _sections(lines):
    """(order, its n-gram lines) of an ARPA file's lines."""
    k, rows = None, []
    for x in lines + ["\\end\\"]:
        if x.startswith("\\"):
            if k:
                yield k, rows
            k, rows = (int(x[1:-7]) if x.endswith("-grams:") else None), []
        elif k and x.strip():
            rows.append(x)


def test_empty_sections_and_a_header_that_overstates(tmp_path):
    """An order with no n-grams gives a store of that order; a count far beyond what the
    file holds allocates nothing of that size and is refused as the reader refuses it."""
    from wfst.errors import InputFileError

    text = ("\\data\\\nngram 1=3\nngram 2=1\nngram 3=0\n\n\\1-grams:\n-1\t<s>\t-0.5\n-0.5\t</s>\n-0.5\ta\t-0.2\n\n"
            "\\2-grams:\n-0.3\t<s> a\n\n\\3-grams:\n\n\\end\\\n")
    (tmp_path / "lm.arpa").write_text(text)
    words, expected = reference_store(tmp_path / "lm.arpa")
    store = read_arpa(tmp_path / "lm.arpa")
    assert store.order == 3 and store.counts == (3, 1, 0)
    for name in ARRAYS:
        assert getattr(store, name).tobytes() == expected[name].tobytes(), name
    (tmp_path / "big.arpa").write_text(text.replace("ngram 2=1", "ngram 2=300000000000"))
    with pytest.raises(InputFileError, match=r"big.arpa:3: the header says 300000000000 2-grams, the \\2-grams: "
                                             r"section has 1"):
        read_arpa(tmp_path / "big.arpa")
