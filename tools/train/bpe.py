#!/usr/bin/python3
"""bpe.py - byte-level BPE tokenizer trainer and encoder (Qwen-style), written for nextn's demo model.

  bpe.py train CORPUS.txt OUT_DIR [--vocab 4096]   -> OUT_DIR/tokenizer.json, tokenizer_config.json
  bpe.py encode OUT_DIR FILE                       -> token ids, one per line (checks against nextn)

Training: the text is split at the literal document separator "<|endoftext|>", NFC-normalised,
pre-tokenised with Qwen3.5's regex (tools/reference/make_checkpoint.QWEN35_REGEX) and mapped through
GPT-2's byte -> unicode table; then merges are learned greedily on the word counts.  Each step
merges the most frequent adjacent pair; ties go to the lexicographically smallest pair (so the
result is deterministic).  Pair counts are updated incrementally (only words containing the merged
pair are revisited) through a max-heap with lazy deletion.
Vocabulary = 256 byte tokens (ids 0..255 in byte order) + merges + ChatML specials
<|endoftext|>, <|im_start|>, <|im_end|> (last three ids).

Encoding is standard BPE: inside each pre-token, repeatedly merge the adjacent pair of lowest
merge rank.  Special tokens in the text are matched literally first.
"""
import argparse
import collections
import heapq
import json
import os
import sys
import unicodedata

import regex

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
from make_checkpoint import CHAT_TEMPLATE, QWEN35_REGEX, bytes_to_unicode  # noqa: E402

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
PRE = regex.compile(QWEN35_REGEX)
B2U = bytes_to_unicode()


def pretokens(text):
    for piece in PRE.findall(unicodedata.normalize("NFC", text)):
        yield "".join(B2U[b] for b in piece.encode("utf-8"))


def train(text, vocab_size):
    counts = collections.Counter()
    for doc in text.split("<|endoftext|>"):
        counts.update(pretokens(doc))
    words = [list(w) for w in counts]
    freq = [counts[w] for w in counts]
    pair_count = collections.defaultdict(int)
    where = collections.defaultdict(set)          # pair -> indices of words containing it
    for i, s in enumerate(words):
        for p in zip(s, s[1:]):
            pair_count[p] += freq[i]
            where[p].add(i)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    n_merges = vocab_size - 256 - len(SPECIALS)
    merges = []
    while len(merges) < n_merges and heap:
        negc, best = heapq.heappop(heap)
        if pair_count.get(best, 0) != -negc or -negc <= 0:
            continue                               # stale heap entry
        merges.append(best)
        merged = best[0] + best[1]
        changed = set()
        for i in list(where[best]):
            s = words[i]
            for p in zip(s, s[1:]):                # remove this word's pairs
                pair_count[p] -= freq[i]
                where[p].discard(i)
                changed.add(p)
            out, j = [], 0
            while j < len(s):
                if j + 1 < len(s) and s[j] == best[0] and s[j + 1] == best[1]:
                    out.append(merged)
                    j += 2
                else:
                    out.append(s[j])
                    j += 1
            words[i] = out
            for p in zip(out, out[1:]):
                pair_count[p] += freq[i]
                where[p].add(i)
                changed.add(p)
        for p in changed:
            c = pair_count.get(p, 0)
            if c > 0:
                heapq.heappush(heap, (-c, p))
            else:
                pair_count.pop(p, None)
                where.pop(p, None)
    return merges


def save(out_dir, merges):
    vocab = [B2U[b] for b in range(256)] + [a + b for a, b in merges]
    v = {tok: i for i, tok in enumerate(vocab)}
    if len(v) != len(vocab):
        raise SystemExit("bpe: duplicate token in vocabulary (merges are not unique)")
    added = [{"id": len(v) + i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, c in enumerate(SPECIALS)]
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    tj = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN35_REGEX}, "behavior": "Isolated", "invert": False}, bl]},
        "post_processor": bl, "decoder": bl,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": v, "merges": [[a, b] for a, b in merges]},
    }
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, indent=1)
    tc = {
        "add_prefix_space": False, "bos_token": None, "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>", "errors": "replace", "model_max_length": 4096,
        "pad_token": "<|endoftext|>", "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None, "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {str(a["id"]): {k: a[k] for k in a if k != "id"} for a in added},
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tc, f, ensure_ascii=False, indent=1)
    return len(v) + len(added)


class Encoder:
    def __init__(self, tok_dir):
        with open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8") as f:
            tj = json.load(f)
        self.vocab = tj["model"]["vocab"]
        self.rank = {tuple(m): r for r, m in enumerate(tj["model"]["merges"])}
        self.special = {a["content"]: a["id"] for a in tj["added_tokens"]}
        self.special_re = regex.compile("|".join(regex.escape(s) for s in self.special))
        self.inv = {i: t for t, i in self.vocab.items()}
        self.u2b = {u: b for b, u in B2U.items()}
        self.cache = {}

    def word(self, w):
        ids = self.cache.get(w)
        if ids is not None:
            return ids
        s = list(w)
        while len(s) > 1:
            best, bi = None, -1
            for j in range(len(s) - 1):
                r = self.rank.get((s[j], s[j + 1]))
                if r is not None and (best is None or r < best):
                    best, bi = r, j
            if best is None:
                break
            s[bi:bi + 2] = [s[bi] + s[bi + 1]]
        ids = [self.vocab[t] for t in s]
        self.cache[w] = ids
        return ids

    def encode(self, text):
        out, pos = [], 0
        for m in self.special_re.finditer(text):
            for w in pretokens(text[pos:m.start()]):
                out += self.word(w)
            out.append(self.special[m.group(0)])
            pos = m.end()
        for w in pretokens(text[pos:]):
            out += self.word(w)
        return out

    def decode(self, ids):
        spec = {v: k for k, v in self.special.items()}
        parts, buf = [], bytearray()
        for i in ids:
            if i in spec:
                parts.append(buf.decode("utf-8", "replace"))
                buf = bytearray()
                parts.append(spec[i])
            else:
                buf += bytes(self.u2b[c] for c in self.inv[i])
        parts.append(buf.decode("utf-8", "replace"))
        return "".join(parts)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("corpus")
    t.add_argument("out_dir")
    t.add_argument("--vocab", type=int, default=4096, help="total tokens incl. 256 bytes and 3 specials")
    e = sub.add_parser("encode")
    e.add_argument("tok_dir")
    e.add_argument("file")
    a = ap.parse_args(argv)
    if a.cmd == "train":
        with open(a.corpus, encoding="utf-8") as f:
            text = f.read()
        merges = train(text, a.vocab)
        n = save(a.out_dir, merges)
        print(f"bpe: {len(merges)} merges, {n} tokens -> {a.out_dir}")
    else:
        enc = Encoder(a.tok_dir)
        with open(a.file, encoding="utf-8") as f:
            ids = enc.encode(f.read())
        sys.stdout.write("".join(f"{i}\n" for i in ids))


if __name__ == "__main__":
    main()
