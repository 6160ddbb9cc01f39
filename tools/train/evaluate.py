#!/usr/bin/python3
"""evaluate.py - held-out figures of a training checkpoint, on (almost) the whole held-out set.

  evaluate.py RUN_DIR/ckpt.pt DATA_DIR [--windows N] [--seq 128]

Prints JSON: held-out next-token loss / perplexity of the trunk, MTP loss, trunk top-1 and MTP
top-1 accuracy (teacher forcing: MTP row p = (x_p, h_{p-1}) predicts x_{p+1}; rows p >= 1 only),
over N windows of seq+1 tokens spread evenly over DATA_DIR/heldout.u16 (default: as many
non-overlapping windows as fit, i.e. every held-out token is scored once).
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Qwen35MTP  # noqa: E402
from train import evaluate  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ckpt")
    ap.add_argument("data")
    ap.add_argument("--windows", type=int, default=0)
    ap.add_argument("--seq", type=int, default=128)
    a = ap.parse_args()
    torch.set_num_threads(1)
    st = torch.load(a.ckpt)
    m = Qwen35MTP(st["config"])
    m.load_state_dict(st["model"])
    held = np.fromfile(os.path.join(a.data, "heldout.u16"), dtype=np.uint16)
    n = a.windows or (len(held) - 1) // a.seq
    ev = evaluate(m, held, a.seq, n)
    ev["step"] = st["step"]
    ev["windows"] = n
    print(json.dumps(ev, indent=1))


if __name__ == "__main__":
    main()
