#!/usr/bin/python3
"""llama_convert.py - runs llama.cpp's own convert_hf_to_gguf.py with Debian's packages only.

    llama_convert.py LLAMA_CPP_DIR HF_DIR --outfile OUT.gguf [--outtype f16] [--mtp|--no-mtp] [...]

Every argument after LLAMA_CPP_DIR is passed to llama.cpp's converter unchanged.  Debian has no
`transformers`, `tqdm` or `sentencepiece`, and its torch 1.13 lacks the float8 dtypes, so the
converter cannot start as is.  This launcher puts four stand-ins in place before importing it:

  * `transformers.AutoConfig.from_pretrained` raises, so the converter falls back to reading
    config.json itself (its own documented fallback);
  * `transformers.AutoTokenizer.from_pretrained` returns an object that exposes only what the
    GPT-2/BPE vocabulary path reads: `vocab` (tokenizer.json's model vocab plus its added
    tokens), `get_added_vocab()`, `added_tokens_decoder` (`.special`, `.normalized`), and
    `encode`/`decode` for single added tokens;
  * the BPE pre-tokenizer name is "qwen35" (llama.cpp recognises it from a hash of the encoding
    of a probe text, which needs the real tokenizer; the synthetic checkpoints of
    tools/reference use the Qwen3.5 pre-tokenizer regex);
  * `tqdm` is a no-op and `torch.float8_*` are placeholder attributes (only compared against).

Nothing else of the converter is touched: tensor mapping, stacking of experts, value
transformations, type choices, key order and the GGUF writer are llama.cpp's (its gguf-py is taken
from LLAMA_CPP_DIR/gguf-py).  Used to check `nextn convert` byte for byte (docs/convert.md).
"""
import json
import os
import sys
import types


def stub_modules():
    tr = types.ModuleType("transformers")

    class AutoConfig:
        @staticmethod
        def from_pretrained(*a, **k):
            raise RuntimeError("transformers is not installed (llama_convert.py stand-in)")

    class _Added:
        def __init__(self, d):
            self.special = bool(d.get("special", False))
            self.normalized = bool(d.get("normalized", False))
            self.content = d["content"]

    class _Tok:
        def __init__(self, path):
            with open(os.path.join(path, "tokenizer.json"), encoding="utf-8") as f:
                tj = json.load(f)
            self.vocab = dict(tj["model"]["vocab"])
            self.added_tokens_decoder = {}
            self._added = {}
            for a in tj.get("added_tokens", []):
                self.vocab[a["content"]] = a["id"]
                self.added_tokens_decoder[a["id"]] = _Added(a)
                self._added[a["content"]] = a["id"]
            self._rev = {v: k for k, v in self.vocab.items()}

        def get_added_vocab(self):
            return dict(self._added)

        def encode(self, text, add_special_tokens=True):
            if text in self._added:
                return [self._added[text]]
            raise NotImplementedError("llama_convert.py stand-in tokenizer encodes added tokens only")

        def decode(self, ids):
            return "".join(self._rev[i] for i in ids)

    class AutoTokenizer:
        @staticmethod
        def from_pretrained(path, *a, **k):
            return _Tok(str(path))

    tr.AutoConfig = AutoConfig
    tr.AutoTokenizer = AutoTokenizer
    sys.modules["transformers"] = tr

    tq = types.ModuleType("tqdm")
    tq.tqdm = lambda it=None, *a, **k: it
    sys.modules["tqdm"] = tq

    import torch
    for name in ("float8_e4m3fn", "float8_e5m2"):
        if not hasattr(torch, name):
            setattr(torch, name, object())


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    llama = os.path.abspath(sys.argv[1])
    stub_modules()
    sys.path.insert(0, llama)
    sys.path.insert(1, os.path.join(llama, "gguf-py"))
    import importlib.util
    spec = importlib.util.spec_from_file_location("convert_hf_to_gguf", os.path.join(llama, "convert_hf_to_gguf.py"))
    conv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conv)
    from conversion.base import TextModel
    TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen35"
    sys.argv = ["convert_hf_to_gguf.py"] + sys.argv[2:]
    conv.main()


if __name__ == "__main__":
    main()
