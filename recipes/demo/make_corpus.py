#!/usr/bin/env python3
"""Make the demo text corpus from Project Gutenberg's "Pride and Prejudice" (eBook #1342).

    python recipes/demo/make_corpus.py path/to/1342-0.txt

Keeps the novel's text (Chapter I to THE END; Saintsbury's preface, the list of
illustrations, illustration captions and chapter headings are dropped), splits it into
sentences (at . ! ? unless a lowercase word follows or the word is Mr., Mrs. or St.),
normalises them (lowercase, letters a-z and apostrophe, single spaces; at least 3 words)
and writes data/lm_train.txt, data/dev.txt and data/test.txt:
sentence i goes to test if i % 20 == 0, to dev if i % 20 == 1, else to train.
"""
import re
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"


def novel_text(raw: str) -> str:
    start = re.search(r"^\s*Chapter I\.\]\s*$", raw, flags=re.M)  # end of the first chapter heading
    end = raw.rfind("[Illustration:\n\n                                  THE\n                                  END")
    if not start or end < 0:
        raise SystemExit("this does not look like Project Gutenberg's 1342-0.txt")
    text = raw[start.end():end]
    text = re.sub(r"\[Illustration:.*?\]", " ", text, flags=re.S)  # captions
    text = re.sub(r"^\s*CHAPTER [IVXLC]+\.?\s*$", " ", text, flags=re.M)  # headings
    return text


def sentences(text: str):
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("_", "")
    text = re.sub(r"\s+", " ", text)
    # "Mr. Darcy", "Mrs. Bennet", "St. James's": these periods end no sentence.
    text = re.sub(r"\b(Mr|Mrs|St)\.", r"\1", text)
    for chunk in re.split(r"(?<=[.!?])[\"\u201d']?\s+(?![a-z])", text):
        s = re.sub(r"[^a-z' ]", " ", chunk.lower().replace("--", " "))
        words = [w.strip("'") for w in s.split()]
        words = [w for w in words if w]
        if len(words) >= 3:
            yield " ".join(words)


def main():
    raw = Path(sys.argv[1]).read_text(encoding="utf-8")
    sents = list(sentences(novel_text(raw)))
    splits = {"test": [], "dev": [], "lm_train": []}
    for i, s in enumerate(sents):
        splits["test" if i % 20 == 0 else "dev" if i % 20 == 1 else "lm_train"].append(s)
    DATA.mkdir(exist_ok=True)
    for name, lines in splits.items():
        (DATA / f"{name}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        words = [w for s in lines for w in s.split()]
        print(f"{name}: {len(lines)} sentences, {len(words)} words, {len(set(words))} distinct")


if __name__ == "__main__":
    main()
