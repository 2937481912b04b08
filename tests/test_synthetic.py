"""The synthetic CTC emission generator: tokenization, shapes, determinism, greedy decoding, files."""
import os
import re
import warnings

import numpy as np
import pytest

from wfst import InputFileError, MissingFileError, TokenTable, WfstError
from wfst.errors import OptionError
from wfst.synthetic import (
    Emissions,
    emissions,
    from_texts,
    from_texts_seeds,
    greedy_ctc,
    load_npz,
    save_npz,
    tokenize,
)

CHARS = TokenTable(("<blk>", "|", "'", *"abcdefghijklmnopqrstuvwxyz"), 0)
WORDS = ["hello", "book", "moon", "see", "all", "the", "aaa", "it's", "a", "bb"]


def _lse(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))[..., 0]


def _edits(a, b):
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def _seqs(n, seed=0):
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(1, 6))) for _ in range(n)]
    return texts, [tokenize(t, CHARS, word_boundary="|") for t in texts]


@pytest.fixture(scope="module")
def bpe(demo):
    return TokenTable.read(demo / "bpe_tokens.txt"), demo / "bpe.model"


# --------------------------------------------------------------------------- tokenize

def test_tokenize_chars_with_boundary_between_words_only():
    col = {s: c for c, s in enumerate(CHARS.symbols)}
    assert tokenize("ab c", CHARS, word_boundary="|") == [col["a"], col["b"], 1, col["c"]]
    assert tokenize("  ab   c ", CHARS, word_boundary="|") == [col["a"], col["b"], 1, col["c"]]
    assert tokenize("ab c", CHARS) == [col["a"], col["b"], col["c"]]
    assert tokenize("it's", CHARS, word_boundary="|") == [col[c] for c in "it's"]
    assert tokenize("", CHARS, word_boundary="|") == []
    assert tokenize("   ", CHARS) == []


def test_tokenize_demo_chars_table(demo):
    tokens = TokenTable.read(demo / "chars_tokens.txt")
    assert tokens.blank == 0
    seq = tokenize("the girls", tokens, word_boundary="|")
    assert "".join(tokens.symbols[c] for c in seq) == "the|girls"


def test_tokenize_errors_name_the_offender():
    with pytest.raises(OptionError, match=r"symbol 'X' of text 'a X' is not in the token table"):
        tokenize("a X", CHARS, word_boundary="|")
    with pytest.raises(OptionError, match=r"word 'a\|b' of text 'a\|b' contains the word-boundary unit"):
        tokenize("a|b", CHARS, word_boundary="|")
    with pytest.raises(OptionError, match=r"word-boundary unit '#' is not in the token table"):
        tokenize("a b", CHARS, word_boundary="#")
    with pytest.raises(OptionError, match="symbol 'b' of text 'a b' is the blank"):
        tokenize("a b", TokenTable(("b", "a"), 0))


def test_tokenize_bpe_round_trips_and_matches_the_lexicon(demo, bpe):
    tokens, model = bpe
    assert tokens.blank == tokens.num_columns - 1
    texts = [line.strip() for line in (demo / "test.txt").read_text().splitlines()[:20] if line.strip()]
    for text in texts:
        seq = tokenize(text, tokens, spm=model)
        assert tokens.blank not in seq
        pieces = [tokens.symbols[c] for c in seq]
        assert "".join(pieces).replace("\u2581", " ").strip() == text
        # The concatenation of the per-word spellings, as lexicon_from_sentencepiece spells them.
        per_word = [tokenize(w, tokens, spm=model) for w in text.split()]
        assert seq == [c for w in per_word for c in w]
        assert all(tokens.symbols[w[0]].startswith("\u2581") for w in per_word)


def test_tokenize_bpe_accepts_a_loaded_processor_and_rejects_unknown(bpe):
    import sentencepiece

    tokens, model = bpe
    sp = sentencepiece.SentencePieceProcessor(model_file=str(model))
    assert tokenize("you take delight", tokens, spm=sp) == tokenize("you take delight", tokens, spm=str(model))
    with pytest.raises(OptionError, match=r"word 'caf\u00e9' of text 'a caf\u00e9'.*'\u00e9'"):
        tokenize("a caf\u00e9", tokens, spm=model)
    with pytest.raises(OptionError, match=r"word_boundary='\|' is for per-character tokens.*not both"):
        tokenize("a b", tokens, spm=model, word_boundary="|")
    with pytest.raises(MissingFileError, match="sentencepiece model"):
        tokenize("a", tokens, spm=model.parent / "none.model")


# --------------------------------------------------------------------------- emissions

def test_shape_dtype_and_normalisation():
    _, seqs = _seqs(12)
    lp, ln = emissions(seqs, CHARS.num_columns, CHARS.blank, seed=3)
    assert lp.dtype == np.float32 and ln.dtype == np.int32
    assert lp.shape == (12, int(ln.max()), CHARS.num_columns) and ln.shape == (12,)
    assert np.all(np.isfinite(lp)) and np.all(lp <= 0)
    np.testing.assert_allclose(_lse(lp), 0.0, atol=1e-5)  # padding frames too
    for b, seq in enumerate(seqs):
        assert ln[b] >= len(seq)
        assert np.all(lp[b, ln[b]:].argmax(-1) == CHARS.blank)


def test_blank_last_and_normalised_with_many_columns(bpe):
    tokens, _ = bpe
    seqs = [[5, 5, 9], [], [tokens.blank - 1]]
    lp, ln = emissions(seqs, tokens.num_columns, tokens.blank, seed=0, noise=2.0, confusion=0.5)
    np.testing.assert_allclose(_lse(lp), 0.0, atol=1e-5)
    assert ln[1] >= 1  # an empty sequence still has blank frames


def test_deterministic_per_seed_and_different_across_seeds():
    _, seqs = _seqs(8)
    a = emissions(seqs, CHARS.num_columns, 0, seed=7)
    b = emissions(seqs, CHARS.num_columns, 0, seed=7)
    c = emissions(seqs, CHARS.num_columns, 0, seed=8)
    assert a[0].tobytes() == b[0].tobytes() and a[1].tobytes() == b[1].tobytes()
    assert a[0].shape != c[0].shape or a[0].tobytes() != c[0].tobytes()


@pytest.mark.parametrize("blank", [0, 5, 28])
def test_clean_emissions_decode_exactly_with_repeats(blank):
    texts, seqs = _seqs(40, seed=1)
    texts += ["hello", "book", "aaa bb", "see all"]
    seqs += [tokenize(t, CHARS, word_boundary="|") for t in texts[-4:]]
    # Move the blank: swap column `blank` and column 0 in the sequences.
    swap = {0: blank, blank: 0}
    seqs = [[swap.get(c, c) for c in s] for s in seqs]
    for fpt, bf in [((1, 3), (0, 2)), ((1, 1), (0, 0)), ((2, 4), (0, 1))]:
        lp, ln = emissions(seqs, CHARS.num_columns, blank, seed=2, noise=0.0, confusion=0.0,
                           frames_per_token=fpt, blank_frames=bf)
        assert greedy_ctc(lp, ln, blank) == seqs
    # With noise but no confusion, errors are rare (about 0.2% of tokens).
    lp, ln = emissions(seqs, CHARS.num_columns, blank, seed=2, confusion=0.0)
    hyps = greedy_ctc(lp, ln, blank)
    assert sum(_edits(r, h) for r, h in zip(seqs, hyps)) <= 0.01 * sum(map(len, seqs))


def test_repeats_are_separated_by_a_blank_frame():
    lp, ln = emissions([[3, 3, 3, 4, 4]], 6, 0, seed=0, blank_frames=(0, 0), frames_per_token=(1, 1),
                       noise=0.0, confusion=0.0)
    assert lp[0, :ln[0]].argmax(-1).tolist() == [3, 0, 3, 0, 3, 4, 0, 4]


def test_confusion_gives_a_small_error_rate():
    _, seqs = _seqs(150, seed=4)
    lp, ln = emissions(seqs, CHARS.num_columns, CHARS.blank, seed=5)
    hyps = greedy_ctc(lp, ln, CHARS.blank)
    cer = sum(_edits(r, h) for r, h in zip(seqs, hyps)) / sum(map(len, seqs))
    assert 0.01 < cer < 0.15
    lp, ln = emissions(seqs, CHARS.num_columns, CHARS.blank, seed=5, confusion=0.3)
    worse = sum(_edits(r, h) for r, h in zip(seqs, greedy_ctc(lp, ln, CHARS.blank))) / sum(map(len, seqs))
    assert worse > cer


def test_from_texts_is_tokenize_then_emissions():
    texts = ["hello world", "it's a book"]
    lp, ln = from_texts(texts, CHARS, word_boundary="|", seed=9, confusion=0.0, noise=0.0)
    seqs = [tokenize(t, CHARS, word_boundary="|") for t in texts]
    ref = emissions(seqs, CHARS.num_columns, CHARS.blank, seed=9, confusion=0.0, noise=0.0)
    assert lp.tobytes() == ref[0].tobytes() and ln.tobytes() == ref[1].tobytes()
    assert greedy_ctc(lp, ln, CHARS.blank) == seqs
    with pytest.raises(OptionError, match=r"the token table \(29 symbols\) has no blank"):
        from_texts(texts, TokenTable(CHARS.symbols, None))


def test_from_texts_seeds_stacks_each_seed_padded():
    texts = ["hello world", "a"]
    lp, ln = from_texts_seeds(texts, CHARS, 3, word_boundary="|")
    assert lp.shape[0] == ln.shape[0] == 6 and lp.shape[1] == ln.max()
    for s in range(3):
        x, n = from_texts(texts, CHARS, word_boundary="|", seed=s)
        assert (ln[2 * s:2 * s + 2] == n).all()
        assert lp[2 * s:2 * s + 2, :x.shape[1]].tobytes() == x.tobytes()
        assert not lp[2 * s:2 * s + 2, x.shape[1]:].any()  # padding is zeros
    for seeds in (0, 2.0, True):
        with pytest.raises(OptionError, match=f"seeds must be a whole number >= 1, got {seeds!r}"):
            from_texts_seeds(texts, CHARS, seeds, word_boundary="|")


@pytest.mark.parametrize("seqs,kw,message", [
    ([[1, 2], [3, 29]], {}, r"utterance 1: token 29 at position 1 is outside \[0, 29\)"),
    ([[1, 0, 2]], {}, r"utterance 0: token 0 at position 1 is the blank"),
    ([[2], [-1]], {}, r"utterance 1: token -1 at position 0 is outside"),
    ([["a"]], {}, r"utterance 0: token ids must be integers"),
    ([], {}, "token_seqs is empty"),
    ([[1]], {"frames_per_token": (0, 2)}, r"frames_per_token must satisfy 1 <= min <= max"),
    ([[1]], {"blank_frames": (2, 1)}, r"blank_frames must satisfy 0 <= min <= max"),
    ([[1]], {"confusion": 1.5}, r"confusion must be a probability"),
    ([[1]], {"noise": -1.0}, r"noise must be a finite number >= 0, got -1.0"),
    ([[1]], {"peak": float("nan")}, r"peak must be a finite number >= 0, got nan"),
    ([[1]], {"frames_per_token": 3}, r"frames_per_token must be a pair \(min, max\) of integers, got 3"),
    ([[1]], {"seed": -1}, r"seed must be an integer >= 0, got -1"),  # (numpy's ValueError before)
    ([[1]], {"seed": 1.5}, r"seed must be an integer >= 0, got 1.5"),
])
def test_emission_errors(seqs, kw, message):
    with pytest.raises(OptionError, match=message):
        emissions(seqs, 29, 0, **kw)
    with pytest.raises(OptionError, match=r"blank column 5 outside \[0, 5\)"):
        emissions([[1]], 5, 5)
    with pytest.raises(OptionError, match="num_columns must be at least 2 .*, got 1"):
        emissions([[]], 1, 0)


def test_greedy_ctc_reference():
    lp = np.full((2, 6, 3), -10.0, dtype=np.float32)
    for b, path in enumerate([[1, 1, 0, 1, 2, 2], [2, 0, 0, 2, 1, 1]]):
        lp[b, np.arange(6), path] = 0.0
    assert greedy_ctc(lp, np.array([6, 4]), 0) == [[1, 1, 2], [2, 2]]
    assert greedy_ctc(lp, np.array([0, 6]), 0) == [[], [2, 2, 1]]


# --------------------------------------------------------------------------- files

def test_save_load_round_trip(tmp_path):
    texts = ["hello world", "a book", "\u00e9t\u00e9"]
    seqs = [tokenize(t, CHARS, word_boundary="|") for t in texts[:2]] + [[3]]
    lp, ln = emissions(seqs, CHARS.num_columns, CHARS.blank, seed=1)
    path = tmp_path / "em.npz"
    save_npz(path, lp, ln, texts)
    got = load_npz(path)
    assert isinstance(got, Emissions) and got.synthetic is True
    assert got.log_probs.tobytes() == lp.tobytes() and got.lengths.tobytes() == ln.tobytes()
    assert got.texts == texts
    save_npz(tmp_path / "plain", lp, ln)
    assert (tmp_path / "plain").is_file()
    got = load_npz(tmp_path / "plain")
    assert got.texts is None and got.synthetic is True
    with pytest.raises(OptionError, match="2 texts for 3 utterances"):
        save_npz(path, lp, ln, texts[:2])
    with pytest.raises(OptionError, match=r"log_probs must be \(B, T, V\), got shape \(3, 4\)"):
        save_npz(path, np.zeros((3, 4)), ln)
    with pytest.raises(OptionError, match=r"lengths must have shape \(3,\), got \(2,\)"):
        save_npz(path, lp, ln[:2])
    with pytest.raises(OptionError, match=r"lengths must be in \[0, \d+\], got -1\.\."):
        save_npz(path, lp, np.array([-1, 1, 1]))
    with pytest.raises(OptionError, match=r"lengths must be integers; got float64"):  # (was cut to 1, silently)
        save_npz(path, lp, np.array([1.9, 1, 1]))
    with pytest.raises(OptionError, match=r"lengths must be in \[0, \d+\], got 1\.\.4294967296"):
        save_npz(path, lp, np.array([1, 1, 2**32]))  # (was 0 as int32)
    with pytest.raises(OptionError, match=r"lengths must have shape"):
        greedy_ctc(lp, ln[:1], CHARS.blank)


def test_utterance_ids_are_kept_and_other_arrays_said_to_be_unread(tmp_path):
    """An emissions file's utterance ids key its CTM and hypothesis lines; its 'keys' array
    was dropped without a word (the lines said 0, 1, 2)."""
    lp, ln = from_texts(["ab", "c", "ba"], CHARS, word_boundary="|", seed=1)
    save_npz(tmp_path / "e.npz", lp, ln, utt_ids=["u1", "u2", "u3"])
    got = load_npz(tmp_path / "e.npz")
    assert got.utt_ids == ["u1", "u2", "u3"] and got.key(1) == "u2" and load_npz_plain(tmp_path, lp, ln).key(1) == "1"
    for ids, why in ((["u1", "u2"], "2 utterance ids for 3 utterances"), (["u1", "u 2", "u3"], "'u 2' is not a str"),
                     (["u1", "u\u00a02", "u\u20283"], re.escape(repr("u\u00a02"))),  # (any space splits a CTM)
                     (["u1", "u2", "u\x0b3"], re.escape(repr("u\x0b3"))),
                     (["u1", "u2", "u1"], "utterance id 'u1' is given to utterances 0 and 2")):
        with pytest.raises(OptionError, match=why):
            save_npz(tmp_path / "bad.npz", lp, ln, utt_ids=ids)
        np.savez(tmp_path / "bad.npz", log_probs=lp, lengths=ln, utt_ids=np.array(ids))
        with pytest.raises(InputFileError, match=why):
            load_npz(tmp_path / "bad.npz")
    np.savez(tmp_path / "keys.npz", log_probs=lp, lengths=ln, keys=np.array(["a", "b", "c"]))
    with pytest.warns(UserWarning, match=r"arrays 'keys' are not read .*utterance ids go in 'utt_ids'"):
        assert load_npz(tmp_path / "keys.npz").utt_ids is None


def load_npz_plain(tmp_path, lp, ln):
    np.savez(tmp_path / "plain.npz", log_probs=lp, lengths=ln)
    return load_npz(tmp_path / "plain.npz")


def test_load_errors(tmp_path):
    with pytest.raises(MissingFileError, match="cannot read emissions file .*none.npz: not found"):
        load_npz(tmp_path / "none.npz")
    os.mkfifo(tmp_path / "fifo.npz")  # (a pipe, or <(...), was "not found")
    with pytest.raises(InputFileError, match="fifo.npz: not a regular file: an .npz archive is read by seeking"):
        load_npz(tmp_path / "fifo.npz")
    lp = np.full((1, 2, 3), np.finfo(np.float64).min)  # float64's log 0: -inf in float32, without a warning
    lp[0, :, 0] = 0.0
    np.savez(tmp_path / "f64.npz", log_probs=lp, lengths=np.array([2]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = load_npz(tmp_path / "f64.npz").log_probs
    assert got.dtype == np.float32 and (got[0, :, 1:] == -np.inf).all() and (got[0, :, 0] == 0).all()
    np.savez(tmp_path / "nolp.npz", lengths=np.array([1]))
    with pytest.raises(InputFileError, match=r"nolp.npz: no 'log_probs' array \(has: lengths\)"):
        load_npz(tmp_path / "nolp.npz")
    (tmp_path / "junk.npz").write_text("not a zip")
    with pytest.raises(WfstError, match=r"junk.npz: not an .npz archive \(save one with numpy.savez"):
        load_npz(tmp_path / "junk.npz")  # (not "pickled data", as np.load says of any such file)
    (tmp_path / "empty.npz").write_bytes(b"")
    with pytest.raises(WfstError, match="empty.npz: not an .npz archive"):
        load_npz(tmp_path / "empty.npz")
    np.savez(tmp_path / "other.npz", log_probs=np.zeros((2, 3, 4), np.float32), lengths=np.array([3, 3]))
    got = load_npz(tmp_path / "other.npz")
    assert got.synthetic is False and got.lengths.dtype == np.int32
    save_npz(tmp_path / "model.npz", np.zeros((1, 2, 3), np.float32), np.array([2]), synthetic=False)  # (a model's
    assert load_npz(tmp_path / "model.npz").synthetic is False  # own outputs were marked SYNTHETIC: no way to say)
    np.savez(tmp_path / "bad.npz", log_probs=np.zeros((2, 3, 4), np.float32), lengths=np.array([3, 4]))
    with pytest.raises(InputFileError, match=r"bad.npz: lengths must be in \[0, 3\], got 3..4"):
        load_npz(tmp_path / "bad.npz")
    whole = (tmp_path / "other.npz").read_bytes()  # a zip cut short, or one bit flipped: the zip module's errors
    (tmp_path / "cut.npz").write_bytes(whole[:len(whole) // 2])
    flipped = bytearray(whole)
    flipped[whole.index(b"log_probs.npy") + 200] ^= 1
    (tmp_path / "flipped.npz").write_bytes(bytes(flipped))
    for name in ("cut", "flipped"):
        with pytest.raises(InputFileError, match=f"{name}.npz: not a readable .npz file"):
            load_npz(tmp_path / f"{name}.npz")
    np.savez(tmp_path / "flag.npz", log_probs=np.zeros((2, 3, 4), np.float32), lengths=np.array([3, 3]),
             synthetic=np.array([1, 0]))
    with pytest.raises(InputFileError, match=r"flag.npz: 'synthetic' must be one bool, got int64 of shape \(2,\)"):
        load_npz(tmp_path / "flag.npz")


def test_texts_saved_as_bytes_are_read_as_text_and_numbers_are_refused(tmp_path):
    """Bytes read by str() as "b'it is ...'": every reference word an error, the WER 13x too high."""
    x = np.zeros((2, 3, 4), np.float32)
    np.savez(tmp_path / "b.npz", log_probs=x, lengths=np.array([3, 3]), texts=np.array(["a b".encode(), b"c"]))
    assert load_npz(tmp_path / "b.npz").texts == ["a b", "c"]
    np.savez(tmp_path / "n.npz", log_probs=x, lengths=np.array([3, 3]), texts=np.array([1, 2]))
    with pytest.raises(InputFileError, match=r"n.npz: 'texts' must be strings, got int64"):
        load_npz(tmp_path / "n.npz")
    np.savez(tmp_path / "l.npz", log_probs=x, lengths=np.array([3, 3]), texts=np.array([b"\xff", b"c"]))
    with pytest.raises(InputFileError, match=r"l.npz: 'texts' holds bytes that are not UTF-8"):
        load_npz(tmp_path / "l.npz")
