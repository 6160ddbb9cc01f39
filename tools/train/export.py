#!/usr/bin/python3
"""export.py - training checkpoint -> Hugging Face folder that `nextn convert` reads.

  export.py RUN_DIR/ckpt.pt TOK_DIR HF_DIR

Writes HF_DIR/config.json (Qwen3_5ForCausalLM text config, tied embeddings, one MTP layer),
model.safetensors (float32; the state_dict keys already are the HF tensor names), and copies
tokenizer.json / tokenizer_config.json from TOK_DIR.
"""
import json
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import st_io  # noqa: E402
from model import hf_config  # noqa: E402


def export_state(state, cfg, tok_dir, out):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8") as f:
        eos = next(a["id"] for a in json.load(f)["added_tokens"] if a["content"] == "<|endoftext|>")
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(hf_config(cfg, eos), f, indent=2, sort_keys=True)
    tensors = {k: ("F32", v.detach().to(torch.float32).contiguous().numpy()) for k, v in state.items()}
    st_io.write_file(os.path.join(out, "model.safetensors"), tensors)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok_dir, fn), os.path.join(out, fn))
    return sum(v[1].size for v in tensors.values())


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    ckpt, tok, out = sys.argv[1:]
    st = torch.load(ckpt)
    n = export_state(st["model"], st["config"], tok, out)
    print(f"export: step {st['step']}, {n} parameters -> {out}")


if __name__ == "__main__":
    main()
