#!/usr/bin/python3
"""fixtures.py - test fixtures for the shipped demo model, computed by the independent references.

  fixtures.py HF_DIR DATA_DIR OUT_DIR [--prompts 200] [--greedy 4] [--greedy-len 20]

Writes into OUT_DIR:
  prompts.txt   --prompts lines of comma-separated token ids, 8..32 tokens each, cut from the held-out
                token stream (DATA_DIR/heldout.u16) at evenly spaced offsets (tests: spec == plain)
  greedy.txt    for the first --greedy prompts: "PROMPT_IDS<TAB>CONTINUATION_IDS", the greedy
                continuation computed by tools/reference/qwen35_ref.py (float64, full recompute at
                every step) on the HF checkpoint HF_DIR (tests: nextn's greedy output == the reference)
  tokenize.txt  a held-out text sample; tokenize.ids: its ids from tools/train/bpe.py's encoder
                (tests: nextn's C tokenizer == this independent Python BPE)
"""
import argparse
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
from bpe import Encoder  # noqa: E402
from qwen35_ref import Qwen35Ref  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("hf_dir")
    ap.add_argument("data_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--greedy", type=int, default=4)
    ap.add_argument("--greedy-len", type=int, default=20)
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    held = np.fromfile(os.path.join(a.data_dir, "heldout.u16"), dtype="<u2").astype(np.int64)
    rng = np.random.default_rng(7)
    stride = (len(held) - 40) // a.prompts
    prompts = []
    for i in range(a.prompts):
        n = int(rng.integers(8, 33))
        prompts.append([int(t) for t in held[i * stride:i * stride + n]])
    with open(os.path.join(a.out_dir, "prompts.txt"), "w") as f:
        f.write("".join(",".join(map(str, p)) + "\n" for p in prompts))
    ref = Qwen35Ref(a.hf_dir)
    with open(os.path.join(a.out_dir, "greedy.txt"), "w") as f:
        for p in prompts[:a.greedy]:
            toks = list(p)
            for _ in range(a.greedy_len):
                logits, _ = ref.forward(toks)
                toks.append(int(torch.argmax(logits[-1])))
            f.write(",".join(map(str, p)) + "\t" + ",".join(map(str, toks[len(p):])) + "\n")
            f.flush()
    # the tokenizer sample: the middle of the held-out text (Bible, then code at the end)
    with open(os.path.join(a.data_dir, "..", "corpus", "heldout.txt"), encoding="utf-8") as f:
        text = f.read()
    sample = text[len(text) // 2:len(text) // 2 + 3000] + text[-3000:]
    sample = sample.replace("<|endoftext|>", "")       # nextn tokenize parses specials only on request
    with open(os.path.join(a.out_dir, "tokenize.txt"), "w", encoding="utf-8") as f:
        f.write(sample)
    with open(os.path.join(a.out_dir, "tokenize.ids"), "w") as f:
        f.write("".join(f"{i}\n" for i in Encoder(a.hf_dir).encode(sample)))


if __name__ == "__main__":
    main()
