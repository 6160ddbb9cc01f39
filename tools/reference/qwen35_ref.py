#!/usr/bin/python3
"""qwen35_ref.py - independent PyTorch reference of the Qwen3.5 text model and its MTP head.

Written from the Hugging Face semantics (transformers' modeling_qwen3_5.py conventions), on the
*unconverted* HF checkpoint: HF tensor names, zero-centred RMSNorm (x_hat * (1 + w)), the plain
gated RMSNorm of linear_attn.norm, A_log (decay = -exp(A_log) * softplus(a + dt_bias)), grouped
value heads (HF value head h uses key head h // (Hv/Hk), i.e. repeat_interleave), depthwise causal
conv1d, the *sequential* gated delta rule, gated attention (q and gate chunked per head), partial
NeoX rotary on the first partial_rotary_factor * head_dim dims.  Qwen3.5-MoE checkpoints
(num_experts in the config) use the MoE block in every layer and the MTP block: router softmax
over all experts -> top num_experts_per_tok -> weights renormalised to sum 1 -> per-expert SwiGLU
(gate, up, down), weighted sum, plus the shared expert's SwiGLU times sigmoid(shared_expert_gate . x)
(transformers' Qwen3_5MoeSparseMoeBlock); experts per-expert (mlp.experts.X.*_proj) or fused
(mlp.experts.gate_up_proj [X, 2F, E] = gate rows then up rows per expert, mlp.experts.down_proj).  Everything runs in float64 so the
reference is far more precise than any engine it checks.  This is a test oracle only; the nextn
engine never runs Python.

MTP convention (the one llama.cpp's MTP driver uses, common/speculative.cpp):
MTP row p = (token x_p, trunk hidden h_{p-1}) at position p, row 0 paired with a zero hidden;
h is the trunk's hidden *after* the final norm.  The trunk's logits at p-1 predict x_p; the
MTP row p (which sees x_p and h_{p-1}) predicts x_{p+1}.

Usage:
  qwen35_ref.py logits HF_DIR --tokens 1,2,3 [--out-logits F.bin] [--out-mtp M.bin] [--print]
Output .bin files: raw little-endian float32, row-major [n_tokens][vocab_size].
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402

torch.set_num_threads(2)
DT = torch.float64


def load_config(hf_dir):
    with open(os.path.join(hf_dir, "config.json")) as f:
        cfg = json.load(f)
    text = dict(cfg.get("text_config", cfg))
    # tie_word_embeddings lives at the top level of Qwen3_5ForConditionalGeneration configs
    if "tie_word_embeddings" not in text and "tie_word_embeddings" in cfg:
        text["tie_word_embeddings"] = cfg["tie_word_embeddings"]
    return text


def rope_params(cfg):
    rp = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    theta = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))
    prf = rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    return float(theta), float(prf)


class Weights:
    """HF tensors, with the 'model.language_model.' prefix normalised to 'model.'."""

    def __init__(self, hf_dir):
        raw = st_io.read_dir(hf_dir)
        self.t = {}
        for k, v in raw.items():
            k = k.replace("model.language_model.", "model.")
            if k.startswith("model.mtp."):
                k = k[len("model."):]
            self.t[k] = torch.from_numpy(np.array(v, dtype=np.float64))

    def __getitem__(self, k):
        return self.t[k]

    def get(self, k):
        return self.t.get(k)


def rms_norm_zc(x, w, eps):
    """Qwen3_5RMSNorm: zero-centred weight."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w)


def rms_norm_gated(x, w, z, eps):
    """Qwen3_5RMSNormGated (linear_attn.norm): plain weight, times silu(z)."""
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)) * torch.nn.functional.silu(z)


def l2norm(x, eps=1e-6):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def linear(x, w):
    return x @ w.T


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def apply_partial_rope(x, pos, rot_dim, theta):
    """x [T, heads, D]; NeoX rotation of the first rot_dim dims (HF apply_rotary_pos_emb)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, rot_dim, 2, dtype=DT) / rot_dim))
    freqs = pos.to(DT)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    xr, xp = x[..., :rot_dim], x[..., rot_dim:]
    return torch.cat((xr * cos + rotate_half(xr) * sin, xp), dim=-1)


def gated_delta_rule_sequential(q, k, v, g, beta):
    """q,k [T, H, dk] (already L2-normed), v [T, H, dv], g/beta [T, H].  Returns [T, H, dv].
    HF torch_recurrent_gated_delta_rule: decay, read, delta, write, output from updated state."""
    T, H, dk = q.shape
    dv = v.shape[-1]
    q = q * (1.0 / math.sqrt(dk))
    S = torch.zeros(H, dk, dv, dtype=DT)
    out = torch.zeros(T, H, dv, dtype=DT)
    for t in range(T):
        S = S * g[t].exp()[:, None, None]
        kv_mem = (S * k[t][:, :, None]).sum(dim=-2)            # [H, dv]
        delta = (v[t] - kv_mem) * beta[t][:, None]
        S = S + k[t][:, :, None] * delta[:, None, :]
        out[t] = (S * q[t][:, :, None]).sum(dim=-2)
    return out


class Qwen35Ref:
    def __init__(self, hf_dir):
        self.cfg = c = load_config(hf_dir)
        self.w = Weights(hf_dir)
        self.E = c["hidden_size"]
        self.L = c["num_hidden_layers"]
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.H = c["num_attention_heads"]
        self.Hkv = c.get("num_key_value_heads", self.H)
        self.D = c.get("head_dim", self.E // self.H)
        self.theta, prf = rope_params(c)
        self.R = int(self.D * prf)
        self.Hk = c["linear_num_key_heads"]
        self.Hv = c["linear_num_value_heads"]
        self.dk = c["linear_key_head_dim"]
        self.dv = c["linear_value_head_dim"]
        self.Kc = c["linear_conv_kernel_dim"]
        interval = c.get("full_attention_interval", 4)
        self.layer_types = c.get("layer_types") or [
            "full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(self.L)]
        self.tied = bool(c.get("tie_word_embeddings", False))
        self.n_mtp = c.get("mtp_num_hidden_layers", 0)
        self.n_expert = c.get("num_experts", 0)
        self.k = c.get("num_experts_per_tok", 0)
        self.min_margin = math.inf   # smallest router-logit gap between the k-th and (k+1)-th expert seen

    # ---- blocks -------------------------------------------------------------------------
    def head(self, h):
        W = self.w["model.embed_tokens.weight"] if self.tied or self.w.get("lm_head.weight") is None \
            else self.w["lm_head.weight"]
        return linear(h, W)

    def expert(self, p, e):
        """(gate [F, E], up [F, E], down [E, F]) of routed expert e, per-expert or fused storage."""
        w = self.w
        fused = w.get(p + "mlp.experts.gate_up_proj")
        if fused is None:
            fused = w.get(p + "mlp.experts.gate_up_proj.weight")
        if fused is not None:
            down = w.get(p + "mlp.experts.down_proj")
            if down is None:
                down = w[p + "mlp.experts.down_proj.weight"]
            gate, up = torch.chunk(fused[e], 2, dim=0)
            return gate, up, down[e]
        return (w[p + f"mlp.experts.{e}.gate_proj.weight"], w[p + f"mlp.experts.{e}.up_proj.weight"],
                w[p + f"mlp.experts.{e}.down_proj.weight"])

    def moe(self, p, x):
        w = self.w
        logits = linear(x, w[p + "mlp.gate.weight"])                             # [T, n_expert]
        probs = torch.softmax(logits, dim=-1)
        top, idx = torch.topk(probs, self.k, dim=-1)
        if self.k < self.n_expert:   # a tiny gap would let rounding in an engine pick another expert
            srt = torch.sort(logits, dim=-1, descending=True).values
            self.min_margin = min(self.min_margin, float((srt[:, self.k - 1] - srt[:, self.k]).min()))
        top = top / top.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(x)
        for t in range(x.shape[0]):
            for j in range(self.k):
                g, u, d = self.expert(p, int(idx[t, j]))
                h = torch.nn.functional.silu(linear(x[t], g)) * linear(x[t], u)
                out[t] += top[t, j] * linear(h, d)
        sg = linear(torch.nn.functional.silu(linear(x, w[p + "mlp.shared_expert.gate_proj.weight"])) *
                    linear(x, w[p + "mlp.shared_expert.up_proj.weight"]), w[p + "mlp.shared_expert.down_proj.weight"])
        return out + torch.sigmoid(linear(x, w[p + "mlp.shared_expert_gate.weight"])) * sg

    def mlp(self, p, x):
        if self.n_expert:
            return self.moe(p, x)
        g = linear(x, self.w[p + "mlp.gate_proj.weight"])
        u = linear(x, self.w[p + "mlp.up_proj.weight"])
        return linear(torch.nn.functional.silu(g) * u, self.w[p + "mlp.down_proj.weight"])

    def attention(self, p, x, pos):
        w, T, H, Hkv, D = self.w, x.shape[0], self.H, self.Hkv, self.D
        qg = linear(x, w[p + "self_attn.q_proj.weight"]).view(T, H, 2 * D)
        q, gate = torch.chunk(qg, 2, dim=-1)                    # per head: [q | gate]
        gate = gate.reshape(T, H * D)
        q = rms_norm_zc(q, w[p + "self_attn.q_norm.weight"], self.eps)
        k = rms_norm_zc(linear(x, w[p + "self_attn.k_proj.weight"]).view(T, Hkv, D),
                        w[p + "self_attn.k_norm.weight"], self.eps)
        v = linear(x, w[p + "self_attn.v_proj.weight"]).view(T, Hkv, D)
        q = apply_partial_rope(q, pos, self.R, self.theta)
        k = apply_partial_rope(k, pos, self.R, self.theta)
        rep = H // Hkv                                           # repeat_kv: q head h -> kv head h // rep
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        scores = torch.einsum("thd,shd->hts", q, k) * (D ** -0.5)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(mask[None], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        o = torch.einsum("hts,shd->thd", probs, v).reshape(T, H * D)
        o = o * torch.sigmoid(gate)
        return linear(o, w[p + "self_attn.o_proj.weight"])

    def linear_attention(self, p, x):
        w, T = self.w, x.shape[0]
        key_dim, value_dim = self.Hk * self.dk, self.Hv * self.dv
        qkv = linear(x, w[p + "linear_attn.in_proj_qkv.weight"])           # [T, conv_dim]
        z = linear(x, w[p + "linear_attn.in_proj_z.weight"]).view(T, self.Hv, self.dv)
        b = linear(x, w[p + "linear_attn.in_proj_b.weight"])
        a = linear(x, w[p + "linear_attn.in_proj_a.weight"])
        # depthwise causal conv1d: weight [conv_dim, 1, Kc], left padding Kc-1, then SiLU
        cw = w[p + "linear_attn.conv1d.weight"]
        y = torch.nn.functional.conv1d(qkv.T[None], cw, padding=self.Kc - 1, groups=qkv.shape[1])
        qkv = torch.nn.functional.silu(y[0, :, :T]).T
        q = qkv[:, :key_dim].reshape(T, self.Hk, self.dk)
        k = qkv[:, key_dim:2 * key_dim].reshape(T, self.Hk, self.dk)
        v = qkv[:, 2 * key_dim:].reshape(T, self.Hv, self.dv)
        beta = torch.sigmoid(b)
        g = -w[p + "linear_attn.A_log"].exp() * torch.nn.functional.softplus(a + w[p + "linear_attn.dt_bias"])
        r = self.Hv // self.Hk
        if r > 1:   # grouped: HF value head h uses key head h // r
            q = q.repeat_interleave(r, dim=1)
            k = k.repeat_interleave(r, dim=1)
        o = gated_delta_rule_sequential(l2norm(q), l2norm(k), v, g, beta)
        o = rms_norm_gated(o, w[p + "linear_attn.norm.weight"], z, self.eps).reshape(T, value_dim)
        return linear(o, w[p + "linear_attn.out_proj.weight"])

    def decoder_layer(self, p, x, pos, kind):
        w = self.w
        hn = rms_norm_zc(x, w[p + "input_layernorm.weight"], self.eps)
        mix = self.attention(p, hn, pos) if kind == "full_attention" else self.linear_attention(p, hn)
        x = x + mix
        hn = rms_norm_zc(x, w[p + "post_attention_layernorm.weight"], self.eps)
        return x + self.mlp(p, hn)

    # ---- model ----------------------------------------------------------------------------
    def forward(self, tokens):
        """Returns (logits [T, V], h [T, E] = hidden after the final norm)."""
        ids = torch.tensor(tokens, dtype=torch.long)
        pos = torch.arange(len(tokens))
        x = self.w["model.embed_tokens.weight"][ids]
        for i in range(self.L):
            x = self.decoder_layer(f"model.layers.{i}.", x, pos, self.layer_types[i])
        h = rms_norm_zc(x, self.w["model.norm.weight"], self.eps)
        return self.head(h), h

    def mtp(self, tokens, h):
        """MTP rows p = (x_p, h_{p-1}), row 0 with a zero hidden.  Returns (logits, hidden)."""
        w = self.w
        ids = torch.tensor(tokens, dtype=torch.long)
        pos = torch.arange(len(tokens))
        hprev = torch.cat([torch.zeros(1, self.E, dtype=DT), h[:-1]], dim=0)
        e = rms_norm_zc(w["model.embed_tokens.weight"][ids], w["mtp.pre_fc_norm_embedding.weight"], self.eps)
        hh = rms_norm_zc(hprev, w["mtp.pre_fc_norm_hidden.weight"], self.eps)
        x = linear(torch.cat([e, hh], dim=-1), w["mtp.fc.weight"])   # embedding half first
        x = self.decoder_layer("mtp.layers.0.", x, pos, "full_attention")
        hout = rms_norm_zc(x, w["mtp.norm.weight"], self.eps)
        return self.head(hout), hout


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    lg = sub.add_parser("logits", help="reference logits (and MTP logits) for token ids")
    lg.add_argument("hf_dir")
    lg.add_argument("--tokens", required=True, help="comma-separated token ids")
    lg.add_argument("--out-logits")
    lg.add_argument("--out-mtp")
    lg.add_argument("--print", action="store_true", help="print argmax and the first logits of each row")
    a = ap.parse_args(argv)
    m = Qwen35Ref(a.hf_dir)
    toks = [int(t) for t in a.tokens.split(",") if t.strip()]
    logits, h = m.forward(toks)
    if a.out_logits:
        logits.to(torch.float32).numpy().astype("<f4").tofile(a.out_logits)
    mtp_logits = None
    if m.n_mtp > 0 and m.w.get("mtp.fc.weight") is not None:
        mtp_logits, _ = m.mtp(toks, h)
        if a.out_mtp:
            mtp_logits.to(torch.float32).numpy().astype("<f4").tofile(a.out_mtp)
    elif a.out_mtp:
        sys.exit("qwen35_ref: checkpoint has no MTP head (mtp_num_hidden_layers = 0 or no mtp.* tensors)")
    if a.print:
        if m.n_expert:
            print(f"MoE: {m.n_expert} experts, top {m.k}; smallest router-logit gap between the k-th and "
                  f"(k+1)-th expert: {m.min_margin:.3g}")
        for t in range(len(toks)):
            row = logits[t]
            s = f"tok {toks[t]:5d} argmax {int(row.argmax()):5d} logits[:4] " + \
                " ".join(f"{float(v):+.5f}" for v in row[:4])
            if mtp_logits is not None:
                s += f"   mtp argmax {int(mtp_logits[t].argmax()):5d}"
            print(s)


if __name__ == "__main__":
    main()
