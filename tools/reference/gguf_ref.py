#!/usr/bin/python3
"""gguf_ref.py - the same model evaluated from a *converted* GGUF file, in llama.cpp's conventions
(llama.cpp src/models/qwen35.cpp): plain RMSNorm weights (the +1 is baked in), ssm_a used as
is (already -exp(A_log)), tiled value heads (value head h uses key head h % Hk), conv1d {Kc, C},
GGUF names; for qwen35moe the MoE FFN from ffn_gate_inp, the stacked ffn_{gate,up,down}_exps (or
ffn_gate_up_exps) and the shared expert ffn_*_shexp with its gate ffn_gate_inp_shexp (softmax
over all experts, top expert_used_count, renormalised).  Comparing its logits with qwen35_ref.py's (HF conventions, unconverted checkpoint)
checks the converter's transformations end to end, independently of the C engine.

Reads F32/F16/BF16/Q8_0 tensors with its own small GGUF parser (numpy).

Usage: gguf_ref.py MODEL.gguf --tokens 1,2,3 [--mtp-file MTP.gguf] [--compare-logits REF.bin]
                  [--compare-mtp REF_MTP.bin] [--out-logits F.bin] [--out-mtp F.bin]
"""
import argparse
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen35_ref import DT, apply_partial_rope, gated_delta_rule_sequential, l2norm, linear  # noqa: E402

torch.set_num_threads(2)

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class Gguf:
    def __init__(self, path):
        self.buf = open(path, "rb").read()
        self.off = 0
        magic, version = self._u("<I"), self._u("<I")
        if magic != 0x46554747 or version not in (2, 3):
            raise ValueError(f"{path}: not a GGUF v2/v3 file")
        n_t, n_kv = self._u("<Q"), self._u("<Q")
        self.kv = {}
        for _ in range(n_kv):
            k = self._str()
            self.kv[k] = self._val(self._u("<I"))
        infos = []
        for _ in range(n_t):
            name = self._str()
            nd = self._u("<I")
            ne = [self._u("<Q") for _ in range(nd)]
            typ, off = self._u("<I"), self._u("<Q")
            infos.append((name, ne, typ, off))
        align = self.kv.get("general.alignment", 32)
        base = (self.off + align - 1) // align * align
        self.tensors = {}
        for name, ne, typ, off in infos:
            self.tensors[name] = self._tensor(base + off, ne, typ)

    def _u(self, fmt):
        v = struct.unpack_from(fmt, self.buf, self.off)[0]
        self.off += struct.calcsize(fmt)
        return v

    def _str(self):
        n = self._u("<Q")
        s = self.buf[self.off:self.off + n].decode("utf-8")
        self.off += n
        return s

    def _val(self, t):
        if t == 8:
            return self._str()
        if t == 9:
            et, n = self._u("<I"), self._u("<Q")
            return [self._val(et) for _ in range(n)]
        return self._u(_SCALAR[t])

    def _tensor(self, off, ne, typ):
        n = int(np.prod(ne))
        shape = list(reversed(ne))
        if typ == 0:
            a = np.frombuffer(self.buf, np.float32, n, off)
        elif typ == 1:
            a = np.frombuffer(self.buf, np.float16, n, off).astype(np.float32)
        elif typ == 30:
            a = (np.frombuffer(self.buf, np.uint16, n, off).astype(np.uint32) << 16).view(np.float32)
        elif typ == 8:  # Q8_0: blocks of f16 d + 32 int8
            nb = n // 32
            raw = np.frombuffer(self.buf, np.uint8, nb * 34, off).reshape(nb, 34)
            d = raw[:, :2].copy().view(np.float16).astype(np.float32)
            q = raw[:, 2:].copy().view(np.int8).astype(np.float32)
            a = (q * d).reshape(-1)
        else:
            raise ValueError(f"tensor type {typ} not supported here")
        return torch.from_numpy(a.reshape(shape).astype(np.float64))


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class GgufRef:
    def __init__(self, path, mtp_path=None):
        g = Gguf(path)
        self.t = dict(g.tensors)
        if mtp_path:
            self.t.update(Gguf(mtp_path).tensors)   # mtp-only file: blk.L.* (+ shared globals)
        kv = g.kv
        a = kv["general.architecture"]
        self.L_all = kv[f"{a}.block_count"]
        self.n_mtp = kv.get(f"{a}.nextn_predict_layers", 0)
        if mtp_path:
            self.n_mtp = Gguf(mtp_path).kv.get(f"{a}.nextn_predict_layers", 0)
            self.L_all = self.L_all + self.n_mtp
        self.L = self.L_all - self.n_mtp
        self.E = kv[f"{a}.embedding_length"]
        self.H = kv[f"{a}.attention.head_count"]
        self.Hkv = kv.get(f"{a}.attention.head_count_kv", self.H)
        self.D = kv[f"{a}.attention.key_length"]
        self.R = kv.get(f"{a}.rope.dimension_count", self.D)
        self.theta = kv.get(f"{a}.rope.freq_base", 10000.0)
        self.eps = kv[f"{a}.attention.layer_norm_rms_epsilon"]
        self.Kc = kv[f"{a}.ssm.conv_kernel"]
        self.dk = kv[f"{a}.ssm.state_size"]
        self.Hk = kv[f"{a}.ssm.group_count"]
        self.Hv = kv[f"{a}.ssm.time_step_rank"]
        self.dv = kv[f"{a}.ssm.inner_size"] // self.Hv
        self.interval = kv.get(f"{a}.full_attention_interval", 4)
        self.n_used = kv.get(f"{a}.expert_used_count", 0)

    def w(self, k):
        return self.t[k]

    def head(self, h):
        return linear(h, self.t.get("output.weight", self.t["token_embd.weight"]))

    def ffn(self, p, x):
        if p + "ffn_gate_inp.weight" in self.t:
            return self.moe(p, x)
        return linear(torch.nn.functional.silu(linear(x, self.w(p + "ffn_gate.weight"))) *
                      linear(x, self.w(p + "ffn_up.weight")), self.w(p + "ffn_down.weight"))

    def moe(self, p, x):
        t = self.t
        probs = torch.softmax(linear(x, t[p + "ffn_gate_inp.weight"]), dim=-1)
        top, idx = torch.topk(probs, self.n_used, dim=-1)
        top = top / top.sum(dim=-1, keepdim=True)
        if p + "ffn_gate_up_exps.weight" in t:
            gate, up = torch.chunk(t[p + "ffn_gate_up_exps.weight"], 2, dim=1)
        else:
            gate, up = t[p + "ffn_gate_exps.weight"], t[p + "ffn_up_exps.weight"]
        down = t[p + "ffn_down_exps.weight"]
        out = torch.zeros_like(x)
        for r in range(x.shape[0]):
            for j in range(self.n_used):
                e = int(idx[r, j])
                h = torch.nn.functional.silu(linear(x[r], gate[e])) * linear(x[r], up[e])
                out[r] += top[r, j] * linear(h, down[e])
        sh = linear(torch.nn.functional.silu(linear(x, t[p + "ffn_gate_shexp.weight"])) *
                    linear(x, t[p + "ffn_up_shexp.weight"]), t[p + "ffn_down_shexp.weight"])
        return out + torch.sigmoid(linear(x, t[p + "ffn_gate_inp_shexp.weight"])) * sh

    def attn(self, p, x, pos):
        T, H, Hkv, D = x.shape[0], self.H, self.Hkv, self.D
        qf = linear(x, self.w(p + "attn_q.weight")).view(T, H, 2 * D)
        q, gate = qf[..., :D], qf[..., D:].reshape(T, H * D)
        q = rms(q, self.w(p + "attn_q_norm.weight"), self.eps)
        k = rms(linear(x, self.w(p + "attn_k.weight")).view(T, Hkv, D), self.w(p + "attn_k_norm.weight"), self.eps)
        v = linear(x, self.w(p + "attn_v.weight")).view(T, Hkv, D)
        q = apply_partial_rope(q, pos, self.R, self.theta)
        k = apply_partial_rope(k, pos, self.R, self.theta)
        kvh = torch.arange(H) // (H // Hkv)
        s = torch.einsum("thd,shd->hts", q, k[:, kvh]) / np.sqrt(D)
        s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1)[None], float("-inf"))
        o = torch.einsum("hts,shd->thd", torch.softmax(s, -1), v[:, kvh]).reshape(T, H * D)
        return linear(o * torch.sigmoid(gate), self.w(p + "attn_output.weight"))

    def gdn(self, p, x):
        T, Hk, Hv, dk, dv = x.shape[0], self.Hk, self.Hv, self.dk, self.dv
        qkv = linear(x, self.w(p + "attn_qkv.weight"))
        z = linear(x, self.w(p + "attn_gate.weight")).view(T, Hv, dv)
        beta = torch.sigmoid(linear(x, self.w(p + "ssm_beta.weight")))
        alpha = linear(x, self.w(p + "ssm_alpha.weight"))
        g = self.w(p + "ssm_a") * torch.nn.functional.softplus(alpha + self.w(p + "ssm_dt.bias"))
        cw = self.w(p + "ssm_conv1d.weight")                       # [C, Kc] (torch order of ne {Kc, C})
        u = torch.cat([torch.zeros(self.Kc - 1, qkv.shape[1], dtype=DT), qkv], 0)
        y = sum(u[i:i + T] * cw[:, i] for i in range(self.Kc))
        y = torch.nn.functional.silu(y)
        q = y[:, :Hk * dk].reshape(T, Hk, dk)
        k = y[:, Hk * dk:2 * Hk * dk].reshape(T, Hk, dk)
        v = y[:, 2 * Hk * dk:].reshape(T, Hv, dv)
        tiled = torch.arange(Hv) % Hk                              # value head h uses key head h % Hk
        o = gated_delta_rule_sequential(l2norm(q)[:, tiled], l2norm(k)[:, tiled], v, g, beta)
        o = rms(o, self.w(p + "ssm_norm.weight"), self.eps) * torch.nn.functional.silu(z)
        return linear(o.reshape(T, Hv * dv), self.w(p + "ssm_out.weight"))

    def layer(self, i, x, pos):
        p = f"blk.{i}."
        a = rms(x, self.w(p + "attn_norm.weight"), self.eps)
        recurrent = i < self.L and (i + 1) % self.interval != 0
        x = x + (self.gdn(p, a) if recurrent else self.attn(p, a, pos))
        return x + self.ffn(p, rms(x, self.w(p + "post_attention_norm.weight"), self.eps))

    def forward(self, toks):
        pos = torch.arange(len(toks))
        x = self.w("token_embd.weight")[torch.tensor(toks)]
        for i in range(self.L):
            x = self.layer(i, x, pos)
        h = rms(x, self.w("output_norm.weight"), self.eps)
        return self.head(h), h

    def mtp(self, toks, h):
        M = self.L
        p = f"blk.{M}."
        pos = torch.arange(len(toks))
        hprev = torch.cat([torch.zeros(1, self.E, dtype=DT), h[:-1]], 0)
        e = rms(self.w("token_embd.weight")[torch.tensor(toks)], self.w(p + "nextn.enorm.weight"), self.eps)
        hh = rms(hprev, self.w(p + "nextn.hnorm.weight"), self.eps)
        x = linear(torch.cat([e, hh], -1), self.w(p + "nextn.eh_proj.weight"))
        x = self.layer(M, x, pos)
        return self.head(rms(x, self.w(p + "nextn.shared_head_norm.weight"), self.eps))


def compare(name, got, ref_path, n_tok):
    ref = np.fromfile(ref_path, dtype="<f4").reshape(n_tok, -1)
    got = got.numpy()
    d = np.abs(got - ref).max()
    agree = (got.argmax(-1) == ref.argmax(-1)).all()
    print(f"{name}: max |diff| {d:.3e}, max |ref| {np.abs(ref).max():.3f}, argmax equal on all {n_tok} rows: {agree}")
    return d, agree


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf")
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--mtp-file")
    ap.add_argument("--compare-logits")
    ap.add_argument("--compare-mtp")
    ap.add_argument("--tol", type=float, default=1e-3)
    a = ap.parse_args()
    toks = [int(t) for t in a.tokens.split(",")]
    m = GgufRef(a.gguf, a.mtp_file)
    logits, h = m.forward(toks)
    ok = True
    if a.compare_logits:
        d, agree = compare("logits", logits, a.compare_logits, len(toks))
        ok &= agree and d <= a.tol
    if a.compare_mtp:
        d, agree = compare("mtp logits", m.mtp(toks, h), a.compare_mtp, len(toks))
        ok &= agree and d <= a.tol
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
