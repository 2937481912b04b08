"""wfst-decode: decode an emissions file with a graph and print hypotheses, WER and RTFx.

    wfst-decode --graph build/demo/char_compact --emissions emissions.npz [--refs refs.txt]
    wfst-decode ... --stream --chunk-ms 320     # as live streams: partial results, then finals
    wfst-decode ... --lattice-beam 8 --nbest 5  # word lattices: N-best lists and word confidences
    wfst-decode ... --ctm out.ctm               # word times (and confidences with --lattice-beam) as CTM
    wfst-decode ... --rescore-lm big.arpa       # the graph's LM replaced by a bigger one on the fly
    wfst-decode ... --rescore-lm big.arpa --rescore-mode lattice --lattice-beam 8  # the same, on word lattices
    wfst-decode ... --phrases boost.txt         # words and phrases boosted (one a line, TAB reward)
    wfst-decode --beam-search --tokens tokens.txt --lm token_lm.arpa --emissions emissions.npz
                                                # lexicon-free CTC beam search (no graph)

The emissions file is a NumPy .npz with `log_probs` (B, T, V) float32 and `lengths` (B,)
(as written by wfst.synthetic.save_npz; a `texts` array, when present, serves as the
references unless --refs is given).

Every command of the toolkit (wfst-decode, wfst-make-graph, wfst-bench) turns a bad option
or a bad input into one line on stderr and exit status 2 (CliParser, fail); a traceback
means a bug.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import functools
import math
import os
import re
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from .boost import boost_tables, check_reward
from .config import MIN_ACTIVE, PHRASE_REWARD, DecoderConfig
from .decoder import RESCORE_MODES, Decoder
from .errors import BoostError, DecodeInputError, InputFileError, LogProbsWarning, OptionError, WfstError
from .files import read_lines, split_fields, why_unwritable, write_text_atomic
from .graph import load_graph
from .inputs import check_batch, check_log_probs, input_faults
from .results import no_path
from .scoring import FRAME_SECONDS, rtfx, word_errors
from .stream import EndpointConfig
from .synthetic import load_npz

_DECIMAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(inf|infinity|nan)", re.IGNORECASE | re.ASCII)

# --frame-ms: a microsecond to 1000 s (a frame of 1e-320 ms overflowed the CTM's digits)
MIN_FRAME_MS, MAX_FRAME_MS = 1e-3, 1e6


class CliParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (argparse prints the whole usage first)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def one_line(e: BaseException) -> str:
    """An error's message on one line (an OSError with the file it is about)."""
    if isinstance(e, OSError) and not isinstance(e, WfstError) and e.filename:
        text = f"{e.filename}: {e.strerror or e}"
    else:
        text = str(e) or type(e).__name__
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


_STDOUT = {"closed": False}  # a reader of stdout stopped early (| head) while a command went on


def say(text: str) -> None:
    """print() of what a command shows while it works (a stream's partial results): a reader
    that stopped early (| head) ends the showing, not the work, whose files are still
    written (command() then exits 141)."""
    if _STDOUT["closed"]:
        return
    try:
        print(text)
    except BrokenPipeError:
        _stdout_to_devnull()
        _STDOUT["closed"] = True


def _stdout_to_devnull() -> None:
    """What Python flushes of stdout at exit goes nowhere: no second error."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def fail(prog: str, e: BaseException) -> int:
    """Report an error the user can act on, as every command does: one line, exit status 2."""
    print(f"{prog}: error: {one_line(e)}", file=sys.stderr)
    return 2


_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)  # a write to stdout that a full disk (or a dead one) fails


def command(prog: str, options: tuple[str, ...] = ()):
    """A command's main function, as every command runs: warnings as `prog: warning: ...`
    (not the library line that raised them; a keyword argument among `options` they name,
    "graph_lm= x", as the option, "--graph-lm x"), Ctrl-C as one line and exit status 130, a
    closed pipe (`| head`) as exit status 141, and SIGTERM (a job scheduler's or `timeout`'s
    stop) as exit status 143 after the temporary files are cleaned up (Python's default
    exits at once, leaving them)."""
    def wrap(main):
        @functools.wraps(main)
        def run(*args, **kwargs) -> int:
            def show(message, category, filename, lineno, file=None, line=None):
                text = str(message)
                if options:  # (only "name= value": a warning may show the API's "blank=SYMBOL" beside the option)
                    text = re.sub(r"\b(" + "|".join(options) + r")= ", lambda m: f"--{m[1].replace('_', '-')} ", text)
                with contextlib.suppress(OSError):  # (a full stderr: the warning lost, not the run)
                    print(f"{prog}: warning: {text}", file=sys.stderr)

            with warnings.catch_warnings(), _terminated_as_exception():
                warnings.showwarning = show
                _STDOUT["closed"] = False
                try:
                    status = main(*args, **kwargs)
                    return 141 if _STDOUT["closed"] and not status else status
                except KeyboardInterrupt:
                    print(f"{prog}: interrupted", file=sys.stderr)
                    return 130
                except _Terminated:
                    print(f"{prog}: terminated", file=sys.stderr)
                    return 143
                except BrokenPipeError:  # a reader that stopped early (| head): no traceback, and none at exit
                    _stdout_to_devnull()
                    return 141  # (128 + SIGPIPE, as a tool killed by it)
                except OSError as e:
                    if e.filename is not None or e.errno not in _FULL:
                        raise
                    _stdout_to_devnull()  # (stdout on a full disk: said once, on stderr if it can)
                    with contextlib.suppress(OSError):
                        print(f"{prog}: error: cannot write the output: {e.strerror or e}", file=sys.stderr)
                    return 2
        return run
    return wrap


class _Terminated(BaseException):
    """SIGTERM, raised where the command is, so that its `finally` blocks and context managers
    run (a BaseException: no `except Exception` takes it for a failure to handle)."""


@contextlib.contextmanager
def _terminated_as_exception():
    """SIGTERM raises _Terminated while the block runs (in the main thread: only it can set
    a handler); the previous handler comes back after."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum, frame):
        raise _Terminated

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)  # (None: not set from Python)


def _progress(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, unit="utt", disable=not enabled, file=sys.stderr)


_KEYWORDS = ("graph_lm", "rescore_lm", "device", "spm", "blank")  # the library's words for wfst-decode's options


@command("wfst-decode", options=_KEYWORDS)
def decode_main(argv: list[str] | None = None) -> int:
    defaults = DecoderConfig()
    ap = CliParser(prog="wfst-decode", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graph", help="graph directory (TLG.fst, tokens.txt, words.txt)")
    ap.add_argument("--blank", metavar="SYMBOL",
                    help="the model's blank, where its tokens.txt has none of <blk>, <blank>, <b> (or several)")
    ap.add_argument("--emissions", required=True, help=".npz with log_probs (B, T, V) and lengths (B,)")
    ap.add_argument("--refs", help="reference transcripts, one line per utterance, for the WER")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--beam", type=float, default=defaults.beam,
                    help="prune tokens worse than best + beam (default: %(default)g)")
    ap.add_argument("--max-active", type=int, default=defaults.max_active,
                    help="at most this many tokens a frame (default: %(default)s)")
    ap.add_argument("--min-active", type=int, default=None,
                    help=f"at least this many tokens a frame (default: {MIN_ACTIVE}, or --max-active if fewer)")
    ap.add_argument("--acoustic-scale", type=float, default=defaults.acoustic_scale,
                    help="scale of the log-probabilities against the graph's costs (default: %(default)g)")
    ap.add_argument("--blank-penalty", type=float, default=defaults.blank_penalty,
                    help="cost added to each frame read as blank (default: %(default)g)")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    ap.add_argument("--batch-size", type=int, default=64, help="utterances per decode() call (default: %(default)s)")
    add_frame_ms(ap)
    ap.add_argument("--stream", action="store_true",
                    help="decode as live streams (--batch-size at once), chunk by chunk, printing partial results "
                         "as they change ('stable words | the rest') and endpoints")
    ap.add_argument("--chunk-ms", type=float, default=320.0,
                    help="with --stream: audio per chunk (default: %(default)g)")
    ap.add_argument("--lattice-beam", type=float, default=None,
                    help="keep a word lattice of the arcs on paths within this of the best (as Kaldi prunes "
                         "lattices: a path made of such arcs may cost more); prints each word's confidence")
    ap.add_argument("--confidence-calibration", metavar="FILE", default=None,
                    help="with --lattice-beam: map word confidences by this calibration (JSON, from "
                         "wfst.confidence.Calibration.fit on a dev set)")
    ap.add_argument("--nbest", type=int, default=None,
                    help="with --lattice-beam: print the N best distinct word sequences of each utterance "
                         "(--beam-search: its N best distinct token sequences, whose words may repeat)")
    ap.add_argument("--output", help="also write the hypotheses here, one line per utterance")
    ap.add_argument("--ctm", help="also write each word's time here as CTM lines: utterance, channel 1, start and "
                                  "duration in seconds (--frame-ms per frame), word, and with --lattice-beam its "
                                  "confidence")
    ap.add_argument("--quiet", action="store_true", help="print only the summary")
    ap.add_argument("--phrases", metavar="FILE",
                    help=f"words and phrases to boost, one a line, optionally TAB reward (natural log, > 0 makes it "
                         f"more likely, < 0 less; default {PHRASE_REWARD:g})")
    graph = ap.add_argument_group("the graph search")
    graph.add_argument("--rescore-lm", metavar="ARPA",
                       help="a bigger LM (ARPA file or LM store) whose scores replace the graph LM's on the fly")
    graph.add_argument("--rescore-mode", choices=RESCORE_MODES, default="on_the_fly",
                       help="with --rescore-lm: on_the_fly (the search scores each word with the big LM) or lattice "
                            "(the search keeps word lattices, --lattice-beam, and they are rescored after it)")
    graph.add_argument("--graph-lm", metavar="ARPA",
                       help="with --rescore-lm: the LM the graph was built with (default: the one graph.json names)")
    graph.add_argument("--context-beam", type=float, default=defaults.context_beam,
                       help="with --rescore-lm or --phrases: expand only the tokens within this of the cheapest "
                            "token at their graph state (they differ in their LM history or phrase; default: all, "
                            "exact)")
    graph.add_argument("--token-top-n", type=int, default=defaults.token_top_n,
                       help="FLToP: expand only each frame's N most likely tokens (default: all)")
    graph.add_argument("--token-rel-threshold", type=float, default=defaults.token_rel_threshold,
                       help="FLToP: and only those with a probability at least this times the frame's best")
    beam = ap.add_argument_group("lexicon-free CTC beam search (wfst.CtcBeamDecoder), instead of --graph")
    beam.add_argument("--beam-search", action="store_true", help="decode with the token-level beam search")
    beam.add_argument("--tokens", help="the model's tokens.txt")
    beam.add_argument("--lm", help="a token-level ARPA LM (or LM store) over those tokens")
    beam.add_argument("--beam-size", type=int, default=8, help="prefixes kept a frame (default: %(default)s)")
    beam.add_argument("--lm-weight", type=float, default=0.5,
                      help="weight of the token LM's natural-log cost (default: %(default)g)")
    beam.add_argument("--token-insertion", type=float, default=1.0,
                      help="bonus per token emitted (default: %(default)g)")
    beam.add_argument("--beam-threshold", type=float, default=20.0,
                      help="drop prefixes worse than the best by this (default: %(default)g)")
    beam.add_argument("--spm", help="sentencepiece model that spells phrases into BPE tokens")
    args = ap.parse_args(argv)
    if args.beam_search:
        return _beam_search_main(ap, args)
    if args.graph is None:
        ap.error("the following arguments are required: --graph (or --beam-search with --tokens)")
    for option in ("tokens", "lm", "spm"):
        if getattr(args, option) is not None:
            ap.error(f"argument --{option}: is for --beam-search")
    for option in ("beam_size", "lm_weight", "token_insertion", "beam_threshold"):
        if getattr(args, option) != ap.get_default(option):  # silently ignored otherwise
            ap.error(f"argument --{option.replace('_', '-')}: is for --beam-search, not the graph search")
    if args.rescore_mode != ap.get_default("rescore_mode") and args.rescore_lm is None:
        ap.error("argument --rescore-mode: says how --rescore-lm rescores; give --rescore-lm too")
    if args.rescore_mode == "lattice" and args.lattice_beam is None:
        ap.error("argument --rescore-mode: lattice rescores the search's word lattices; give --lattice-beam too "
                 "(e.g. 8)")
    if args.graph_lm is not None and args.rescore_lm is None:
        ap.error("argument --graph-lm: names the graph's LM for --rescore-lm; give --rescore-lm too")
    if args.context_beam is not None and args.rescore_lm is None and args.phrases is None:
        ap.error("argument --context-beam: prunes the contexts of --rescore-lm or --phrases; give one of them")
    if args.chunk_ms != ap.get_default("chunk_ms") and not args.stream:
        ap.error("argument --chunk-ms: is the chunk of --stream; give --stream too")
    if args.confidence_calibration is not None and args.lattice_beam is None:
        ap.error("argument --confidence-calibration: confidences come from the lattice; give --lattice-beam too")
    try:
        config = DecoderConfig(beam=args.beam, max_active=args.max_active, min_active=args.min_active,
                               acoustic_scale=args.acoustic_scale, blank_penalty=args.blank_penalty,
                               num_threads=args.threads, lattice_beam=args.lattice_beam,
                               confidence_calibration=args.confidence_calibration, token_top_n=args.token_top_n,
                               token_rel_threshold=args.token_rel_threshold, context_beam=args.context_beam)
    except OptionError as e:
        ap.error(as_options(str(e).replace("DecoderConfig.", ""), [f.name for f in dataclasses.fields(DecoderConfig)]))
    except WfstError as e:  # an unreadable --confidence-calibration
        ap.error(one_line(e))
    _check_shared(ap, args)
    if args.nbest is not None and args.lattice_beam is None:
        ap.error("argument --nbest: N-best lists come from the lattice; give --lattice-beam too")
    if args.stream and args.lattice_beam is not None and args.device == "cuda":
        ap.error("argument --lattice-beam: streams on --device cuda keep the best path only so far (leave out "
                 "--stream, or stream on the CPU)")
    if args.stream and not (args.chunk_ms >= args.frame_ms and math.isfinite(args.chunk_ms / args.frame_ms)):
        ap.error(f"argument --chunk-ms: must be a finite number of ms, at least one frame ({args.frame_ms:g} ms), "
                 f"got {args.chunk_ms}")
    try:
        return _decode(args, config, phrases=_boosts(args.phrases, PHRASE_REWARD))
    except WfstError as e:  # (the decoder's "pass graph_lm= ..." said with the option)
        return _fail(e)


def _in_vocabulary(decoder: Decoder, phrases: dict[str, float], path: str) -> dict[str, float] | None:
    """The --phrases the graph can boost; the others said once, in the command's words (the
    library's warning names Decoder.stats), and left out of the run and its summary."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        unknown = [w for _, w in boost_tables(phrases, 1, decoder.graph, decoder.config.beam).unknown]
    ignored = set(unknown)
    if unknown:
        shown = ", ".join(map(repr, unknown[:10])) + (" ..." if len(unknown) > 10 else "")
        warnings.warn(f"{len(unknown)} of the {len(phrases)} words or phrases of {path} are not in the graph's "
                      f"vocabulary and are ignored: {shown}")
    known = {w: r for w, r in phrases.items() if w not in ignored}
    return known or None


def _boosts(path, reward: float) -> dict[str, float] | None:
    """A --phrases file: word or phrase -> reward (`reward` where a line gives none)."""
    if path is None:
        return None
    boosts, first = {}, {}
    for no, line in enumerate(read_lines(Path(path), "phrases"), 1):
        phrase, _, given = line.partition("\t")
        phrase = " ".join(split_fields(phrase))
        if not phrase:
            if given.strip():  # (a reward for nothing: a tab too many, or the phrase lost)
                raise InputFileError(path, no, f"a reward ({given.strip()}) but no word or phrase before it")
            continue
        if phrase in first:  # (which reward was meant cannot be told)
            raise InputFileError(path, no, f"{phrase!r} is listed again (first on line {first[phrase]})")
        first[phrase] = no
        if given.strip() and not _DECIMAL.fullmatch(given.strip()):  # (float() took "1_0" as 10, and "٣")
            raise InputFileError(path, no, f"reward {given!r} is not a number")
        try:
            boosts[phrase] = check_reward(float(given), repr(phrase)) if given.strip() else reward
        except BoostError as e:  # (NaN, inf, beyond ±10,000: said of the line, not of "utterance 0")
            raise InputFileError(path, no, str(e)) from None
    return boosts


def _beam_search_main(ap, args) -> int:
    """wfst-decode --beam-search: the options that make sense there, then _decode."""
    if args.graph is not None:
        ap.error("argument --graph: --beam-search decodes without a graph (give --tokens and --lm)")
    if args.tokens is None:
        ap.error("argument --beam-search: needs --tokens")
    for option, given in (("--stream", args.stream), ("--lattice-beam", args.lattice_beam is not None)):
        if given:
            ap.error(f"argument {option}: not available with --beam-search yet")
    for option in ("beam", "max_active", "min_active", "acoustic_scale", "blank_penalty", "confidence_calibration",
                   "rescore_lm", "rescore_mode", "graph_lm", "token_top_n", "token_rel_threshold", "context_beam"):
        if getattr(args, option) != ap.get_default(option):  # silently ignored otherwise
            ap.error(f"argument --{option.replace('_', '-')}: is for the graph search, not --beam-search")
    if args.threads is not None and args.threads < 1:
        ap.error(f"argument --threads: must be >= 1, got {args.threads}")
    _check_shared(ap, args)
    from .beam_search import CtcBeamDecoder

    try:
        decoder = CtcBeamDecoder(args.tokens, args.lm, beam_size=args.beam_size, lm_weight=args.lm_weight,
                                 token_insertion=args.token_insertion, beam_threshold=args.beam_threshold,
                                 spm=args.spm, num_threads=args.threads, device=args.device, blank=args.blank)
    except OptionError as e:
        ap.error(as_options(str(e), ["beam_size", "lm_weight", "token_insertion", "beam_threshold", "spm",
                                      "num_threads", "device"]))
    except WfstError as e:
        return _fail(e)
    try:
        return _decode(args, None, decoder, _boosts(args.phrases, decoder.phrase_reward))
    except WfstError as e:
        return _fail(e)


def _fail(e: WfstError) -> int:
    """fail(), the library's keyword arguments said as the options ("device='cpu'" as "--device='cpu'")."""
    print(f"wfst-decode: error: {as_options(one_line(e), list(_KEYWORDS))}", file=sys.stderr)
    return 2


def as_options(message: str, names: list[str]) -> str:
    """A library error about keyword arguments, said with the command's option names
    ("beam_size=0: must be ..." -> "argument --beam-size=0: must be ...")."""
    # a name of one word ("beam") only where it is set ("beam=16"): elsewhere it is the word
    # (the lattice's "a smaller beam" read "a smaller --beam")
    named = "|".join(re.escape(n) + (r"\b" if "_" in n else r"(?==)") for n in sorted(names, key=len, reverse=True))
    message = re.sub(r"\b(" + named + ")", lambda m: "--" + ("threads" if m[1] == "num_threads" else
                                                              m[1].replace("_", "-")), message)
    message = re.sub(r"\bNone(?: \([^)]*\))? or ", "", message)  # (no option value is None: leave it out)
    message = re.sub(r"(--[\w-]+)= ", r"\1 ", message)  # ("pass graph_lm= the file": "pass --graph-lm the file")
    return "argument " + message if message.startswith("--") else message


def add_frame_ms(ap) -> None:
    """The --frame-ms option (checked by check_frame_ms)."""
    ap.add_argument("--frame-ms", type=float, default=1000 * FRAME_SECONDS,
                    help="audio per frame, for RTFx and times (default: %(default)g)")


def check_frame_ms(ap, frame_ms: float) -> None:
    if not (MIN_FRAME_MS <= frame_ms <= MAX_FRAME_MS):
        ap.error(f"argument --frame-ms: must be a number of milliseconds in [{MIN_FRAME_MS:g}, {MAX_FRAME_MS:g}], "
                 f"got {frame_ms}")


def _check_shared(ap, args) -> None:
    """The options both searches read, and that --output and --ctm can be written (before
    decoding, not after)."""
    if args.nbest is not None and args.nbest < 1:
        ap.error(f"argument --nbest: must be >= 1, got {args.nbest}")
    if args.batch_size < 1:
        ap.error(f"argument --batch-size: must be >= 1, got {args.batch_size}")
    check_frame_ms(ap, args.frame_ms)
    for option, path in (("--output", args.output), ("--ctm", args.ctm)):
        if path is not None and (not path or path == "-" or path.endswith(("/", os.sep))):
            ap.error(f"argument {option}: {path!r} names no file" + (" (the results go to standard output as "
                     "well; name a file)" if path == "-" else " (an unset variable?)" if not path else
                     " but a folder; name a file in it"))
    outputs = [(option, path) for option, path in (("--output", args.output), ("--ctm", args.ctm)) if path]
    for option, path in outputs:
        problem = why_unwritable(path)
        if problem:
            ap.error(f"argument {option}: cannot write {path}: {problem}")
    inputs = [("--emissions", args.emissions), ("--refs", args.refs), ("--phrases", args.phrases),
              ("--confidence-calibration", args.confidence_calibration), ("--lm", args.lm),
              ("--rescore-lm", args.rescore_lm), ("--graph-lm", args.graph_lm)]
    for i, (option, path) in enumerate(outputs):  # (written over, an input would be lost, or an output)
        for other, given in inputs + outputs[:i]:
            if given and _same_file(path, given):
                ap.error(f"argument {option}: {path} is the {other} file; write it elsewhere")
        graph = getattr(args, "graph", None)
        if graph and (_same_file(path, graph) or _same_file(Path(path).resolve().parent, graph)):  # (a link too)
            ap.error(f"argument {option}: {path} is in the --graph directory, whose files it would replace; write "
                     f"it elsewhere")


def _same_file(a, b) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # (one of them is not there yet: the same path, then)
        return os.path.abspath(a) == os.path.abspath(b)


def _decode(args, config: DecoderConfig | None, beam_decoder=None, phrases=None) -> int:
    em = load_npz(args.emissions)
    refs = None
    if args.refs:
        refs = read_lines(Path(args.refs), "references")
        if len(refs) != len(em.lengths):
            raise InputFileError(args.refs, None, f"{len(refs)} lines but {args.emissions} has "
                                                  f"{len(em.lengths)} utterances")
    elif em.texts is not None:
        refs = list(em.texts)
    decoder = beam_decoder or Decoder(load_graph(args.graph, blank=args.blank), config, device=args.device,
                                      rescore_lm=args.rescore_lm, graph_lm=args.graph_lm,
                                      rescore_mode=args.rescore_mode)
    if phrases and beam_decoder is None:
        phrases = _in_vocabulary(decoder, phrases, args.phrases)
    if args.ctm and beam_decoder is None:
        from .align import word_aligner

        word_aligner(decoder.graph)  # a graph without what word times need: said now, not after decoding
    _check_emissions(args.emissions, em, (beam_decoder.tokens if beam_decoder else decoder.graph.tokens).num_columns)
    clock = _Clock()
    results, stream_tokens = [], 0.0
    B = len(em.lengths)
    with _progress(B, B > args.batch_size and not args.stream and not args.quiet) as bar, \
            warnings.catch_warnings():
        # said for the whole file, by its utterances' numbers (_check_emissions, no_path below), not
        # by their places in a batch or among the live streams
        warnings.filterwarnings("ignore", category=LogProbsWarning)
        warnings.filterwarnings("ignore", message=r"\d+ (utterance|stream)\(s\) have no path through")
        for lo in range(0, B, args.batch_size):
            hi = min(lo + args.batch_size, B)
            if args.stream:
                found, stream_tokens = _streams(decoder, em, lo, hi, args, clock, phrases)
                results += found
                continue
            T = int(em.lengths[lo:hi].max(initial=0))
            batch = np.ascontiguousarray(em.log_probs[lo:hi, :T])
            with clock():
                if beam_decoder is not None:
                    results += decoder.decode(batch, em.lengths[lo:hi], phrases=phrases)
                else:
                    results += decoder.decode(batch, em.lengths[lo:hi], boost=phrases, nbest=args.nbest)
            bar.update(hi - lo)
    with _ids_in_warnings(em):
        no_path(results, "utterance", em.log_probs)
    seconds = clock.seconds
    # the files first: a reader of stdout that stops early (| head) cut the run before them
    if args.output:
        write_text_atomic(args.output, "".join(r.text + "\n" for r in results))
    if args.ctm:
        scored = args.lattice_beam is not None
        write_text_atomic(args.ctm, "".join(ctm_lines(em.key(i), r, args.frame_ms / 1000, scored)
                                            for i, r in enumerate(results)))
    if args.stream and not args.quiet:
        print("\nfinal:")
    if not args.quiet:
        for i, r in enumerate(results):
            print(f"{em.key(i)}\t{r.text}" + ("" if r.reached_final else "\t(no final state reached)"))
            if r.lattice is not None:
                print("\tconfidences " + " ".join(f"{w}:{c:.2f}" for w, c in zip(r.words, r.word_confidences)))
            for k, e in enumerate(r.nbest[:args.nbest or 0]):
                print(f"\t{k + 1}. {e.cost:.3f}\t{e.text}")
    frames = int(em.lengths.sum())
    label = " (SYNTHETIC emissions)" if em.synthetic else ""
    search = (f"beam search: beam_size={args.beam_size}, lm_weight={args.lm_weight}" if beam_decoder is not None
              else f"beam={args.beam}, max_active={args.max_active}")
    if args.rescore_lm is not None:
        search += (f", rescored on the fly with {args.rescore_lm}" if args.rescore_mode == "on_the_fly" else
                   f", lattices rescored with {args.rescore_lm}")
    if args.token_top_n is not None or args.token_rel_threshold:
        search += f", FLToP top_n={args.token_top_n}, rel_threshold={args.token_rel_threshold:g}"
    if phrases:
        search += f", {len(phrases)} boosted words or phrases"
    if args.context_beam is not None:
        search += f", context_beam={args.context_beam:g}"
    gap = "" if args.quiet else "\n"
    print(f"{gap}{B} utterances, {frames} frames ({frames * args.frame_ms / 1000:.1f} s of audio at "
          f"{args.frame_ms:g} ms/frame){label}; device={args.device}, {search}")
    if refs is not None:
        print(word_errors(refs, [r.words for r in results]))
    if args.stream:
        step = _chunk_frames(args)
        plural = "s" if step != 1 else ""
        print(f"streams of {step} frame{plural} ({step * args.frame_ms:g} ms) a chunk, {args.batch_size} at a time")
    per_frame = stream_tokens if args.stream else decoder.stats.tokens_per_frame  # (finish() searches no frame)
    tokens = "" if beam_decoder is not None else f", {per_frame:.0f} tokens/frame (last batch)"
    print(f"decode {seconds:.3f} s, RTFx {rtfx(frames, seconds, args.frame_ms / 1000):.1f}, "
          f"{frames / seconds if seconds else 0:.0f} frames/s{tokens}")
    if clock.compiling > 0.5:
        print(f"(and {clock.compiling:.1f} s compiling the search for these options, not counted above: once, then "
              f"cached)")
    return 0


def _check_emissions(path, em, num_columns: int) -> None:
    """The whole file's log-probs, before any batch: its errors and its warning name the file's
    utterance and frame (a batch's check named the utterance's place in the batch)."""
    try:
        with _ids_in_warnings(em):
            lengths = check_batch(em.log_probs, em.lengths, num_columns)
            check_log_probs(input_faults(np, em.log_probs, lengths), em.log_probs, lengths)
    except DecodeInputError as e:
        raise InputFileError(path, None, _with_ids(em, str(e))) from None


def _with_ids(em, text: str) -> str:
    """A message that names the file's utterances by number ("utterance 3", "utterance 3, 5"),
    with their ids where the file has them, as the output lines name them ("utterance 3 (utt3)")."""
    if em.utt_ids is None:
        return text
    return re.sub(r"\butterance (\d+(?:, \d+)*)", lambda m: "utterance " + ", ".join(
        f"{b} ({em.key(int(b))})" for b in m[1].split(", ")), text)


@contextlib.contextmanager
def _ids_in_warnings(em):
    """The block's warnings said again with _with_ids."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        warnings.warn(_with_ids(em, str(w.message)), w.category)


class _Clock:
    """Wall seconds of the blocks it times (`with clock():`) without what Numba spent
    compiling in them (`compiling`): a first run with new options compiles parts of the
    search, seconds that are not decoding (Numba caches the code for later runs)."""

    def __init__(self):
        self.seconds = self.compiling = 0.0

    @contextlib.contextmanager
    def __call__(self):
        events = [sys.modules[name] for name in ("numba.core.event", "numba.cuda.core.event") if name in sys.modules]
        with contextlib.ExitStack() as stack:
            records = [stack.enter_context(e.install_recorder("numba:compile")) for e in events]
            start = time.perf_counter()
            yield
            took = time.perf_counter() - start
        spent, depth, since = 0.0, 0, 0.0  # the time under at least one compile event (they nest)
        for t, e in sorted((m for r in records for m in r.buffer), key=lambda m: m[0]):
            if e.is_start:
                since = t if depth == 0 else since
                depth += 1
            else:
                depth -= 1
                spent += t - since if depth == 0 else 0.0
        spent = min(spent, took)
        self.seconds += took - spent
        self.compiling += spent


def _chunk_frames(args) -> int:
    """The frames of a --chunk-ms chunk: the nearest whole number (at least one)."""
    return max(1, int(args.chunk_ms / args.frame_ms + 0.5))  # (round() would take 2.5 to 2)


def ctm_lines(key: str, result, frame_seconds: float, with_confidence: bool = False) -> str:
    """The CTM lines of one result: ``key 1 start duration word [confidence]``.  With
    confidences every line has one (a CTM's columns are the file's, not the line's): a
    result whose tokens all died has no lattice, and its words, a path that reads only
    part of the utterance, get 0."""
    confidences = None
    if with_confidence:
        confidences = result.word_confidences if result.lattice is not None else (0.0,) * len(result.words)
    lines = []
    digits = 3  # ms, or as many more as one frame needs to last more than 0
    while frame_seconds * 10 ** digits < 1:
        digits += 1
    if len(result.word_times) != len(result.words):  # (zip would drop the words after the shorter)
        raise WfstError(f"internal error: utterance {key} has {len(result.words)} words but "
                        f"{len(result.word_times)} word times")
    for k, (word, (start, end)) in enumerate(zip(result.words, result.word_times)):
        # start and end rounded, the duration their difference: a word ends at or before the next starts
        begin, finish = round(start * frame_seconds, digits), round((end + 1) * frame_seconds, digits)
        line = f"{key} 1 {begin:.{digits}f} {finish - begin:.{digits}f} {word}"
        lines.append(line + (f" {confidences[k]:.4f}" if confidences is not None else "") + "\n")
    return "".join(lines)


def _streams(decoder: Decoder, em, lo: int, hi: int, args, clock: _Clock, boost=None):
    """Utterances lo..hi as concurrent streams fed chunk by chunk (each boosted by
    `boost`), advance and finish timed by `clock`: (results, tokens that survived pruning
    per frame).  Prints each stream's partial result when it changes."""
    step = _chunk_frames(args)
    lengths = [int(n) for n in em.lengths[lo:hi]]
    endpoint = EndpointConfig(frame_seconds=args.frame_ms / 1000)  # (its rules are in seconds)
    streams = [decoder.stream(boost, endpoint=endpoint) for _ in lengths]
    shown: dict[int, str] = {}
    survivors = 0.0
    for pos in range(0, max(lengths, default=0), step):
        live = [i for i, n in enumerate(lengths) if n > pos]
        chunks = em.log_probs[lo:hi][live, pos:pos + step]  # (N, T, V), as a batched model gives them
        frames = np.minimum(np.array(lengths)[live] - pos, step)
        with clock():
            decoder.advance([streams[i] for i in live], chunks, frames)
        survivors += decoder.stats.tokens_per_frame * decoder.stats.frames
        if args.quiet:
            continue
        for i, p in zip(live, decoder.partials([streams[i] for i in live])):
            s = streams[i]
            text = " ".join(p.words[:p.stable]) + " | " + " ".join(p.words[p.stable:])
            text += "  (endpoint)" if s.endpoint else ""
            if shown.get(i) != text:
                shown[i] = text
                say(f"{em.key(lo + i)}\t{s.frames * args.frame_ms / 1000:6.2f} s\t{text}")
    with clock():
        results = decoder.finish(streams, nbest=args.nbest)
    return results, survivors / max(sum(lengths), 1)


if __name__ == "__main__":
    sys.exit(decode_main())
