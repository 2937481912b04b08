"""Every deliberate error is a WfstError and also the builtin it stands for, with a message that says what to fix."""
import dataclasses

import pytest
from wfst.graphs import GraphBuildError

from wfst import errors
from wfst.lm import LmStoreError, VocabularyError, _small_states, read_arpa
from wfst.scoring import word_errors


@pytest.mark.parametrize("cls,builtin", [
    (errors.OptionError, ValueError),
    (errors.InputFileError, ValueError),
    (errors.GraphFormatError, ValueError),
    (errors.MissingFileError, FileNotFoundError),
    (errors.OutputFileError, OSError),
    (GraphBuildError, RuntimeError),
    (VocabularyError, ValueError),
    (LmStoreError, Exception),
])
def test_error_classes_are_wfst_errors_and_builtins(cls, builtin):
    assert issubclass(cls, errors.WfstError) and issubclass(cls, builtin)


def _all_errors():
    import wfst.arpa  # noqa: F401  (its CountMismatch)

    found, todo = [], [errors.WfstError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo += cls.__subclasses__()
    return found


def test_every_error_comes_back_from_a_worker_process(tmp_path):
    """Errors cross process boundaries (multiprocessing pickles them): those whose constructor
    composes the message came back as a TypeError in the parent, whose pool then hung."""
    import concurrent.futures
    import multiprocessing
    import pickle

    made = {errors.InputFileError: ("lm.arpa", 3, "bad line"), errors.MissingFileError: ("g", "graph"),
            errors.OutputFileError: ("out", "graph directory", "Permission denied")}
    for cls in _all_errors():
        parts = next((v for k, v in made.items() if issubclass(cls, k)), ("a message",))
        e = cls(*parts)
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is cls and str(back) == str(e) and getattr(back, "path", None) == getattr(e, "path", None)
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        with pytest.raises(errors.MissingFileError, match=r"cannot read graph directory .*no_graph: not found"):
            pool.submit(wfst_load_graph, tmp_path / "no_graph").result(timeout=60)
        assert pool.submit(int, "7").result(timeout=60) == 7  # (the pool still works)


def wfst_load_graph(path):
    import wfst

    return wfst.load_graph(path)


def test_file_errors_keep_the_path():
    e = errors.OutputFileError("out/g", "graph directory", "Permission denied")
    assert str(e) == "cannot write graph directory out/g: Permission denied" and e.path == "out/g"
    e = errors.InputFileError("lm.arpa", 3, "bad line")
    assert str(e) == "lm.arpa:3: bad line" and (e.path, e.line) == ("lm.arpa", 3)


def test_word_errors_needs_one_hypothesis_per_reference():
    assert word_errors(["a b"], ["a c"]).errors == 1
    with pytest.raises(errors.OptionError, match="2 references but 1 hypotheses: give one hypothesis per reference"):
        word_errors(["a", "b"], ["a"])


def test_unreachable_lm_state_is_a_damaged_store(tiny):
    store = read_arpa(tiny / "lm.arpa")
    depth = store.depth.copy()
    depth[-1] = 99  # no arc grows a history into the last state
    damaged = dataclasses.replace(store, depth=depth)
    with pytest.raises(LmStoreError, match=r"the LM store made from .*lm.arpa is damaged: an LM state cannot be "
                                           r"reached from the root; prepare it again"):
        _small_states(damaged, store, store.ids_of(damaged.words))


def test_a_text_output_that_cannot_be_written_names_the_file(tmp_path):
    """Results written after a long decode: an OSError there (a full disk, a path that became a
    directory) is an OutputFileError naming the file, which the CLIs print in one line."""
    from wfst.files import write_text_atomic

    (tmp_path / "taken").mkdir()
    for path in (tmp_path / "missing" / "out.txt", tmp_path / "taken"):
        with pytest.raises(errors.OutputFileError, match=f"cannot write file {path}: "):
            write_text_atomic(path, "x\n")


# --------------------------------------------------------------------------- the public API given wrong things

@pytest.fixture
def tiny_lattice_graph(tiny):
    from wfst.graphs import compile_graph

    import wfst

    r = compile_graph(tiny / "g", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=tiny / "lexicon.txt",
                      word_boundary="|", topology="compact", progress=False)
    return wfst.load_graph(r.directory)


@pytest.mark.parametrize("call", ["TokenTable.read", "WordTable.read", "load_graph", "load_npz", "Calibration.load",
                                  "read_arpa"])
@pytest.mark.parametrize("path", ["fd", None, ""])
def test_a_path_that_is_not_one_is_refused_and_no_descriptor_is_closed(call, path, tmp_path):
    """An int was opened as a file descriptor and closed after reading (True: stdout's); None
    raised a TypeError; "" meant the current directory."""
    import os

    import wfst
    from wfst.confidence import Calibration

    fn = {"TokenTable.read": wfst.TokenTable.read, "WordTable.read": wfst.WordTable.read,
          "load_graph": wfst.load_graph, "load_npz": wfst.synthetic.load_npz, "Calibration.load": Calibration.load,
          "read_arpa": read_arpa}[call]
    (tmp_path / "f.txt").write_text("<blk> 0\na 1\n")
    fd = os.open(tmp_path / "f.txt", os.O_RDONLY)  # (our own descriptor: a regression closes it, not stdout)
    try:
        with pytest.raises(errors.OptionError, match=r"must be a path \(a str or os.PathLike\); got "):
            fn(fd if path == "fd" else path)
        os.fstat(fd)  # still open
    finally:
        os.close(fd)


def test_rescorer_path_cost_refuses_ids_outside_the_graph(tiny, tiny_lattice_graph):
    """99 read past the word maps (garbage), -5 wrapped around, 2**40 crashed the process."""
    from wfst.lm import Rescorer, open_lm

    lm = open_lm(tiny / "lm.arpa")
    g = tiny_lattice_graph
    r = Rescorer(lm, lm, g.words, g.olabel)
    assert r.path_cost([]) == 0.0 and r.path_cost([g.words.ids()["ab"]]) == pytest.approx(0.0, abs=1e-5)
    for ids, what in (([99], r"word_ids: 99 is not a word id of the graph \(0 to "), ([-5], "word_ids: -5 is not"),
                      ([2**40], "is not a word id"), ([3.5], "must be a sequence of graph word ids"),
                      ("ab", "must be a sequence")):
        with pytest.raises(errors.OptionError, match=what):
            r.path_cost(ids)
    with pytest.raises(errors.OptionError, match=r"score: the sentence must be a sequence of words"):
        lm.score("ab ba")  # (scored each character: 5 words)


@pytest.mark.parametrize("option,value,message", [
    ("max_active", 2**63, r"max_active=9223372036854775808: must be below 2\*\*31"),  # (OverflowError in the backend)
    ("acoustic_scale", 1e-300, r"acoustic_scale=1e-300: must be a finite number > 0 in float32"),  # (0 there)
    ("blank_penalty", -1e38, r"blank_penalty=-1e\+38: must be a finite number of at most 10000 in size"),
    ("lattice_beam", 1e39, r"lattice_beam=1e\+39: must be"),
    ("beam", 1e-60, r"beam=1e-60: must be a finite number > 0 in float32"),
])
def test_decoder_config_refuses_what_its_float32_and_int32_cannot_hold(option, value, message):
    import wfst

    with pytest.raises(errors.OptionError, match=message):
        wfst.DecoderConfig(**{option: value})


def test_decoder_config_takes_numpy_scalars_as_python_numbers(tiny_lattice_graph):
    """An np.int8 min_active overflowed deep in the backend (1750 out of bounds for int8)."""
    import numpy as np

    import wfst

    c = wfst.DecoderConfig(min_active=np.int8(3), max_active=np.int64(50), beam=np.float32(12.0))
    assert type(c.min_active) is int and type(c.max_active) is int and type(c.beam) is float
    wfst.Decoder(tiny_lattice_graph, c).decode(np.zeros((1, 3, 5), np.float32) - 1.6)


def test_lattice_questions_refuse_what_is_not_theirs(tiny_lattice_graph):
    """Another utterance's result read in this lattice gave (0.0,); bytes were word ids 97, 98, ...
    and floats word errors."""
    import numpy as np

    import wfst
    from wfst.confidence import Calibration

    x = np.log(np.random.default_rng(0).dirichlet(np.full(5, 0.3), size=(2, 12))).astype(np.float32)
    r0, r1 = wfst.Decoder(tiny_lattice_graph, lattice_beam=6.0).decode(x)
    assert len(r0.lattice.word_confidences(r0)) == len(r0.words)
    with pytest.raises(errors.OptionError, match=r"the result is not this lattice's"):
        r0.lattice.word_confidences(r1)
    for reference in (b"ab ba", [3.0, 5.0]):
        with pytest.raises(errors.OptionError, match=r"oracle: "):
            r0.lattice.oracle(reference)
    for l2 in (0, -1.0, float("nan"), "x"):
        with pytest.raises(errors.OptionError, match=r"Calibration.fit: l2=.* must be a finite number > 0"):
            Calibration.fit_posteriors([0.2, 0.9], [False, True], l2=l2)


def test_advance_without_chunks_and_phrases_that_are_no_list_are_said(tiny_lattice_graph):
    import numpy as np

    import wfst
    from wfst.beam_search import CtcBeamDecoder

    dec = wfst.Decoder(tiny_lattice_graph)
    s = dec.stream()
    with pytest.raises(errors.DecodeInputError, match=r"advance\(\): chunks must be a list of \(T, V\) arrays"):
        dec.advance([s], None)
    beam = CtcBeamDecoder(tiny_lattice_graph.tokens, num_threads=1)
    with pytest.raises(errors.BoostError, match=r"phrases must be a list of phrases or a mapping .*; got int"):
        beam.decode(np.zeros((1, 3, 5), np.float32) - 1.6, phrases=5)
