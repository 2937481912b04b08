"""SYNTHETIC CTC log-posteriors made from text, for the demo, the tests and the benchmarks.

Nothing here comes from an acoustic model or from audio.  The emissions are made up,
with a fixed seed, to look roughly like a CTC model's output so that the decoder has
realistic input shapes and something to correct; any error rate measured on them says
how the decoder behaves on this generator, not how a speech recogniser would do.
Files written by :func:`save_npz` carry a ``synthetic`` marker so that results printed
from them can be labelled as such.

    tokens = TokenTable.read("recipes/demo/data/chars_tokens.txt")
    log_probs, lengths = from_texts(["hello world"], tokens, word_boundary="|", seed=1)
    greedy_ctc(log_probs, lengths, tokens.blank)      # [[10, 7, 14, 14, 17, 1, 25, ...]]

How an utterance is made (:func:`emissions`), frame by frame like a peaky CTC model:
a few leading blank frames, then for each token ``frames_per_token`` frames where the
token peaks followed by ``blank_frames`` blank frames (at least one between two equal
tokens, or CTC would merge them).  Each frame's logits are ``peak`` on the frame's
column (and a weaker blank, ``peak / 2``, on token frames), plus Gaussian noise of
scale ``noise`` on every column; on a token frame, with probability ``confusion``, one
wrong column (drawn once per token, never the blank) gets ``peak + U(0, 2)``, so it
usually wins the frame while the right token keeps a share of the mass that a
language model can recover.

With the defaults, greedy CTC decoding (:func:`greedy_ctc`) of the 282 sentences of
``recipes/demo/data/test.txt`` (seed 0) gives a 6.7% token error rate with the character
tokens (``chars_tokens.txt``, word boundary ``|``; = 6.7% CER) and 7.0% with the BPE
pieces (``bpe.model``, 256 pieces + blank; 8.5% CER on the text).  With
``confusion=0`` it is about 0.2% (noise alone).  About a third of the frames are blank.
"""
from __future__ import annotations

import dataclasses
import os
import warnings
import zipfile
from collections.abc import Sequence

import numpy as np

from .errors import InputFileError, MissingFileError, OptionError, OutputFileError, user_stacklevel
from .files import atomic_path, check_path, split_fields
from .inputs import host_array, whole_numbers
from .symbols import TokenTable

__all__ = ["Emissions", "detokenize", "emissions", "from_texts", "greedy_ctc", "load_npz", "save_npz", "tokenize"]

DEFAULT_PEAK = 8.0
DEFAULT_NOISE = 1.0
DEFAULT_CONFUSION = 0.04
_BLANK_ON_TOKEN = 0.5  # the blank's logit on a token frame, as a fraction of `peak`
_CONFUSION_EXTRA = 2.0  # a confused frame's wrong column gets peak + U(0, this)

_SPM_CACHE: dict[str, object] = {}


# --------------------------------------------------------------------------- tokenize

def _load_spm(spm):
    """A SentencePieceProcessor from a path (cached by absolute path) or as given."""
    if not isinstance(spm, (str, os.PathLike)):
        return spm
    key = os.path.abspath(os.fspath(spm))
    sp = _SPM_CACHE.get(key)
    if sp is None:
        import sentencepiece

        if not os.path.isfile(key):
            raise MissingFileError(spm, "sentencepiece model")
        try:
            sp = sentencepiece.SentencePieceProcessor(model_file=key)
        except (RuntimeError, OSError) as e:
            raise InputFileError(spm, None, f"not a sentencepiece model ({e})") from None
        _SPM_CACHE[key] = sp
    return sp


def tokenize(text: str, tokens: TokenTable, *, spm=None, word_boundary: str | None = None) -> list[int]:
    """The logit columns (not FST labels) that spell `text`, as the compiled graphs spell it.

    With `spm` (a path to a sentencepiece ``.model`` or a loaded ``SentencePieceProcessor``)
    each whitespace-separated word is encoded into pieces on its own, as
    :func:`wfst.graphs.lexicon.lexicon_from_sentencepiece` spells words, and the pieces
    are concatenated.  Without it the words are spelled per character, with the column of
    `word_boundary` (e.g. ``"|"``), if given, between words (never at the edges), as
    :func:`~wfst.graphs.lexicon.lexicon_from_chars` with that separator does.

    The text is used as it is (no case folding).  Blank or whitespace-only text gives
    ``[]``.  A symbol that is not in `tokens`, is the blank, or is the word-boundary unit
    inside a word raises :class:`~wfst.errors.OptionError` (a ValueError) naming the
    symbol and the text.
    """
    column = {s: c for c, s in enumerate(tokens.symbols)}
    blank_sym = tokens.symbols[tokens.blank] if tokens.blank is not None else None
    words = split_fields(text)
    if spm is not None:
        if word_boundary is not None:
            raise OptionError(f"word_boundary={word_boundary!r} is for per-character tokens; sentencepiece "
                              "pieces mark word starts themselves (give spm or word_boundary, not both)")
        sp = _load_spm(spm)
        unk = sp.unk_id()
        spelled = []
        for word in words:
            pieces = sp.encode(word, out_type=str)
            for piece in pieces:
                if unk >= 0 and sp.piece_to_id(piece) == unk:
                    raise OptionError(f"word {word!r} of text {text!r} has a piece unknown to the "
                                      f"sentencepiece model: {piece!r}")
            spelled.append(pieces)
    else:
        if word_boundary is not None and word_boundary not in column:
            raise OptionError(f"word-boundary unit {word_boundary!r} is not in the token table")
        spelled = []
        for word in words:
            if word_boundary is not None and word_boundary in word:
                raise OptionError(f"word {word!r} of text {text!r} contains the word-boundary unit "
                                  f"{word_boundary!r}")
            spelled.append(list(word))
    out: list[int] = []
    for i, pieces in enumerate(spelled):
        if i and word_boundary is not None:
            out.append(column[word_boundary])
        for sym in pieces:
            if sym not in column:
                raise OptionError(f"symbol {sym!r} of text {text!r} is not in the token table")
            if sym == blank_sym:
                raise OptionError(f"symbol {sym!r} of text {text!r} is the blank")
            out.append(column[sym])
    return out


def detokenize(columns: Sequence[int], tokens: TokenTable, *, word_boundary: str | None = None) -> str:
    """The text of a token sequence (e.g. greedy CTC output): the inverse of :func:`tokenize`.

    Per-character tokens are joined and split into words at `word_boundary`; without it
    the pieces are sentencepiece pieces whose "▁" starts a word."""
    joined = "".join(tokens.symbols[c] for c in columns)
    if word_boundary is not None:
        return " ".join(w for w in joined.split(word_boundary) if w)
    return " ".join(split_fields(joined.replace("\u2581", " ")))


# --------------------------------------------------------------------------- emissions

def _check_range(name: str, value, low: int) -> tuple[int, int]:
    try:
        lo, hi = (int(v) for v in value)
    except (TypeError, ValueError):
        raise OptionError(f"{name} must be a pair (min, max) of integers, got {value!r}") from None
    if not low <= lo <= hi:
        raise OptionError(f"{name} must satisfy {low} <= min <= max, got {value!r}")
    return lo, hi


def emissions(token_seqs: Sequence[Sequence[int]], num_columns: int, blank: int, *, seed: int = 0,
              frames_per_token: tuple[int, int] = (1, 3), blank_frames: tuple[int, int] = (0, 2),
              peak: float = DEFAULT_PEAK, noise: float = DEFAULT_NOISE,
              confusion: float = DEFAULT_CONFUSION) -> tuple[np.ndarray, np.ndarray]:
    """SYNTHETIC CTC log-posteriors for a batch of token sequences (logit columns).

    Returns ``(log_probs, lengths)``: float32 ``(B, T, V)`` log-softmax rows, T the longest
    utterance, and int32 ``(B,)`` lengths.  Frames past an utterance's length hold a
    blank-peaked distribution (no noise), so every row of the array is normalised.

    Each utterance: ``blank_frames`` leading blank frames, then per token
    ``frames_per_token`` frames peaking on it and ``blank_frames`` blank frames after it
    (at least one when the next token is the same).  Both ranges are inclusive
    ``(min, max)`` and drawn uniformly.  An empty sequence gives an utterance of 1 or more
    blank frames (as many as the leading blank frames drawn, at least 1).

    `peak` is the logit advantage of the frame's column, `noise` the standard deviation of
    the Gaussian noise added to every logit, and `confusion` the probability, per token
    frame, that a wrong column (one per token, never the blank) takes the peak
    (``peak + U(0, 2)``; the right column keeps ``peak``).  The same arguments and `seed`
    give byte-identical output (``numpy.random.default_rng(seed)``).
    """
    num_columns, blank = int(num_columns), int(blank)
    if num_columns < 2:
        raise OptionError(f"num_columns must be at least 2 (a blank and a token), got {num_columns}")
    if not 0 <= blank < num_columns:
        raise OptionError(f"blank column {blank} outside [0, {num_columns})")
    f_lo, f_hi = _check_range("frames_per_token", frames_per_token, 1)
    b_lo, b_hi = _check_range("blank_frames", blank_frames, 0)
    if not np.isfinite(peak) or peak < 0:
        raise OptionError(f"peak must be a finite number >= 0, got {peak!r}")
    if not np.isfinite(noise) or noise < 0:
        raise OptionError(f"noise must be a finite number >= 0, got {noise!r}")
    if not 0.0 <= confusion <= 1.0:
        raise OptionError(f"confusion must be a probability in [0, 1], got {confusion!r}")
    if len(token_seqs) == 0:
        raise OptionError("token_seqs is empty: no utterances to make")
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise OptionError(f"seed must be an integer >= 0, got {seed!r}")

    seqs = []
    for b, seq in enumerate(token_seqs):
        try:
            arr = np.asarray(seq, dtype=np.int64).reshape(-1)
        except (TypeError, ValueError):
            raise OptionError(f"utterance {b}: token ids must be integers, got {seq!r}") from None
        bad = np.flatnonzero((arr < 0) | (arr >= num_columns) | (arr == blank))
        if bad.size:
            i = int(bad[0])
            what = "is the blank" if arr[i] == blank else f"is outside [0, {num_columns})"
            raise OptionError(f"utterance {b}: token {int(arr[i])} at position {i} {what}")
        seqs.append(arr)

    rng = np.random.default_rng(seed)
    utterances = [_utterance(rng, seq, num_columns, blank, f_lo, f_hi, b_lo, b_hi, float(peak),
                             float(noise), float(confusion)) for seq in seqs]
    lengths = np.array([u.shape[0] for u in utterances], dtype=np.int32)
    pad = np.zeros(num_columns)
    pad[blank] = peak
    pad = _log_softmax(pad).astype(np.float32)
    log_probs = np.empty((len(utterances), int(lengths.max()), num_columns), dtype=np.float32)
    for b, u in enumerate(utterances):
        log_probs[b, :len(u)] = u
        log_probs[b, len(u):] = pad
    return log_probs, lengths


def _utterance(rng, seq, V, blank, f_lo, f_hi, b_lo, b_hi, peak, noise, confusion) -> np.ndarray:
    n = len(seq)
    lead = int(rng.integers(b_lo, b_hi + 1))
    tok_frames = rng.integers(f_lo, f_hi + 1, size=n)
    gaps = rng.integers(b_lo, b_hi + 1, size=n)
    if n == 0:
        lead = max(lead, 1)
    else:
        gaps[:-1][seq[1:] == seq[:-1]] = np.maximum(gaps[:-1][seq[1:] == seq[:-1]], 1)
    # Frame layout: lead blanks, then (token frames, gap blanks) per token.
    token_of_frame = np.full(lead + int(tok_frames.sum() + gaps.sum()), -1, dtype=np.int64)
    starts = lead + np.concatenate(([0], np.cumsum(tok_frames + gaps)[:-1])).astype(np.int64)
    for i in range(n):
        token_of_frame[starts[i]:starts[i] + tok_frames[i]] = i
    T = len(token_of_frame)
    is_tok = token_of_frame >= 0
    target = np.where(is_tok, seq[np.maximum(token_of_frame, 0)] if n else blank, blank)

    logits = noise * rng.standard_normal((T, V)) if noise > 0 else np.zeros((T, V))
    frames = np.arange(T)
    logits[frames, target] += peak
    logits[is_tok, blank] += _BLANK_ON_TOKEN * peak
    # One wrong column per token (uniform over columns other than the blank and the target).
    draw = rng.integers(0, V - 2, size=n) if V > 2 else np.zeros(n, dtype=np.int64)
    lo, hi = np.minimum(seq, blank), np.maximum(seq, blank)
    wrong = draw + (draw >= lo) + (draw + (draw >= lo) >= hi)
    confused = is_tok & (rng.random(T) < confusion)
    extra = rng.uniform(0.0, _CONFUSION_EXTRA, size=T)
    if V > 2 and confused.any():
        f = frames[confused]
        logits[f, wrong[token_of_frame[f]]] += peak + extra[f]
    return _log_softmax(logits).astype(np.float32)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def greedy_ctc(log_probs: np.ndarray, lengths: np.ndarray, blank: int) -> list[list[int]]:
    """Best-path CTC decoding: per frame argmax, merge repeats, drop blanks (NumPy reference)."""
    log_probs = np.asarray(log_probs)
    lengths = np.asarray(lengths).reshape(-1)
    _check_batch(log_probs, lengths, "")
    B = log_probs.shape[0]
    best = log_probs.argmax(axis=-1)
    out = []
    for b in range(B):
        path = best[b, :int(lengths[b])]
        keep = np.ones(len(path), dtype=bool)
        keep[1:] = path[1:] != path[:-1]
        path = path[keep]
        out.append([int(c) for c in path[path != blank]])
    return out


def from_texts(texts: Sequence[str], tokens: TokenTable, *, spm=None, word_boundary: str | None = None,
               seed: int = 0, **kw) -> tuple[np.ndarray, np.ndarray]:
    """:func:`tokenize` each text, then :func:`emissions` (`kw` goes to emissions)."""
    if tokens.blank is None:
        raise OptionError(f"the token table ({tokens.num_columns} symbols) has no blank; CTC emissions need "
                          "one: read it with TokenTable.read(path, blank=SYMBOL)")
    seqs = [tokenize(t, tokens, spm=spm, word_boundary=word_boundary) for t in texts]
    return emissions(seqs, tokens.num_columns, tokens.blank, seed=seed, **kw)


def from_texts_seeds(texts: Sequence[str], tokens: TokenTable, seeds: int, **kw) -> tuple[np.ndarray, np.ndarray]:
    """:func:`from_texts` with seeds 0 .. seeds-1, one batch after the other (padded to the
    longest): `seeds` synthetic copies of each text (`kw` goes to from_texts)."""
    if type(seeds) is not int or seeds < 1:
        raise OptionError(f"seeds must be a whole number >= 1, got {seeds!r}")
    parts = [from_texts(texts, tokens, seed=s, **kw) for s in range(seeds)]
    T = max(x.shape[1] for x, _ in parts)
    return (np.concatenate([np.pad(x, ((0, 0), (0, T - x.shape[1]), (0, 0))) for x, _ in parts]),
            np.concatenate([n for _, n in parts]))


# --------------------------------------------------------------------------- files

@dataclasses.dataclass(frozen=True, eq=False)
class Emissions:
    """What :func:`load_npz` reads: log-posteriors, lengths, the texts and utterance ids if
    stored, the marker."""

    log_probs: np.ndarray  # float32 (B, T, V)
    lengths: np.ndarray  # int32 (B,)
    texts: list[str] | None
    synthetic: bool
    utt_ids: list[str] | None = None  # each utterance's id (Kaldi's key: CTM and hypothesis lines), if stored

    def key(self, b: int) -> str:
        """Utterance b's id, or its index where the file holds none."""
        return str(b) if self.utt_ids is None else self.utt_ids[b]


_ARRAYS = ("log_probs", "lengths", "texts", "utt_ids", "synthetic")  # what an emissions file's arrays may be


def _check_utt_ids(ids: list, count: int) -> str | None:
    """What is wrong with utterance ids for `count` utterances (None: nothing): a CTM line
    and a Kaldi key are split at spaces, and a scorer matches them one to one."""
    if len(ids) != count:
        return f"{len(ids)} utterance ids for {count} utterances"
    bad = next((i for i in ids if not isinstance(i, str) or not i or any(c.isspace() for c in i)), None)
    if bad is not None:  # (any space: \v, a no-break space or U+2028 split the CTM's lines and fields too)
        return f"utterance id {bad!r} is not a str without spaces"
    seen: dict[str, int] = {}
    for b, i in enumerate(ids):
        if i in seen:
            return f"utterance id {i!r} is given to utterances {seen[i]} and {b}"
        seen[i] = b
    return None


def _check_batch(log_probs, lengths, where: str):
    if log_probs.ndim != 3:
        raise OptionError(f"{where}log_probs must be (B, T, V), got shape {log_probs.shape}")
    B, T, _ = log_probs.shape
    if lengths.shape != (B,):
        raise OptionError(f"{where}lengths must have shape ({B},), got {lengths.shape}")
    if B and (lengths.min() < 0 or lengths.max() > T):
        raise OptionError(f"{where}lengths must be in [0, {T}], got {int(lengths.min())}..{int(lengths.max())}")


def save_npz(path: str | os.PathLike, log_probs: np.ndarray, lengths: np.ndarray,
             texts: Sequence[str] | None = None, utt_ids: Sequence[str] | None = None, *,
             synthetic: bool = True) -> None:
    """Write ``log_probs`` (float32), ``lengths`` (int32), ``texts`` and ``utt_ids``
    (optional) and the ``synthetic`` marker to the ``.npz`` file `path` (exactly that
    name, written atomically).  synthetic=False for a model's own outputs: results of
    the file are then not titled SYNTHETIC."""
    if not isinstance(synthetic, bool):
        raise OptionError(f"synthetic={synthetic!r}: must be True or False")
    path = check_path(path, "emissions file")
    if path.is_dir():  # (IsADirectoryError from deep in the write)
        raise OutputFileError(path, "emissions file", "it is a directory")
    log_probs = np.asarray(host_array(log_probs), dtype=np.float32)
    lengths = host_array(lengths, "lengths")
    if not whole_numbers(lengths):
        raise OptionError(f"lengths must be integers; got {lengths.dtype}")  # (41.9 frames was cut to 41)
    _check_batch(log_probs, lengths, "")  # (before the cast: 2**40 would wrap)
    lengths = lengths.astype(np.int32)
    arrays = {"log_probs": log_probs, "lengths": lengths, "synthetic": np.array(synthetic)}
    if texts is not None:
        texts = list(texts)
        if len(texts) != log_probs.shape[0]:
            raise OptionError(f"{len(texts)} texts for {log_probs.shape[0]} utterances")
        arrays["texts"] = np.array(texts, dtype=np.str_).reshape(len(texts))
    if utt_ids is not None:
        utt_ids = list(utt_ids)
        if (why := _check_utt_ids(utt_ids, log_probs.shape[0])) is not None:
            raise OptionError(why)
        arrays["utt_ids"] = np.array(utt_ids, dtype=np.str_).reshape(len(utt_ids))
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)


def load_npz(path: str | os.PathLike) -> Emissions:
    """Read a file written by :func:`save_npz` (or any ``.npz`` with ``log_probs`` and ``lengths``,
    and optionally ``texts`` and ``utt_ids``; ``synthetic`` is then False).  Other arrays are
    not read: a warning names them."""
    check_path(path, "emissions file")
    if not os.path.isfile(path):
        if os.path.exists(path):  # (a pipe, /dev/stdin, <(...): an .npz is read from both ends)
            raise InputFileError(path, None, "not a regular file: an .npz archive is read by seeking, so save it "
                                 "to a file first")
        raise MissingFileError(path, "emissions file")
    with open(path, "rb") as f:
        head = f.read(6)
    if head[:4] != b"PK\x03\x04" and head != b"\x93NUMPY":  # (np.load calls any other file a pickle)
        raise InputFileError(path, None, "not an .npz archive (save one with numpy.savez(path, log_probs=..., "
                             "lengths=...))")
    try:
        z = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise InputFileError(path, None, f"not a readable .npz file ({e})") from None
    if not isinstance(z, np.lib.npyio.NpzFile):  # a .npy: one array, without its lengths
        raise InputFileError(path, None, f"one {z.dtype} array of shape {z.shape} (a .npy file), not an .npz "
                             "archive: save it with numpy.savez(path, log_probs=..., lengths=...)")
    try:
        with z:
            arrays = {name: z[name] for name in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise InputFileError(path, None, f"not a readable .npz file ({e})") from None
    for name in ("log_probs", "lengths"):
        if name not in arrays:
            raise InputFileError(path, None, f"no {name!r} array (has: {', '.join(sorted(arrays)) or 'none'})")
    log_probs, lengths = arrays["log_probs"], arrays["lengths"]
    if not np.issubdtype(log_probs.dtype, np.floating) or not np.issubdtype(lengths.dtype, np.integer):
        raise InputFileError(path, None, f"log_probs must be floating point and lengths integers, got "
                             f"{log_probs.dtype} and {lengths.dtype}")
    try:
        _check_batch(log_probs, lengths, "")
    except OptionError as e:
        raise InputFileError(path, None, str(e)) from None
    texts = _strings(path, arrays, "texts")
    if texts is not None and len(texts) != log_probs.shape[0]:
        raise InputFileError(path, None, f"{len(texts)} texts for {log_probs.shape[0]} utterances")
    utt_ids = _strings(path, arrays, "utt_ids")
    if utt_ids is not None and (why := _check_utt_ids(utt_ids, log_probs.shape[0])) is not None:
        raise InputFileError(path, None, why)
    unread = sorted(set(arrays) - set(_ARRAYS))
    if unread:  # (a file's 'keys' were dropped silently: its CTM said 0, 1, 2, ...)
        warnings.warn(f"{path}: arrays {', '.join(map(repr, unread))} are not read (an emissions file's arrays are "
                      f"{', '.join(_ARRAYS)}; utterance ids go in 'utt_ids')", stacklevel=user_stacklevel())
    synthetic = arrays.get("synthetic", np.False_)
    if synthetic.size != 1 or synthetic.dtype.kind not in "bi":
        raise InputFileError(path, None, f"'synthetic' must be one bool, got {synthetic.dtype} of shape "
                             f"{synthetic.shape}")
    synthetic = bool(synthetic.reshape(-1)[0])
    return Emissions(_as_float32(log_probs), lengths.astype(np.int32, copy=False), texts, synthetic, utt_ids)


def _as_float32(x: np.ndarray) -> np.ndarray:
    """Log-probs in float32: values below its range (float64's smallest as log 0) are -inf, as
    the cast makes them, without NumPy's warning about the overflow (which named no file)."""
    if x.dtype == np.float32:
        return x
    with np.errstate(over="ignore"):
        return x.astype(np.float32)


def _strings(path, arrays: dict, name: str) -> list[str] | None:
    """The file's array `name` as a list of str (None: it has none)."""
    if name not in arrays:
        return None
    given = arrays[name].reshape(-1)
    if given.dtype.kind not in "SU":  # (numbers read as references "1", "2": a WER of nothing)
        raise InputFileError(path, None, f"{name!r} must be strings, got {given.dtype}")
    try:  # (bytes read by str() as "b'...'", every word an error)
        return [t.decode("utf-8") if isinstance(t, bytes) else str(t) for t in given.tolist()]
    except UnicodeDecodeError as e:
        raise InputFileError(path, None, f"{name!r} holds bytes that are not UTF-8 ({e})") from None
