#!/usr/bin/env python3
"""Regenerate data/bpe.model (+ .vocab) and the two token sets of the demo.

    python recipes/demo/make_bpe.py

bpe.model: sentencepiece BPE, 256 pieces, trained on data/lm_train.txt (one thread, so
the result is reproducible), no <s>/</s> pieces.  bpe_tokens.txt lists its pieces by
id and then <blk> (NeMo-style: blank in the last column).  chars_tokens.txt is a
wav2vec2-style character set: <blk> first, then the word boundary | and ', a..z.
"""
import os
from pathlib import Path

import sentencepiece as spm

DATA = Path(__file__).resolve().parent / "data"


def main():
    # Relative paths: the model records its input and prefix, so absolute ones would
    # make bpe.model depend on where the checkout lives.
    os.chdir(DATA)
    spm.SentencePieceTrainer.train(
        input="lm_train.txt", model_prefix="bpe", vocab_size=256,
        model_type="bpe", character_coverage=1.0, num_threads=1, bos_id=-1, eos_id=-1,
        minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(DATA / "bpe.model"))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    (DATA / "bpe_tokens.txt").write_text("".join(f"{p} {i}\n" for i, p in enumerate(pieces + ["<blk>"])))
    chars = ["<blk>", "|", "'"] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
    (DATA / "chars_tokens.txt").write_text("".join(f"{s} {i}\n" for i, s in enumerate(chars)))
    print(f"{len(pieces)} BPE pieces; e.g. {sp.encode('pride and prejudice', out_type=str)}")


if __name__ == "__main__":
    main()
