#!/usr/bin/python3
"""prepare.py - tokenise the corpus for training.

  prepare.py CORPUS_DIR TOK_DIR DATA_DIR
reads CORPUS_DIR/train.txt, heldout.txt (corpus.py), encodes them with the BPE of TOK_DIR (bpe.py;
the document separator line "<|endoftext|>" becomes the special token) and writes DATA_DIR/train.u16,
heldout.u16 (little-endian uint16 ids) and copies the tokenizer files next to them.
"""
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bpe import Encoder  # noqa: E402


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    corpus, tok, out = sys.argv[1:]
    os.makedirs(out, exist_ok=True)
    enc = Encoder(tok)
    for name in ("train", "heldout"):
        with open(os.path.join(corpus, name + ".txt"), encoding="utf-8") as f:
            ids = enc.encode(f.read())
        np.asarray(ids, dtype="<u2").tofile(os.path.join(out, name + ".u16"))
        print(f"prepare: {name}: {len(ids)} tokens", flush=True)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok, fn), os.path.join(out, fn))


if __name__ == "__main__":
    main()
