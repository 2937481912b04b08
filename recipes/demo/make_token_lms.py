#!/usr/bin/env python3
"""Regenerate the demo's token-level LMs for the lexicon-free beam search (wfst.CtcBeamDecoder):

  data/chars_lm.arpa.gz  a 6-gram over the character tokens (chars_tokens.txt, "|" between words)
  data/bpe_lm.arpa.gz    a 4-gram over the BPE pieces (bpe.model, each word encoded on its own)

Both are estimated by KenLM's lmplz (modified Kneser-Ney, no pruning) from data/lm_train.txt
spelled into tokens exactly as wfst.synthetic.tokenize spells text for the decoders.  lmplz is
built once by lmplz.sh (see there for the packages it needs).  Rebuilding gives the same files.
"""
from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
sys.path.insert(0, str(HERE.parent.parent))

from wfst import TokenTable  # noqa: E402
from wfst.synthetic import tokenize  # noqa: E402

LMS = (("chars_lm.arpa.gz", "chars_tokens.txt", 6, dict(word_boundary="|")),
       ("bpe_lm.arpa.gz", "bpe_tokens.txt", 4, dict(spm=str(DATA / "bpe.model"))))


def main() -> int:
    lmplz = subprocess.run([str(HERE / "lmplz.sh")], check=True, capture_output=True, text=True).stdout.strip()
    lines = [line for line in (DATA / "lm_train.txt").read_text().splitlines() if line.strip()]
    for out, table, order, spelling in LMS:
        tokens = TokenTable.read(DATA / table)
        with tempfile.TemporaryDirectory() as tmp:
            text, arpa = Path(tmp) / "text.txt", Path(tmp) / "lm.arpa"
            text.write_text("".join(" ".join(tokens.symbols[c] for c in tokenize(line, tokens, **spelling)) + "\n"
                                    for line in lines))
            subprocess.run([lmplz, "-o", str(order), "--discount_fallback", "--text", str(text), "--arpa", str(arpa),
                            "-S", "20%", "-T", tmp], check=True, stderr=subprocess.DEVNULL)
            with open(arpa, "rb") as src, gzip.GzipFile(DATA / out, "wb", mtime=0) as dst:
                shutil.copyfileobj(src, dst)
        print(f"{out}: order {order}, {(DATA / out).stat().st_size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
