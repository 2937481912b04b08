"""Token and word tables: the formats users bring, and the errors they get."""
import pytest

from wfst import InputFileError, MissingFileError, TokenTable, WordTable
from wfst.errors import OptionError
from wfst.symbols import column_of_ilabel, ilabel_of_column


def write(tmp_path, text, name="tokens.txt"):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_label_convention():
    assert ilabel_of_column(0) == 1 and column_of_ilabel(1) == 0


@pytest.mark.parametrize("text", [
    "<blk> 0\na 1\nb 2\n",             # k2/icefall: symbol column
    "<blk>\na\nb\n",                   # one symbol per line
    "<eps> 0\n<blk> 1\na 2\nb 3\n#0 4\n#1 5\n",  # FST input symbol table (riva, ours)
    "b 2\n<blk> 0\na 1\n",             # any order
    "\ufeff<blk> 0\na 1\nb 2\n",       # a byte-order mark (Windows editors): it named no blank
])
def test_formats_agree(tmp_path, text):
    t = TokenTable.read(write(tmp_path, text))
    assert t.symbols == ("<blk>", "a", "b") and t.blank == 0


def test_k2_table_with_disambig_symbols(tmp_path):
    """icefall's lang_bpe tokens.txt ends with #0, #1, ...: they are no logit columns."""
    t = TokenTable.read(write(tmp_path, "<blk> 0\na 1\nb 2\n#0 3\n#1 4\n"))
    assert t.symbols == ("<blk>", "a", "b") and t.blank == 0 and t.num_disambig == 2


def test_fst_table_keeps_disambig_and_round_trips(tmp_path):
    t = TokenTable.read(write(tmp_path, "<eps> 0\na 1\nb 2\n<blk> 3\n#0 4\n#1 5\n"))
    assert t.blank == 2 and t.num_disambig == 2 and t.disambig_ilabel(1) == 5
    t.write(tmp_path / "again.txt")
    assert TokenTable.read(tmp_path / "again.txt") == t


def test_blank_by_name(tmp_path):
    p = write(tmp_path, "a\n_\nb\n")
    assert TokenTable.read(p).blank is None
    assert TokenTable.read(p, blank="_").blank == 1
    with pytest.raises(InputFileError, match="blank symbol 'x' is not in the table"):
        TokenTable.read(p, blank="x")
    with pytest.raises(OptionError, match=r"TokenTable: blank must be a column in \[0, 3\) or None; got 3"):
        TokenTable(("a", "_", "b"), 3)
    assert TokenTable.read(p, blank=2).blank == 2  # a column, as a model's card gives it
    with pytest.raises(InputFileError, match=r"blank column 3 is outside its columns 0..2"):
        TokenTable.read(p, blank=3)


def test_a_table_with_two_blank_names_must_be_told_which(tmp_path):
    """<blk> and <blank> both present: taking the first would decode the other's frames as a
    token (it took <blk>, silently)."""
    p = write(tmp_path, "<blank>\na\n<blk>\n")
    with pytest.raises(InputFileError, match=r"several symbols could be the blank: <blk> \(column 2\), "
                                             r"<blank> \(column 0\); name it with blank=SYMBOL"):
        TokenTable.read(p)
    assert TokenTable.read(p, blank="<blank>").blank == 0 and TokenTable.read(p, blank=2).blank == 2


@pytest.mark.parametrize("text,message", [
    ("<blk> 0\na 1\na 2\n", r"tokens.txt:3: symbol 'a' already on line 2"),
    ("<blk> 0\na 1\nb 1\n", r"tokens.txt:3: id 1 already used on line 2"),
    ("<blk> 0\na 2\n", r"tokens.txt:2: token ids must run from 0 without gaps: id 1 is missing before id 2"),
    ("<eps> 0\n<blk> 1\na 3\n", r"tokens.txt:3: token ids must run from 1 without gaps: id 2 is missing before id 3"),
    ("<blk> 0\na\n", r"tokens.txt:2: some lines have ids and some do not"),
    ("<blk> 0\na x\n", r"tokens.txt:2: id 'x' is not an integer"),
    ("<blk> 0 1\n", r"tokens.txt:1: expected 'symbol \[id\]'"),
    ("<blk> 0\n#0 1\na 2\n", r"tokens.txt:2: a disambiguation symbol among the model's tokens"),
    ("<blk> 0\na 1\n#1 2\n", r"disambiguation symbols must be #0..#0"),
    ("<blk> 0\n<eps> 1\n", r"tokens.txt:2: '<eps>' is reserved"),
    ("\n\n", r"no tokens"),
    ("<blk> 0\na 1_0\n", r"tokens.txt:2: id '1_0' is not an integer"),  # (int() took it: 10)
    ("<blk> 0\na -1\n", r"tokens.txt:2: negative id -1"),
    # an FST table's #k after the tokens (the graph's labels of them: a gap was blamed on the FST)
    ("<eps> 0\n<blk> 1\na 2\nb 3\nc 4\n#0 7\n", r"tokens.txt:6: #0 has id 7; .* whose last id is 4: #0 5"),
])
def test_bad_token_tables(tmp_path, text, message):
    with pytest.raises(InputFileError, match=message):
        TokenTable.read(write(tmp_path, text))


def test_missing_token_file(tmp_path):
    with pytest.raises(MissingFileError, match="cannot read token table .*nope.txt: not found"):
        TokenTable.read(tmp_path / "nope.txt")


def test_word_table(tmp_path):
    w = WordTable.from_words(["b", "a", "<s>", "a"])
    assert w.symbols == ("<eps>", "a", "b", "#0", "<s>", "</s>")
    w.write(tmp_path / "words.txt")
    assert WordTable.read(tmp_path / "words.txt") == w
    with pytest.raises(InputFileError, match="words.txt:2: id 0 already used"):
        WordTable.read(write(tmp_path, "<eps> 0\nx 0\n", "words.txt"))
    with pytest.raises(InputFileError, match="words.txt:3: word 'x' already on line 2"):
        WordTable.read(write(tmp_path, "<eps> 0\nx 1\nx 2\n", "words.txt"))
    with pytest.raises(InputFileError, match="words.txt:2: expected 'word id', got 'x ²'"):  # (a ValueError)
        WordTable.read(write(tmp_path, "<eps> 0\nx ²\n", "words.txt"))


@pytest.mark.parametrize("text,missing", [
    ("<eps> 0\na 1\nc 3\n", "id 2 is missing \\(the largest is 3\\)"),
    ("a 1\nb 2\n", "id 0 is missing"),
    # A typo'd id: refused at once, not a table of two billion entries (load_graph was OOM-killed).
    ("<eps> 0\na 1\nzz 2000000000\n", "id 2 is missing \\(the largest is 2000000000\\)"),
])
def test_word_ids_without_gaps(tmp_path, text, missing):
    """Output labels index the table: a gap would print as an empty word."""
    with pytest.raises(InputFileError, match=f"word ids must run from 0 without gaps; {missing}"):
        WordTable.read(write(tmp_path, text, "words.txt"))


@pytest.mark.parametrize("kw, what", [
    (dict(symbols="abc", blank=0), "must be a tuple of str"),
    (dict(symbols=(), blank=None), "no symbols"),
    (dict(symbols=("a", "a"), blank=0), "symbol 'a' at columns 0 and 1"),
    (dict(symbols=("a b", "c"), blank=0), "column 0's symbol 'a b' is not a str without whitespace"),
    (dict(symbols=("a", 3), blank=0), "column 1's symbol 3"),
    (dict(symbols=("<eps>", "a"), blank=1), "column 0's symbol '<eps>' is reserved"),
    (dict(symbols=("a", "#0"), blank=0), "column 1's symbol '#0' is reserved"),
    (dict(symbols=("a",), blank=True), r"blank must be a column in \[0, 1\) or None; got True"),
    (dict(symbols=("a",), blank=1), "got 1"),
    (dict(symbols=("a",), blank=0, num_disambig=-1), "num_disambig must be an int >= 0"),
])
def test_a_token_table_made_in_code_is_checked_as_a_read_one(kw, what):
    """TokenTable(...) in code gets the checks TokenTable.read gives a file: a duplicate symbol
    decoded as the wrong token, and one with a space wrote a tokens.txt no reader parses."""
    with pytest.raises(OptionError, match=what):
        TokenTable(**kw)


def test_a_token_table_made_in_code_takes_a_list_and_numpy_ints():
    import numpy as np

    t = TokenTable(["<blk>", "\u2581a", "b"], np.int64(0))
    assert t.symbols == ("<blk>", "\u2581a", "b") and t.blank == 0 and type(t.blank) is int
    assert hash(t) == hash(TokenTable(("<blk>", "\u2581a", "b"), 0))


def test_an_icefall_phone_table_s_eps_is_its_blank_when_named(tmp_path):
    """icefall's phone tables write the CTC blank as '<eps> 0': read as an FST symbol table
    every column shifted by one, and --blank '<eps>' said '<eps>' was not in the table."""
    icefall = write(tmp_path, "<eps> 0\n| 1\na 2\nb 3\n#0 4\n#1 5\n")
    t = TokenTable.read(icefall, blank="<eps>")
    assert t == TokenTable(("<blk>", "|", "a", "b"), 0, 2)
    assert TokenTable.read(icefall).symbols == ("|", "a", "b")  # (unnamed: an FST symbol table, as riva's)
    with pytest.raises(InputFileError, match=r"blank='<eps>' names an icefall table's blank, '<eps> 0'; this table "
                                             r"has no such line"):
        TokenTable.read(write(tmp_path, "<blk> 0\na 1\n", "k2.txt"), blank="<eps>")
    with pytest.raises(InputFileError, match=r"the blank would be called <blk>, which the table has already"):
        TokenTable.read(write(tmp_path, "<eps> 0\n<blk> 1\na 2\n", "both.txt"), blank="<eps>")


def test_a_huggingface_vocab_json_is_read_with_its_pad_as_the_blank(tmp_path):
    """wav2vec2's vocab.json was refused as "expected 'symbol [id]'" (it had to be converted by hand)."""
    vocab = write(tmp_path, '{"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, "|": 4, "E": 5, "T": 6}\n', "vocab.json")
    t = TokenTable.read(vocab)
    assert t.symbols == ("<pad>", "<s>", "</s>", "<unk>", "|", "E", "T") and t.blank == 0
    assert TokenTable.read(vocab, blank="|").blank == 4  # (named: as any table)
    assert TokenTable.read(write(tmp_path, '{"a": 1, "<blk>": 0}', "v2.json")).symbols == ("<blk>", "a")
    assert TokenTable.read(write(tmp_path, "<blk>\n{\na\n")).symbols == ("<blk>", "{", "a")  # (a token named {)
    assert TokenTable.read(write(tmp_path, "{\n<blk>\n")).symbols == ("{", "<blk>")
    for text, message in (('{"a": 0, "b": 0}', "symbols 'a' and 'b' both have column 0"),
                          ('{"a": 0, "b": 2}', "token ids must run from 0 without gaps"),
                          ('{"a": "0"}', "map each symbol to its column, an integer >= 0"),
                          ('{"a b": 0}', "symbol 'a b': a token must be non-empty and hold no space"),
                          ('{"a": 0,, }', "not JSON, though it starts with")):
        with pytest.raises(InputFileError, match=message):
            TokenTable.read(write(tmp_path, text, "bad.json"))
