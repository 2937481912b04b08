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
