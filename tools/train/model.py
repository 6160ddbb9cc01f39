#!/usr/bin/python3
"""model.py - trainable PyTorch Qwen3.5 text model + one MTP layer, in Hugging Face semantics.

The state_dict keys ARE the HF tensor names (model.embed_tokens.weight, model.layers.N.linear_attn.*,
mtp.fc.weight, ...), so export is a plain dump (export.py) and the exported checkpoint is checked
against the independent float64 oracle tools/reference/qwen35_ref.py (tests/train/test_model.py).
Blocks (same as Qwen3.5): Gated DeltaNet layers with a gated full-attention layer every
`interval`-th layer, zero-centred RMSNorm (x * (1 + w)), SwiGLU MLP, tied embeddings, grouped
value heads (Hv > Hk, HF value head h uses key head h // (Hv/Hk)), partial NeoX rotary.

Training uses the chunk-parallel gated delta rule (chunk_gated_delta_rule below); the
sequential form (qwen35_ref.gated_delta_rule_sequential) is its test oracle.
"""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))

DEFAULT_CONFIG = {
    "vocab_size": 4096, "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 4,
    "full_attention_interval": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 32,
    "linear_value_head_dim": 32, "linear_conv_kernel_dim": 4, "rms_norm_eps": 1e-6,
    "partial_rotary_factor": 0.25, "rope_theta": 10000000.0, "mtp_num_hidden_layers": 1,
}


def chunk_gated_delta_rule(q, k, v, g, beta, chunk=64):
    """Chunk-parallel gated delta rule.  q,k [B, T, H, dk] (L2-normed), v [B, T, H, dv], g/beta [B, T, H].
    Returns [B, T, H, dv], equal to the sequential recurrence
        S_t = exp(g_t) S_{t-1};  d_t = beta_t (v_t - S_t^T k_t);  S_t += k_t d_t^T;  o_t = S_t^T q_t / sqrt(dk)
    Derivation (per head, one chunk, start state S0, gamma_t = sum_{s<=t} g_s inside the chunk):
      S_t = e^{gamma_t} S0 + sum_{s<=t} e^{gamma_t - gamma_s} k_s d_s^T, hence
      d_s = beta_s v_s - beta_s e^{gamma_s} (S0^T k_s) - sum_{r<s} beta_s e^{gamma_s-gamma_r} (k_s.k_r) d_r,
      i.e. (I + A) D = beta V - (beta e^gamma K) S0 with A strictly lower triangular,
      A[s,r] = beta_s e^{gamma_s-gamma_r} k_s.k_r.  One unit-triangular solve gives
      U = (I+A)^-1 beta V and W = (I+A)^-1 (beta e^gamma K) (the WY/UT form), and D = U - W S0.
      Output  O = (e^gamma Q) S0 + ((Q K^T) * e^{gamma_t-gamma_s} [s<=t]) D,
      carry   S_C = e^{gamma_C} S0 + (K e^{gamma_C-gamma})^T D.
    All exponents are <= 0, so nothing overflows.  Only the state crosses chunk boundaries."""
    B, T, H, dk = q.shape
    dv = v.shape[-1]
    pad = (-T) % chunk
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v))
        g, beta = (F.pad(x, (0, 0, 0, pad)) for x in (g, beta))   # g = 0, beta = 0: identity steps
    n = (T + pad) // chunk
    # -> [B, H, n, C, d]
    q, k, v = (x.reshape(B, n, chunk, H, -1).permute(0, 3, 1, 2, 4) for x in (q, k, v))
    g, beta = (x.reshape(B, n, chunk, H).permute(0, 3, 1, 2) for x in (g, beta))
    q = q * (1.0 / math.sqrt(dk))
    gam = g.cumsum(-1)                                             # [B, H, n, C]
    diff = gam[..., :, None] - gam[..., None, :]                   # gamma_t - gamma_s
    incl = torch.tril(torch.ones(chunk, chunk, dtype=torch.bool, device=q.device))
    decay = diff.masked_fill(~incl, float("-inf")).exp()           # e^{gamma_t-gamma_s} for s <= t
    strict = torch.tril(torch.ones(chunk, chunk, dtype=torch.bool, device=q.device), -1)
    A = (k @ k.transpose(-1, -2)) * decay * beta[..., :, None]
    A = A.masked_fill(~strict, 0.0) + torch.eye(chunk, dtype=q.dtype, device=q.device)
    rhs = torch.cat([v * beta[..., None], k * (beta * gam.exp())[..., None]], dim=-1)
    sol = torch.linalg.solve_triangular(A, rhs, upper=False, unitriangular=True)
    U, W = sol[..., :dv], sol[..., dv:]
    qk = (q @ k.transpose(-1, -2)) * decay                          # zero above the diagonal
    qg = q * gam.exp()[..., None]
    kc = k * (gam[..., -1:] - gam).exp()[..., None]                 # e^{gamma_C - gamma_s} k_s
    S = torch.zeros(B, H, dk, dv, dtype=q.dtype, device=q.device)
    outs = []
    for c in range(n):
        D = U[:, :, c] - W[:, :, c] @ S
        outs.append(qg[:, :, c] @ S + qk[:, :, c] @ D)
        S = S * gam[:, :, c, -1].exp()[..., None, None] + kc[:, :, c].transpose(-1, -2) @ D
    o = torch.stack(outs, dim=2)                                    # [B, H, n, C, dv]
    o = o.permute(0, 2, 3, 1, 4).reshape(B, n * chunk, H, dv)
    return o[:, :T]


class ZCNorm(nn.Module):
    """Qwen3_5RMSNorm: x_hat * (1 + weight), weight initialised to 0."""

    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight)


class GatedNorm(nn.Module):
    """Qwen3_5RMSNormGated (linear_attn.norm): weight * x_hat * silu(z), weight initialised to 1."""

    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x, z):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)) * F.silu(z)


def lin(i, o):
    return nn.Linear(i, o, bias=False)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        E, Fd = c["hidden_size"], c["intermediate_size"]
        self.gate_proj, self.up_proj, self.down_proj = lin(E, Fd), lin(E, Fd), lin(Fd, E)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def rope(x, rot_dim, theta):
    """x [B, T, heads, D]: NeoX rotation of the first rot_dim dims at positions 0..T-1."""
    T = x.shape[1]
    inv = 1.0 / (theta ** (torch.arange(0, rot_dim, 2, dtype=torch.float64) / rot_dim))
    fr = torch.arange(T, dtype=torch.float64)[:, None] * inv[None]
    emb = torch.cat((fr, fr), -1)
    cos, sin = emb.cos().to(x.dtype)[:, None], emb.sin().to(x.dtype)[:, None]
    xr, xp = x[..., :rot_dim], x[..., rot_dim:]
    h = rot_dim // 2
    rot = torch.cat((-xr[..., h:], xr[..., :h]), -1)
    return torch.cat((xr * cos + rot * sin, xp), -1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        E, self.H, self.Hkv, self.D = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        self.q_proj = lin(E, 2 * self.H * self.D)
        self.k_proj = lin(E, self.Hkv * self.D)
        self.v_proj = lin(E, self.Hkv * self.D)
        self.o_proj = lin(self.H * self.D, E)
        self.q_norm = ZCNorm(self.D, c["rms_norm_eps"])
        self.k_norm = ZCNorm(self.D, c["rms_norm_eps"])
        self.R = int(self.D * c["partial_rotary_factor"])
        self.theta = c["rope_theta"]

    def forward(self, x):
        B, T, _ = x.shape
        H, Hkv, D = self.H, self.Hkv, self.D
        q, gate = torch.chunk(self.q_proj(x).view(B, T, H, 2 * D), 2, dim=-1)
        gate = gate.reshape(B, T, H * D)
        q = rope(self.q_norm(q), self.R, self.theta)
        k = rope(self.k_norm(self.k_proj(x).view(B, T, Hkv, D)), self.R, self.theta)
        v = self.v_proj(x).view(B, T, Hkv, D)
        k = k.repeat_interleave(H // Hkv, dim=2)
        v = v.repeat_interleave(H // Hkv, dim=2)
        s = torch.einsum("bthd,bshd->bhts", q, k) * (D ** -0.5)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        p = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
        o = torch.einsum("bhts,bshd->bthd", p, v).reshape(B, T, H * D)
        return self.o_proj(o * torch.sigmoid(gate))


class LinearAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        E = c["hidden_size"]
        self.Hk, self.Hv = c["linear_num_key_heads"], c["linear_num_value_heads"]
        self.dk, self.dv = c["linear_key_head_dim"], c["linear_value_head_dim"]
        self.Kc = c["linear_conv_kernel_dim"]
        kd, vd = self.Hk * self.dk, self.Hv * self.dv
        self.conv_dim = 2 * kd + vd
        self.in_proj_qkv = lin(E, self.conv_dim)
        self.in_proj_z = lin(E, vd)
        self.in_proj_b = lin(E, self.Hv)
        self.in_proj_a = lin(E, self.Hv)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, self.Kc, groups=self.conv_dim, bias=False,
                                padding=self.Kc - 1)
        self.dt_bias = nn.Parameter(torch.ones(self.Hv))
        # A in [1, 16] as in the Gated DeltaNet / Qwen initialisation
        self.A_log = nn.Parameter(torch.log(torch.linspace(1.0, 16.0, self.Hv)))
        self.norm = GatedNorm(self.dv, c["rms_norm_eps"])
        self.out_proj = lin(vd, E)
        self.chunk = 64
        self.sequential = False            # tests switch to the oracle recurrence

    def forward(self, x):
        B, T, _ = x.shape
        kd = self.Hk * self.dk
        qkv = F.silu(self.conv1d(self.in_proj_qkv(x).transpose(1, 2))[..., :T]).transpose(1, 2)
        z = self.in_proj_z(x).view(B, T, self.Hv, self.dv)
        beta = torch.sigmoid(self.in_proj_b(x))
        g = -self.A_log.exp() * F.softplus(self.in_proj_a(x) + self.dt_bias)
        q = qkv[..., :kd].reshape(B, T, self.Hk, self.dk)
        k = qkv[..., kd:2 * kd].reshape(B, T, self.Hk, self.dk)
        v = qkv[..., 2 * kd:].reshape(B, T, self.Hv, self.dv)
        r = self.Hv // self.Hk
        if r > 1:
            q, k = q.repeat_interleave(r, dim=2), k.repeat_interleave(r, dim=2)
        q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
        if self.sequential:
            from qwen35_ref import gated_delta_rule_sequential
            o = torch.stack([gated_delta_rule_sequential(q[b].double(), k[b].double(), v[b].double(),
                                                         g[b].double(), beta[b].double()).to(x.dtype)
                             for b in range(B)])
        else:
            o = chunk_gated_delta_rule(q, k, v, g, beta, self.chunk)
        o = self.norm(o, z).reshape(B, T, self.Hv * self.dv)
        return self.out_proj(o)


class DecoderLayer(nn.Module):
    def __init__(self, c, kind):
        super().__init__()
        self.kind = kind
        E, eps = c["hidden_size"], c["rms_norm_eps"]
        self.input_layernorm = ZCNorm(E, eps)
        self.post_attention_layernorm = ZCNorm(E, eps)
        if kind == "full_attention":
            self.self_attn = Attention(c)
        else:
            self.linear_attn = LinearAttention(c)
        self.mlp = MLP(c)

    def forward(self, x):
        h = self.input_layernorm(x)
        x = x + (self.self_attn(h) if self.kind == "full_attention" else self.linear_attn(h))
        return x + self.mlp(self.post_attention_layernorm(x))


class Trunk(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([DecoderLayer(c, t) for t in layer_types(c)])
        self.norm = ZCNorm(c["hidden_size"], c["rms_norm_eps"])


class MTP(nn.Module):
    def __init__(self, c):
        super().__init__()
        E, eps = c["hidden_size"], c["rms_norm_eps"]
        self.fc = lin(2 * E, E)
        self.pre_fc_norm_embedding = ZCNorm(E, eps)
        self.pre_fc_norm_hidden = ZCNorm(E, eps)
        self.layers = nn.ModuleList([DecoderLayer(c, "full_attention")])
        self.norm = ZCNorm(E, eps)


def layer_types(c):
    iv = c["full_attention_interval"]
    return ["full_attention" if (i + 1) % iv == 0 else "linear_attention" for i in range(c["num_hidden_layers"])]


class Qwen35MTP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.cfg = dict(c)
        self.model = Trunk(c)
        self.mtp = MTP(c)
        self.reset_parameters()

    def reset_parameters(self):
        """Normal(0, 0.02) matrices (output projections scaled by 1/sqrt(2 * n_layers)), as in HF."""
        std = 0.02
        for name, p in self.named_parameters():
            if p.dim() == 2:
                s = std / math.sqrt(2 * self.cfg["num_hidden_layers"]) if name.endswith(
                    ("o_proj.weight", "out_proj.weight", "down_proj.weight")) else std
                nn.init.normal_(p, 0.0, s)

    def forward(self, ids):
        """ids [B, T] -> (logits [B, T, V], h [B, T, E] post-norm trunk hidden)."""
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x)
        h = self.model.norm(x)
        return h @ self.model.embed_tokens.weight.T, h

    def mtp_forward(self, ids, h):
        """MTP rows p = (x_p, h_{p-1}), row 0 with a zero hidden; row p predicts x_{p+1}."""
        m = self.mtp
        hprev = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], dim=1)
        e = m.pre_fc_norm_embedding(self.model.embed_tokens(ids))
        x = m.fc(torch.cat([e, m.pre_fc_norm_hidden(hprev)], dim=-1))
        x = m.layers[0](x)
        hout = m.norm(x)
        return hout @ self.model.embed_tokens.weight.T, hout


def hf_config(c, eos_id):
    """config.json for the exported checkpoint (Qwen3_5ForCausalLM text config)."""
    D = c["head_dim"]
    R = int(D * c["partial_rotary_factor"])
    half = R // 2
    sec = sorted([half - 2 * (half // 3), half // 3, half // 3], reverse=True)
    return {
        "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text", "attention_bias": False,
        "attention_dropout": 0.0, "attn_output_gate": True, "bos_token_id": None, "eos_token_id": eos_id,
        "dtype": "float32", "full_attention_interval": c["full_attention_interval"], "head_dim": D,
        "hidden_act": "silu", "hidden_size": c["hidden_size"], "initializer_range": 0.02,
        "intermediate_size": c["intermediate_size"], "layer_types": layer_types(c),
        "linear_conv_kernel_dim": c["linear_conv_kernel_dim"], "linear_key_head_dim": c["linear_key_head_dim"],
        "linear_num_key_heads": c["linear_num_key_heads"], "linear_num_value_heads": c["linear_num_value_heads"],
        "linear_value_head_dim": c["linear_value_head_dim"], "max_position_embeddings": 4096,
        "mlp_only_layers": [], "mamba_ssm_dtype": "float32", "mtp_num_hidden_layers": 1,
        "mtp_use_dedicated_embeddings": False, "num_attention_heads": c["num_attention_heads"],
        "num_hidden_layers": c["num_hidden_layers"], "num_key_value_heads": c["num_key_value_heads"],
        "partial_rotary_factor": c["partial_rotary_factor"], "rms_norm_eps": c["rms_norm_eps"],
        "rope_parameters": {"mrope_interleaved": True, "mrope_section": sec,
                            "partial_rotary_factor": c["partial_rotary_factor"], "rope_theta": c["rope_theta"],
                            "rope_type": "default"},
        "tie_word_embeddings": True, "use_cache": True, "vocab_size": c["vocab_size"],
    }
