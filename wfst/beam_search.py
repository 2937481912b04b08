"""The second decoder: lexicon-free CTC beam search with a token n-gram LM and phrase
boosting (FlexCTC, NeMo's ``beam_batch``; the algorithm is in wfst.kernels.beam).

It needs no graph: the model's tokens (tokens.txt), optionally a token-level ARPA LM
(BPE pieces or characters, with <s> and </s>), and per call optional phrases to boost.
It outputs any word its tokens can spell, including words no lexicon holds.

    dec = CtcBeamDecoder(tokens="tokens.txt", lm="token_lm.arpa", beam_size=8, lm_weight=0.5,
                         token_insertion=1.0, beam_threshold=20.0)
    results = dec.decode(log_probs, lengths, phrases=["new york"])

Results are DecodeResults: cost = acoustic_cost + graph_cost + boost_cost, where graph_cost
is lm_weight x the LM's cost of the tokens (with </s>) minus token_insertion per token, and
boost_cost the phrase boosts (-rewards); `nbest` holds the final beam's distinct token
sequences, best first.  Words have no ids here (word_ids is empty): they are the text the
tokens spell, split at the word boundary (`|` for characters) or at sentencepiece's "▁".
"""
from __future__ import annotations

import math
import numbers
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .config import FLOAT32_MAX, MAX_REWARD, PHRASE_REWARD, _int, usable_cores
from .errors import BoostError, MissingFileError, OptionError, VocabularyError, interruptible
from .files import split_fields
from .inputs import check_batch, check_log_probs, host_array, input_faults
from .lm import LmStore, open_lm
from .results import DecodeResult, DecodeStats, no_path
from .symbols import TokenTable
from .synthetic import detokenize, tokenize

_SPECIALS = ("<s>", "</s>", "<unk>")


class TokenLm:
    """A token-level n-gram LM over a model's tokens: every LM word but <s>, </s> and <unk>
    must be a token (the blank is never one); tokens the LM lacks are scored as <unk>."""

    def __init__(self, source: str | os.PathLike | LmStore, tokens: TokenTable):
        from wfst.kernels.beam import TokenLmArrays

        store = open_lm(source)
        name = source if not isinstance(source, LmStore) else store.source.get("path", "the token LM")
        ids = store.word_ids()
        symbols = set(tokens.symbols)
        blank = tokens.symbols[tokens.blank]
        if blank in ids:
            raise VocabularyError(f"token LM {name}: the blank {blank!r} is a word of the LM; a CTC blank is "
                                  f"never scored (build the LM from token text without blanks)")
        foreign = [w for w in store.words if w not in symbols and w not in _SPECIALS]
        if foreign:
            shown = ", ".join(repr(w) for w in foreign[:10])
            raise VocabularyError(f"token LM {name}: {len(foreign)} of its words are not tokens of the model "
                                  f"({len(tokens.symbols)} tokens): {shown}{' ...' if len(foreign) > 10 else ''}; "
                                  f"was it built over another model's tokens, or over words?")
        if "<s>" not in ids or "</s>" not in ids:
            raise VocabularyError(f"token LM {name}: it needs <s> and </s>")
        unk = ids.get("<unk>")
        label = np.full(tokens.num_columns, -1, np.int32)
        self.missing = [s for c, s in enumerate(tokens.symbols) if c != tokens.blank and s not in ids]
        if self.missing and unk is None:
            raise VocabularyError(f"token LM {name}: tokens {self.missing[:10]} are not in the LM, which has no "
                                  f"<unk> to score them")
        for c, s in enumerate(tokens.symbols):
            if c != tokens.blank:
                label[c] = ids.get(s, unk if unk is not None else -1)
        self.store, self.tokens = store, tokens
        self.arrays = TokenLmArrays(store.automaton(), label, np.int32(store.start))

    def cost(self, columns: Sequence[int]) -> float:
        """The LM's natural-log cost of a token sequence from <s> to </s> (kenlm's full-sentence
        score x ln 10, negated; tokens the LM lacks as <unk>)."""
        return self.store.score([self.tokens.symbols[c] for c in columns])




class CtcBeamDecoder:
    """Lexicon-free CTC beam search (see the module doc).

    tokens: the model's tokens.txt (or a TokenTable); lm: a token-level ARPA or LM store
    file (None: no LM); beam_size: hypotheses kept per frame; lm_weight: the LM's weight;
    token_insertion: a bonus per token emitted (subtracted from the cost); beam_threshold:
    candidates more than this above the frame's best are dropped; phrase_reward: the
    reward of a phrase given without one; spm: the sentencepiece model that cuts phrases
    into the model's pieces (BPE tokens); word_boundary: the token between words of
    per-character tokens (default: `|` when the table has it and no sentencepiece "▁" pieces)."""

    def __init__(self, tokens: str | os.PathLike | TokenTable, lm: str | os.PathLike | LmStore | None = None, *,
                 beam_size: int = 8, lm_weight: float = 0.5, token_insertion: float = 1.0,
                 beam_threshold: float = 20.0, phrase_reward: float = PHRASE_REWARD,
                 spm: str | os.PathLike | None = None, word_boundary: str | None = None, blank: str | None = None,
                 device: str = "cpu", num_threads: int | None = None):
        from wfst.kernels.beam import BeamSettings

        if isinstance(tokens, TokenTable) and blank is not None:
            raise OptionError(f"blank={blank!r} names the blank of a tokens.txt read here; the TokenTable given has "
                              f"its own ({tokens!r}): make the table with the blank you mean")
        self.tokens = tokens if isinstance(tokens, TokenTable) else TokenTable.read(tokens, blank=blank)
        if self.tokens.blank is None:
            raise OptionError(f"the token table {tokens} has no blank (name it with blank=...)")
        if not isinstance(beam_size, (int, np.integer)) or isinstance(beam_size, bool) or beam_size < 1:
            raise OptionError(f"beam_size={beam_size!r}: must be an integer >= 1")
        if beam_size * self.tokens.num_columns > 1 << 30:  # a frame's candidates are numbered in int32
            raise OptionError(f"beam_size={beam_size!r}: beam_size x the {self.tokens.num_columns} tokens must be "
                              f"at most 2**30 (the search numbers a frame's candidates in 32 bits)")
        for name, value in (("lm_weight", lm_weight), ("token_insertion", token_insertion),
                            ("beam_threshold", beam_threshold), ("phrase_reward", phrase_reward)):
            if not isinstance(value, numbers.Real) or isinstance(value, bool) or not abs(value) <= FLOAT32_MAX:
                raise OptionError(f"{name}={value!r}: must be a finite number (of float32's range: the kernels' "
                                  f"costs)")
        if beam_threshold <= 0:
            raise OptionError(f"beam_threshold={beam_threshold!r}: must be > 0")
        for name, value in (("lm_weight", lm_weight), ("token_insertion", token_insertion)):
            if abs(value) > MAX_REWARD:  # (a bonus of 3e38 a token made every cost -inf)
                raise OptionError(f"{name}={value!r}: must be at most {MAX_REWARD:g} in size (costs are float32, "
                                  f"as for phrase rewards)")
        if lm_weight < 0:
            raise OptionError(f"lm_weight={lm_weight!r}: must be >= 0")
        from .boost import check_reward  # (not at import: it loads numba, which `import wfst` does not)

        try:  # (checked when phrases came, at decode(): a decoder made with it would not run)
            check_reward(phrase_reward, "phrase_reward")
        except BoostError as e:
            raise OptionError(str(e)) from None
        if device not in ("cpu", "cuda"):
            raise OptionError(f"device={device!r}: must be 'cpu' or 'cuda'")
        if num_threads is not None and not (_int(num_threads) and num_threads >= 1):
            raise OptionError(f"num_threads={num_threads!r}: must be None (all cores) or an integer >= 1")
        pieces = any(s.startswith("\u2581") for s in self.tokens.symbols)  # sentencepiece's: words begin at "▁"
        if spm is not None:  # read only when phrases come, but it decides how words are told apart: checked now
            if not os.path.isfile(spm):
                raise MissingFileError(spm, "sentencepiece model (spm)")
            if not pieces:
                raise OptionError(f"spm={str(spm)!r}: the token table has no sentencepiece pieces (none begins "
                                  f"with '\u2581'); a model of characters needs no spm")
        if word_boundary is None and spm is None and "|" in self.tokens.symbols and not pieces:
            word_boundary = "|"  # (a BPE table may hold a "|" piece: its words are still cut at "▁")
        if word_boundary is not None and word_boundary not in self.tokens.symbols:
            raise OptionError(f"word_boundary={word_boundary!r} is not a token of the model")
        if word_boundary is not None and word_boundary == self.tokens.symbols[self.tokens.blank]:
            raise OptionError(f"word_boundary={word_boundary!r} is the blank; the boundary is a token between words")
        self.lm = None if lm is None else TokenLm(lm, self.tokens)
        # The search's LM: none at weight 0 (0 x a -inf log-probability of the file was NaN, which
        # dropped every extension through that n-gram instead of ignoring the LM).
        self._lm_arrays = None if self.lm is None or lm_weight == 0 else self.lm.arrays
        self.spm, self.word_boundary, self.phrase_reward = spm, word_boundary, float(phrase_reward)
        self._pieces = pieces
        self.settings = BeamSettings(np.int64(beam_size), np.float32(beam_threshold), np.int64(self.tokens.blank),
                                     np.float32(lm_weight), np.float32(token_insertion))
        self.num_threads = max(1, num_threads or usable_cores())
        if device == "cpu":  # (the GPU's scratch is on the GPU)
            self._check_memory(0, 1)
        self.device = device
        self._works = []  # the CPU searches' scratch (kernels.beam.BeamWork), one per thread at most
        self._gpu = None
        if device == "cuda":
            from .cuda_beam import CudaBeamSearch

            self._gpu = CudaBeamSearch(self._lm_arrays, self.tokens.num_columns)
        self.stats = DecodeStats()

    def __repr__(self) -> str:
        lm = "no LM" if self.lm is None else "a token LM"
        return (f"CtcBeamDecoder({self.tokens.num_columns} tokens, {lm}, beam_size={int(self.settings.beam_size)}, "
                f"device={self.device!r})")

    def _check_memory(self, frames: int, searches: int) -> None:
        """Refuse, with the estimate, `searches` at once of up to `frames` frames that the host
        cannot hold: each takes its scratch (a table of 2 x beam_size x V candidates, the LM
        rows) and its backpointers (beam_size a frame)."""
        from wfst.kernels.beam import table_size

        from .errors import DecoderMemoryError
        from .memory import USABLE_SHARE, available_host_bytes

        K, V = int(self.settings.beam_size), self.tokens.num_columns
        words = len(self.lm.store.words) if self.lm else 1
        scratch = 40 * table_size(K, V) + 12 * K + 16 * V + 12 * words + 2 * 256 * (8 * V + 8)
        need = searches * (scratch + 8 * K * max(frames, 1))
        free = available_host_bytes()
        if free is not None and need > USABLE_SHARE * free:
            what = f"{searches} search(es) of up to {frames} frames need" if frames else "a search's scratch needs"
            raise DecoderMemoryError(f"beam_size={K}: {what} about {need / 2**30:.2f} GiB of host memory ({V} "
                                     f"tokens) but {free / 2**30:.2f} GiB is available; lower beam_size")

    # ------------------------------------------------------------------ phrases

    def phrase_automaton(self, phrases):
        """The Aho-Corasick automaton of phrases (a list, each rewarded phrase_reward, or a
        mapping phrase -> reward) over the model's tokens; None without phrases."""
        from .boost import check_reward, phrase_automaton

        if isinstance(phrases, Iterator):
            phrases = list(phrases)
        if phrases is not None and not hasattr(phrases, "__len__"):  # (5: len() raised a TypeError)
            raise BoostError(f"phrases must be a list of phrases or a mapping phrase -> reward; got "
                             f"{type(phrases).__name__}")
        if phrases is None or len(phrases) == 0:
            return None
        if isinstance(phrases, str):
            raise BoostError("phrases must be a list of phrases or a mapping phrase -> reward, not one string")
        if not isinstance(phrases, Mapping):
            odd = next((p for p in phrases if not isinstance(p, str)), None)
            if odd is not None:
                raise BoostError(f"phrase {odd!r}: must be a string (phrases: a list of phrases, a mapping phrase "
                                 f"-> reward, or a list of those with one per utterance)")
        if self._pieces and self.spm is None and self.word_boundary is None:
            raise BoostError("phrases on a sentencepiece token table need spm= (the model): spelled per character "
                             "they matched inside other words and never the phrase's own '\u2581' pieces")
        # a phrase listed twice, or spelled alike ("ab", " ab"), is one phrase; a mapping sums the
        # rewards of phrases spelled alike
        summed = isinstance(phrases, Mapping)
        items = phrases.items() if summed else ((p, self.phrase_reward) for p in phrases)
        spelled: dict[tuple[int, ...], float] = {}
        for phrase, reward in items:
            if not isinstance(phrase, str) or not split_fields(phrase):
                raise BoostError(f"phrase {phrase!r}: must be a non-empty string")
            reward = check_reward(reward, f"phrase {phrase!r}")
            try:
                key = tuple(tokenize(phrase, self.tokens, spm=self.spm, word_boundary=self.word_boundary))
            except OptionError as e:
                raise BoostError(f"phrase {phrase!r} cannot be spelled with the model's tokens: {e}") from None
            spelled[key] = spelled.get(key, 0.0) + float(reward) if summed else float(reward)
        symbols = self.tokens.symbols
        if self.word_boundary is not None:  # whole words between word boundaries
            return phrase_automaton(spelled, separator=symbols.index(self.word_boundary))
        if self.spm is not None:  # whole words of sentencepiece pieces, each begun by a "▁" piece
            starts = np.array([c for c, s in enumerate(symbols) if s.startswith("\u2581")], np.int64)
            return phrase_automaton(spelled, word_starts=starts)
        return phrase_automaton(spelled)  # no word boundaries known: on the tokens alone

    # ------------------------------------------------------------------ decoding

    @interruptible
    def decode(self, log_probs, lengths=None, *, phrases=None) -> list[DecodeResult]:
        """Decode a batch: log_probs (B, T, V) float32 log-posteriors (NumPy, torch or CuPy),
        lengths (B,) (default: all T); phrases: one list or mapping for the whole batch, or
        one per utterance (None: none)."""
        from wfst.contexts import automata
        from wfst.kernels import beam

        start = time.perf_counter()
        self.stats = DecodeStats()  # (a call that raises leaves no figures of the one before)
        gpu = self._gpu
        x = gpu.to_batch(log_probs) if gpu else host_array(log_probs)
        lengths = check_batch(x, lengths, self.tokens.num_columns)
        check_log_probs(gpu.input_faults(x, lengths) if gpu else input_faults(np, x, lengths), x, lengths)
        B = len(lengths)
        per_utt = self._phrases_per_utterance(phrases, B)
        built: dict[int, object] = {}
        for p in per_utt:
            if p is not None and id(p) not in built:
                built[id(p)] = self.phrase_automaton(p)
        parts = [a for a in built.values() if a is not None]
        rows = {id(a): r for r, a in enumerate(parts)}
        pb = automata([a.automaton() for a in parts]) if parts else None
        lm = self._lm_arrays
        if gpu:
            row_of = np.array([rows[id(built[id(p)])] if p is not None and built[id(p)] is not None else -1
                               for p in per_utt], np.int32)
            results = []
            for b, (final, count, parents, labels) in enumerate(gpu.search(x, lengths, self.settings, pb, row_of)):
                row = int(row_of[b])
                order = beam.close_beam(final, count, self.settings, lm, pb if row >= 0 else None, max(row, 0))
                results.append(self._result(final, order, parents, labels, int(lengths[b])))
            self.stats = DecodeStats(B, int(lengths.sum()), time.perf_counter() - start,
                                     device_seconds=gpu.device_seconds, no_path=no_path(results, "utterance", x))
            return results
        V = self.tokens.num_columns
        K = int(self.settings.beam_size)
        threads = min(self.num_threads, B)
        self._check_memory(int(lengths.max(initial=0)), max(threads, 1))

        def one(b):
            T = int(lengths[b])
            a = built.get(id(per_utt[b])) if per_utt[b] is not None else None
            try:  # a search leaves its scratch clean, and the cached LM rows stay right: reused
                work = self._works.pop()
            except IndexError:
                work = beam.new_beam_work(K, V, len(self.lm.store.words) if self.lm else 1)
            parents = np.zeros((max(T, 1), K), np.int32)
            labels = np.full((max(T, 1), K), -1, np.int32)
            final, order = beam.search(x[b], T, self.settings, lm, pb if a is not None else None,
                                       rows.get(id(a), 0), work, parents, labels)
            self._works.append(work)
            return self._result(final, order, parents, labels, T)

        if threads <= 1:
            results = [one(b) for b in range(B)]
        else:
            with ThreadPoolExecutor(threads) as pool:
                results = list(pool.map(one, range(B)))
        frames = int(lengths.sum())
        self.stats = DecodeStats(B, frames, time.perf_counter() - start, no_path=no_path(results, "utterance", x))
        return results

    @staticmethod
    def _phrases_per_utterance(phrases, B: int) -> list:
        if phrases is None or isinstance(phrases, Mapping):
            return [phrases] * B
        if isinstance(phrases, Iterator):  # a generator: read once, for every utterance
            phrases = list(phrases)
        if isinstance(phrases, Sequence) and not isinstance(phrases, str) and phrases and all(
                p is None or isinstance(p, (Mapping, list, tuple)) for p in phrases):
            if len(phrases) != B:
                raise BoostError(f"phrases has {len(phrases)} entries but the batch has {B} utterances")
            return list(phrases)
        return [phrases] * B

    def _result(self, final, order, parents, labels, T: int) -> DecodeResult:
        from wfst.kernels import beam

        entries, seen = [], set()
        for j in order:
            h = int(final.hash[j])
            if h in seen:  # the same prefix with another last label, and a worse cost
                continue
            seen.add(h)
            path = beam.trace(parents, labels, T, j, self.tokens.blank) if T else (np.empty(0, np.int32),) * 3
            entries.append(self._entry(final, j, *path, T))
        if not entries:  # every hypothesis had probability 0 (the LM's, where the frames allow others): none
            return DecodeResult((), (), (), math.inf, math.inf, math.inf, False, T, 0.0, nbest=(),
                                _computed={"word_times": ()})
        best = entries[0]
        return DecodeResult(best.words, (), best.word_frames, best.cost, best.acoustic_cost, best.graph_cost,
                            math.isfinite(best.cost), T, best.boost_cost, nbest=tuple(entries),
                            _computed=best._computed)

    def _entry(self, final, j, tokens, frames, ends, T) -> DecodeResult:
        s = self.settings
        words = tuple(split_fields(detokenize(tokens, self.tokens, word_boundary=self.word_boundary)))
        graph = float(s.lm_weight) * float(final.lm_cost[j]) - float(s.insertion) * len(tokens)
        spans = self._word_spans(tokens, frames, ends)
        return DecodeResult(words, (), tuple(start for start, _ in spans), float(final.cost[j]),
                            float(final.acoustic[j]), graph, True, T, float(final.boost[j]),
                            _computed={"word_times": spans})

    def _word_spans(self, tokens, frames, ends) -> tuple[tuple[int, int], ...]:
        """(start, end) frames of each word: from its first token's first frame (a sentencepiece
        word from its "▁" piece) to its last token's last frame, both inclusive.  A token may
        hold a word boundary inside ("▁of▁the" of a model trained without splitting at
        whitespace): the words it holds share its frames, as detokenize splits them."""
        sep = self.word_boundary if self.word_boundary is not None else "\u2581"
        out, in_word, start = [], False, None
        for c, f, e in zip(tokens.tolist(), frames.tolist(), ends.tolist()):
            for i, body in enumerate(self.tokens.symbols[c].split(sep)):
                if i > 0:  # a boundary: the word before ends; a sentencepiece word begins at its "▁"
                    in_word = False
                    if self.word_boundary is None:
                        start = f
                if body:
                    if not in_word:
                        out.append([start if start is not None else f, e])
                        in_word = True
                    start = None
                    out[-1][1] = e
        return tuple((s, e) for s, e in out)
