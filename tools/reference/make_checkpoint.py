#!/usr/bin/python3
"""make_checkpoint.py - a small random-init Qwen3.5 checkpoint in Hugging Face layout.

Writes into OUT_DIR:
  config.json                     Qwen3_5ForCausalLM text config, or with --vl the nested
                                  text_config of Qwen3_5ForConditionalGeneration (tensors then
                                  carry the model.language_model. prefix); with --moe the
                                  Qwen3_5Moe* equivalents
  MoE (--moe): every layer and the MTP block get a router mlp.gate [experts, E], routed experts
  (per-expert mlp.experts.X.{gate,up,down}_proj, or with --fused-experts transformers v5's
  mlp.experts.gate_up_proj [experts, 2 F, E] + mlp.experts.down_proj [experts, E, F], the same
  values), a shared expert mlp.shared_expert.* and its gate mlp.shared_expert_gate [1, E].
  model.safetensors               or model-0000i-of-0000n.safetensors + model.safetensors.index.json
                                  with --shards N
  tokenizer.json                  byte-level BPE (GPT-2 byte alphabet + merges learned from a
                                  fixed text), Qwen3.5 pre-tokenizer regex, ChatML specials
  tokenizer_config.json           eos <|im_end|>, pad <|endoftext|>, chat_template (ChatML)

Deterministic: the same options give byte-identical files (seeded numpy RNG).
Init scales keep logits spread out (std a few units) so argmax comparisons are meaningful:
zero-centred norm weights are N(0, 0.1) (not 0) so that a missing "+1" changes the output.
"""
import argparse
import collections
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402

QWEN35_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
                r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

CORPUS = """In the beginning God created the heaven and the earth. And the earth was without form, and void;
and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters.
And God said, Let there be light: and there was light. And God saw the light, that it was good:
and God divided the light from the darkness. int main(void) { return 0; } for (int i = 0; i < n; i++)
The quick brown fox jumps over the lazy dog 0123456789 hello world Hello World the and of to in
"""

SPECIALS = [  # (content, special)
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<think>", False), ("</think>", False),
]

CHAT_TEMPLATE = ("{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content"
                 " + '<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
                 "{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable unicode map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def train_bpe(n_merges):
    """Tiny deterministic BPE training on CORPUS (simplified word split; ties by pair order)."""
    b2u = bytes_to_unicode()
    words = collections.Counter(re.findall(r" ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+|\s+", CORPUS))
    seqs = {w: [b2u[b] for b in w.encode("utf-8")] for w in words}
    vocab = [b2u[b] for b in range(256)]
    merges = []
    for _ in range(n_merges):
        pairs = collections.Counter()
        for w, s in seqs.items():
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += words[w]
        if not pairs:
            break
        best = max(sorted(pairs), key=lambda p: pairs[p])
        merges.append(best)
        vocab.append(best[0] + best[1])
        for w, s in seqs.items():
            out, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == best:
                    out.append(s[i] + s[i + 1])
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    return vocab, merges


def write_tokenizer(out, n_merges, merges_as_strings, template_file=False):
    vocab, merges = train_bpe(n_merges)
    v = {tok: i for i, tok in enumerate(vocab)}
    added = []
    for content, special in SPECIALS:
        added.append({"id": len(v) + len(added), "content": content, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": special})
    tj = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN35_REGEX}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": v,
                  "merges": [f"{a} {b}" for a, b in merges] if merges_as_strings else [[a, b] for a, b in merges]},
    }
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, indent=1)
    tc = {
        "add_prefix_space": False, "bos_token": None, "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>", "errors": "replace", "model_max_length": 262144,
        "pad_token": "<|endoftext|>", "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None, "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {str(a["id"]): {k: a[k] for k in a if k != "id"} for a in added},
    }
    if template_file:   # recent Qwen3.5 checkpoints: chat_template.jinja next to tokenizer_config.json
        del tc["chat_template"]
        with open(os.path.join(out, "chat_template.jinja"), "w", encoding="utf-8") as f:
            f.write(CHAT_TEMPLATE)
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tc, f, ensure_ascii=False, indent=1)
    return len(v) + len(added), {a["content"]: a["id"] for a in added}


def make_weights(a, rng):
    E, F, H, Hkv, D = a.hidden, a.ffn, a.heads, a.kv_heads, a.head_dim
    Hk, Hv, dk, dv, Kc = a.k_heads, a.v_heads, a.head_k_dim, a.head_k_dim, 4
    key_dim, value_dim = Hk * dk, Hv * dv
    conv_dim = 2 * key_dim + value_dim
    V = a.vocab_size
    t = {}

    def lin(name, out_f, in_f, gain=1.0):
        t[name] = rng.standard_normal((out_f, in_f)).astype(np.float32) * (gain / np.sqrt(in_f))

    def zc_norm(name, n):          # zero-centred RMSNorm weight
        t[name] = (rng.standard_normal(n) * 0.1).astype(np.float32)

    def attn_layer(p):
        zc_norm(p + "input_layernorm.weight", E)
        zc_norm(p + "post_attention_layernorm.weight", E)
        lin(p + "self_attn.q_proj.weight", 2 * H * D, E)
        lin(p + "self_attn.k_proj.weight", Hkv * D, E)
        lin(p + "self_attn.v_proj.weight", Hkv * D, E)
        lin(p + "self_attn.o_proj.weight", E, H * D, 0.5)
        zc_norm(p + "self_attn.q_norm.weight", D)
        zc_norm(p + "self_attn.k_norm.weight", D)
        mlp(p)

    def mlp(p):
        if a.moe:
            moe(p)
            return
        lin(p + "mlp.gate_proj.weight", F, E)
        lin(p + "mlp.up_proj.weight", F, E)
        lin(p + "mlp.down_proj.weight", E, F, 0.5)

    def moe(p):
        X, Fe, Fs = a.experts, a.moe_ffn, a.shared_ffn
        # router logits spread over several units, so the top-k choice has clear margins
        lin(p + "mlp.gate.weight", X, E, 4.0)
        gate, up, down = [], [], []
        for x in range(X):
            gate.append(rng.standard_normal((Fe, E)).astype(np.float32) / np.float32(np.sqrt(E)))
            up.append(rng.standard_normal((Fe, E)).astype(np.float32) / np.float32(np.sqrt(E)))
            down.append(rng.standard_normal((E, Fe)).astype(np.float32) * np.float32(0.5 / np.sqrt(Fe)))
        if a.fused_experts:
            t[p + "mlp.experts.gate_up_proj"] = np.stack([np.concatenate([g, u]) for g, u in zip(gate, up)])
            t[p + "mlp.experts.down_proj"] = np.stack(down)
        else:
            for x in range(X):
                t[p + f"mlp.experts.{x}.gate_proj.weight"] = gate[x]
                t[p + f"mlp.experts.{x}.up_proj.weight"] = up[x]
                t[p + f"mlp.experts.{x}.down_proj.weight"] = down[x]
        lin(p + "mlp.shared_expert.gate_proj.weight", Fs, E)
        lin(p + "mlp.shared_expert.up_proj.weight", Fs, E)
        lin(p + "mlp.shared_expert.down_proj.weight", E, Fs, 0.5)
        lin(p + "mlp.shared_expert_gate.weight", 1, E, 2.0)

    pre = "model.language_model." if a.vl else "model."
    t[pre + "embed_tokens.weight"] = (rng.standard_normal((V, E)) * 0.5).astype(np.float32)
    zc_norm(pre + "norm.weight", E)
    if not a.tied:
        lin("lm_head.weight", V, E, 3.0)
    for i in range(a.layers):
        p = f"{pre}layers.{i}."
        if (i + 1) % a.interval == 0:
            attn_layer(p)
            continue
        zc_norm(p + "input_layernorm.weight", E)
        zc_norm(p + "post_attention_layernorm.weight", E)
        lin(p + "linear_attn.in_proj_qkv.weight", conv_dim, E)
        lin(p + "linear_attn.in_proj_z.weight", value_dim, E)
        lin(p + "linear_attn.in_proj_b.weight", Hv, E)
        lin(p + "linear_attn.in_proj_a.weight", Hv, E)
        t[p + "linear_attn.conv1d.weight"] = (rng.uniform(-1, 1, (conv_dim, 1, Kc)) / np.sqrt(Kc)).astype(np.float32)
        t[p + "linear_attn.dt_bias"] = (rng.standard_normal(Hv) * 0.5).astype(np.float32)
        t[p + "linear_attn.A_log"] = np.log(rng.uniform(1, 16, Hv)).astype(np.float32)
        t[p + "linear_attn.norm.weight"] = (1.0 + rng.standard_normal(dv) * 0.1).astype(np.float32)
        lin(p + "linear_attn.out_proj.weight", E, value_dim, 0.5)
        mlp(p)
    if a.mtp:
        lin("mtp.fc.weight", E, 2 * E)
        zc_norm("mtp.pre_fc_norm_embedding.weight", E)
        zc_norm("mtp.pre_fc_norm_hidden.weight", E)
        zc_norm("mtp.norm.weight", E)
        attn_layer("mtp.layers.0.")
    return t


def text_config(a, specials):
    R = int(a.head_dim * 0.25)
    half = R // 2
    sec = [half - 2 * (half // 3), half // 3, half // 3]       # sums to R/2, like [11, 11, 10]
    sec = sorted(sec, reverse=True)
    layer_types = ["full_attention" if (i + 1) % a.interval == 0 else "linear_attention" for i in range(a.layers)]
    tc = {
        "model_type": "qwen3_5_text", "attention_bias": False, "attention_dropout": 0.0, "attn_output_gate": True,
        "bos_token_id": None, "eos_token_id": specials["<|endoftext|>"], "dtype": a.dtype_name,
        "full_attention_interval": a.interval, "head_dim": a.head_dim, "hidden_act": "silu",
        "hidden_size": a.hidden, "initializer_range": 0.02, "intermediate_size": a.ffn, "layer_types": layer_types,
        "linear_conv_kernel_dim": 4, "linear_key_head_dim": a.head_k_dim, "linear_num_key_heads": a.k_heads,
        "linear_num_value_heads": a.v_heads, "linear_value_head_dim": a.head_k_dim,
        "max_position_embeddings": 4096, "mlp_only_layers": [], "mamba_ssm_dtype": "float32",
        "mtp_num_hidden_layers": 1 if a.mtp else 0, "mtp_use_dedicated_embeddings": False,
        "num_attention_heads": a.heads, "num_hidden_layers": a.layers, "num_key_value_heads": a.kv_heads,
        "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-6,
        "rope_parameters": {"mrope_interleaved": True, "mrope_section": sec, "partial_rotary_factor": 0.25,
                            "rope_theta": 10000000, "rope_type": "default"},
        "tie_word_embeddings": a.tied, "use_cache": True, "vocab_size": a.vocab_size,
    }
    if a.moe:   # Qwen3_5MoeTextConfig: no intermediate_size
        del tc["intermediate_size"], tc["mlp_only_layers"]
        tc.update({"model_type": "qwen3_5_moe_text", "num_experts": a.experts, "num_experts_per_tok": a.experts_per_tok,
                   "moe_intermediate_size": a.moe_ffn, "shared_expert_intermediate_size": a.shared_ffn,
                   "router_aux_loss_coef": 0.001, "output_router_logits": False})
    return tc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--ffn", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--interval", type=int, default=4, help="full_attention_interval")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2, help="GQA when < --heads")
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--k-heads", type=int, default=2, help="linear_num_key_heads")
    ap.add_argument("--v-heads", type=int, default=4, help="linear_num_value_heads (k-heads != v-heads reorders)")
    ap.add_argument("--head-k-dim", type=int, default=16, help="linear key = value head dim")
    ap.add_argument("--vocab-size", type=int, default=320, help="padded embedding rows (>= tokenizer size)")
    ap.add_argument("--merges", type=int, default=40)
    ap.add_argument("--merges-as-strings", action="store_true", help="old 'a b' merges format")
    ap.add_argument("--tied", action="store_true", help="tie_word_embeddings (no lm_head.weight)")
    ap.add_argument("--mtp", action="store_true", help="add the MTP head (mtp.*)")
    ap.add_argument("--dtype", choices=["bf16", "f16", "f32"], default="bf16")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--template-file", action="store_true", help="chat template in chat_template.jinja")
    ap.add_argument("--vl", action="store_true", help="Qwen3_5ForConditionalGeneration layout (nested text_config)")
    ap.add_argument("--moe", action="store_true", help="Qwen3.5-MoE: routed + shared experts instead of the dense FFN")
    ap.add_argument("--experts", type=int, default=8, help="num_experts (--moe)")
    ap.add_argument("--experts-per-tok", type=int, default=2, help="num_experts_per_tok (--moe)")
    ap.add_argument("--moe-ffn", type=int, default=32, help="moe_intermediate_size (--moe)")
    ap.add_argument("--shared-ffn", type=int, default=48, help="shared_expert_intermediate_size (--moe)")
    ap.add_argument("--fused-experts", action="store_true", help="transformers v5 fused expert tensors (--moe)")
    a = ap.parse_args(argv)
    a.dtype_name = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[a.dtype]
    os.makedirs(a.out_dir, exist_ok=True)
    n_tok, specials = write_tokenizer(a.out_dir, a.merges, a.merges_as_strings, a.template_file)
    if a.vocab_size < n_tok:
        sys.exit(f"--vocab-size {a.vocab_size} < tokenizer size {n_tok}")
    rng = np.random.default_rng(a.seed)
    weights = make_weights(a, rng)
    tc = text_config(a, specials)
    if a.vl:
        cfg = {"architectures": ["Qwen3_5MoeForConditionalGeneration" if a.moe else "Qwen3_5ForConditionalGeneration"],
               "model_type": "qwen3_5_moe" if a.moe else "qwen3_5",
               "tie_word_embeddings": tc.pop("tie_word_embeddings"), "text_config": tc,
               "image_token_id": None, "video_token_id": None}
    else:
        cfg = dict(tc)
        cfg["architectures"] = ["Qwen3_5MoeForCausalLM" if a.moe else "Qwen3_5ForCausalLM"]
    with open(os.path.join(a.out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    st_dtype = {"bf16": "BF16", "f16": "F16", "f32": "F32"}[a.dtype]
    # A_log stays F32 like the Qwen releases (mamba_ssm_dtype float32); everything else in --dtype.
    enc = {k: (("F32" if k.endswith("A_log") else st_dtype),) for k in weights}
    enc = {k: (d[0], st_io.encode(weights[k], d[0])) for k, d in enc.items()}
    names = sorted(enc)
    if a.shards <= 1:
        st_io.write_file(os.path.join(a.out_dir, "model.safetensors"), enc)
    else:
        weight_map, total = {}, 0
        for s in range(a.shards):
            fn = f"model-{s + 1:05d}-of-{a.shards:05d}.safetensors"
            part = {k: enc[k] for k in names[s::a.shards]}
            st_io.write_file(os.path.join(a.out_dir, fn), part)
            for k in part:
                weight_map[k] = fn
                total += part[k][1].nbytes
        with open(os.path.join(a.out_dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
    n_params = sum(v.size for v in weights.values())
    print(f"wrote {a.out_dir}: {len(weights)} tensors, {n_params} parameters, tokenizer {n_tok} tokens, "
          f"vocab_size {a.vocab_size}")


if __name__ == "__main__":
    main()
