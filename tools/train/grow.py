#!/usr/bin/python3
"""grow.py - a deeper model initialised from a trained checkpoint, computing exactly the same function.

  grow.py OLD_CKPT NEW_INIT --layers N [--seed S]

Depth growth by whole blocks of `full_attention_interval` layers (GDN ... GDN, attention): new layer
i starts as a copy of old layer i mod L_old (same kind, since both depths are multiples of the
interval).  The first L_old layers are the old layers unchanged; every later layer gets its output
projections (linear_attn.out_proj, self_attn.o_proj, mlp.down_proj) set to zero, so it adds nothing
to the residual stream and the grown model's trunk and MTP logits equal the old model's (checked
below and in test_train.py).  Embeddings, final norm and the MTP layer are copied.  Training from
NEW_INIT (`train.py --init NEW_INIT`) starts with a fresh optimiser at step 0.
"""
import argparse
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Qwen35MTP  # noqa: E402

ZEROED = ("linear_attn.out_proj.weight", "self_attn.o_proj.weight", "mlp.down_proj.weight")


def grow(old_state, old_cfg, layers):
    """Returns (state_dict, config) of the grown model."""
    L, iv = old_cfg["num_hidden_layers"], old_cfg["full_attention_interval"]
    if layers <= L or L % iv or layers % iv:
        raise ValueError(f"grow: --layers {layers} must exceed {L} and both must be multiples of {iv}")
    cfg = dict(old_cfg, num_hidden_layers=layers)
    new = {}
    for k, v in old_state.items():
        m = re.match(r"model\.layers\.(\d+)\.(.*)", k)
        if not m:
            new[k] = v.clone()
            continue
        i, rest = int(m.group(1)), m.group(2)
        for j in range(i, layers, L):
            new[f"model.layers.{j}.{rest}"] = torch.zeros_like(v) if j >= L and rest in ZEROED else v.clone()
    return new, cfg


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--layers", type=int, required=True)
    a = ap.parse_args()
    st = torch.load(a.old)
    state, cfg = grow(st["model"], st["config"], a.layers)
    model = Qwen35MTP(cfg)
    model.load_state_dict(state)            # strict: every tensor of the grown model is set
    old = Qwen35MTP(st["config"])
    old.load_state_dict(st["model"])
    ids = torch.randint(0, cfg["vocab_size"], (2, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        lo, ho = old(ids)
        ln, hn = model(ids)
        d = max((lo - ln).abs().max().item(), (old.mtp_forward(ids, ho)[0] - model.mtp_forward(ids, hn)[0]).abs().max().item())
    if d > 1e-4:
        sys.exit(f"grow: grown model differs from the old one by {d}")
    torch.save({"model": model.state_dict(), "config": cfg, "step": 0, "grown_from": os.path.abspath(a.old),
                "grown_from_step": st["step"]}, a.new)
    print(f"grow: {a.old} (step {st['step']}, {st['config']['num_hidden_layers']} layers) -> {a.new} "
          f"({a.layers} layers, {sum(v.numel() for v in state.values())} parameters), max logit difference {d:.2e}")


if __name__ == "__main__":
    main()
