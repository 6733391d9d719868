"""Qwen3.5-style hybrid decoder LM of the reference zoo (Gated DeltaNet + gated softmax attention).

The module reproduces Hugging Face's Qwen3_5ForCausalLM (model_type
qwen3_5_text, eager attention, no cache) from the facts of
shared/golden/qwen35_text/README.md, in the checkpoint layout
model/qwen35.go reads:

  * every layer is pre-norm with a SwiGLU MLP; its token mixer is Gated
    DeltaNet (layer_types "linear_attention") or softmax attention with a
    sigmoid output gate ("full_attention");
  * every RMSNorm except the DeltaNet's gated one scales by (1 + w), in
    float32; the gated norm is w · x·rsqrt(mean(x²) + eps) · silu(z);
  * softmax layers: q_proj [H·2·dh, D] holds per head dh query rows then dh
    gate rows; q_norm/k_norm over head_dim before RoPE; RoPE (rotate-half,
    θ from rope_parameters) on the first partial_rotary_factor·dh dims of
    each head only (mRoPE over text positions is 1-D RoPE); scale dh^-½;
    the head outputs are multiplied by sigmoid(gate) before o_proj;
  * Gated DeltaNet layers: [q|k|v] = silu(causal depthwise conv(in_proj_qkv x))
    (conv1d.weight [C, 1, K], no bias), z = in_proj_z x, β = σ(in_proj_b x),
    g = −exp(A_log)·softplus(in_proj_a x + dt_bias); q, k L2-normalised
    (x·rsqrt(Σx² + 1e-6)) per key head, value head j reads key head
    j / (Hv/Hk); then per value head, with S₀ = 0 and q̃ = q/√dk:
        S ← e^{g_t} S;  u_t = β_t (v_t − Sᵀk_t);  S ← S + k_t u_tᵀ;  o_t = Sᵀq̃_t
    (delta_rule_recurrent), or the same in chunks of 64 rows with the
    in-chunk triangular system solved exactly (delta_rule_chunked, the
    training default); then the gated norm per head and out_proj;
  * tied embeddings (lm_head.weight not saved).

Modes (as zoo/train/lm.py):
  train:        python3 zoo/train/qwen35.py --out zoo/checkpoints/qwen35_hybrid [--steps N ...]
  eval:         python3 zoo/train/qwen35.py --eval <ckpt> --ids <ids.json> --logits <out.safetensors>
  golden check: python3 zoo/train/qwen35.py --check-golden /work/shared/golden/qwen35_text

Written in this project (torch 1.13, CPU, float32).
"""

import json
import math
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see lm.py

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402  (zoo/train/common.py)
from lm import rotate_half  # noqa: E402  (zoo/train/lm.py)

CHUNK = 64  # rows per chunk of delta_rule_chunked (HF's torch_chunk_gated_delta_rule uses 64)


class OnePlusRMSNorm(nn.Module):
    """Qwen3.5's RMSNorm: x·rsqrt(mean(x²) + eps)·(1 + w), w stored (initialised 0)."""

    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n))
        self.eps = eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return (x * torch.rsqrt(var + self.eps)) * (1.0 + self.weight)


class GatedRMSNorm(nn.Module):
    """The DeltaNet's output norm: w·x·rsqrt(mean(x²) + eps)·silu(z) over the last axis, plain w."""

    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x, z):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps)) * F.silu(z)


def rope_cos_sin(T, rd, theta):
    """cos, sin [T, rd] of rotate-half RoPE over rd dims (HF's float32 angle arithmetic)."""
    inv = 1.0 / (theta ** (torch.arange(0, rd, 2, dtype=torch.int64).float() / rd))
    pos = torch.arange(T, dtype=torch.int64).float()
    freqs = pos[:, None] * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def l2norm(x):
    """x·rsqrt(Σx² + 1e-6) over the last axis (HF's and fla's l2norm)."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6)


def delta_rule_recurrent(q, k, v, beta, g):
    """The gated delta rule step by step: q, k [B, H, T, dk] (L2-normalised,
    unscaled), v [B, H, T, dv], beta, g [B, H, T] → o [B, H, T, dv], S_T [B, H, dk, dv]."""
    B, H, T, dk = q.shape
    dv = v.shape[-1]
    q = q * dk ** -0.5
    S = q.new_zeros(B, H, dk, dv)
    out = []
    for t in range(T):
        S = S * g[..., t].exp()[..., None, None]
        kt = k[:, :, t]
        u = beta[..., t, None] * (v[:, :, t] - torch.einsum("bhkv,bhk->bhv", S, kt))
        S = S + kt[..., :, None] * u[..., None, :]
        out.append(torch.einsum("bhkv,bhk->bhv", S, q[:, :, t]))
    return torch.stack(out, dim=2), S


def delta_rule_chunked(q, k, v, beta, g, chunk=CHUNK):
    """delta_rule_recurrent (same arguments and results) in chunks of rows.

    In a chunk of c rows starting from state S, with G = cumsum(g) within the
    chunk, D[i,j] = exp(G_i − G_j) (j ≤ i), b = exp(G) and f_j = exp(G_{c−1} − G_j),
    the recurrence unrolls to S_i = b_i S + Σ_{j≤i} D[i,j] k_j u_jᵀ, so
        (I + L) U = diag(β)(V − diag(b) K S),   L[i,j] = β_i D[i,j] k_i·k_j (j < i)
        O = diag(b) Q̃ S + (D ⊙ Q̃Kᵀ, lower incl. diagonal) U
        S ← b_{c−1} S + (diag(f) K)ᵀ U
    with the unit lower-triangular system solved exactly (solve_triangular).
    """
    B, H, T, dk = q.shape
    dv = v.shape[-1]
    q = q * dk ** -0.5
    S = q.new_zeros(B, H, dk, dv)
    out = []
    for c0 in range(0, T, chunk):
        c1 = min(T, c0 + chunk)
        c = c1 - c0
        qc, kc, vc, bc = q[:, :, c0:c1], k[:, :, c0:c1], v[:, :, c0:c1], beta[:, :, c0:c1]
        G = g[:, :, c0:c1].cumsum(-1)  # [B, H, c]
        diff = G[..., :, None] - G[..., None, :]  # [B, H, c, c]: G_i − G_j
        lower = torch.ones(c, c, dtype=torch.bool).tril()
        D = diff.masked_fill(~lower, float("-inf")).exp()
        strict = lower & ~torch.eye(c, dtype=torch.bool)
        L = (bc[..., None] * D * (kc @ kc.transpose(-1, -2))).masked_fill(~strict, 0.0)
        b = G.exp()[..., None]  # [B, H, c, 1]
        R = bc[..., None] * (vc - b * (kc @ S))
        eye = torch.eye(c, dtype=q.dtype)
        U = torch.linalg.solve_triangular(eye + L, R, upper=False, unitriangular=True)
        attn = (D * (qc @ kc.transpose(-1, -2))).masked_fill(~lower, 0.0)
        out.append(b * (qc @ S) + attn @ U)
        f = (G[..., -1:] - G).exp()[..., None]  # [B, H, c, 1]
        S = G[..., -1].exp()[..., None, None] * S + (f * kc).transpose(-1, -2) @ U
    return torch.cat(out, dim=2), S


class GatedDeltaNet(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D = cfg["hidden_size"]
        self.Hk, self.dk = cfg["linear_num_key_heads"], cfg["linear_key_head_dim"]
        self.Hv, self.dv = cfg["linear_num_value_heads"], cfg["linear_value_head_dim"]
        if self.Hv % self.Hk != 0:
            raise ValueError(f"config.json: linear_num_value_heads {self.Hv} is not a multiple of linear_num_key_heads {self.Hk}")
        self.K = cfg["linear_conv_kernel_dim"]
        C = 2 * self.Hk * self.dk + self.Hv * self.dv
        self.in_proj_qkv = nn.Linear(D, C, bias=False)
        self.in_proj_z = nn.Linear(D, self.Hv * self.dv, bias=False)
        self.in_proj_b = nn.Linear(D, self.Hv, bias=False)
        self.in_proj_a = nn.Linear(D, self.Hv, bias=False)
        self.conv1d = nn.Conv1d(C, C, self.K, groups=C, padding=self.K - 1, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.Hv))
        self.A_log = nn.Parameter(torch.zeros(self.Hv))
        self.norm = GatedRMSNorm(self.dv, cfg["rms_norm_eps"])
        self.out_proj = nn.Linear(self.Hv * self.dv, D, bias=False)
        self.recurrent = False  # True: delta_rule_recurrent (golden cross-check); False: chunked

    def forward(self, x):
        B, T, _ = x.shape
        Hk, dk, Hv, dv = self.Hk, self.dk, self.Hv, self.dv
        mixed = F.silu(self.conv1d(self.in_proj_qkv(x).transpose(1, 2))[..., :T]).transpose(1, 2)  # [B, T, C]
        q = mixed[..., :Hk * dk].reshape(B, T, Hk, dk)
        k = mixed[..., Hk * dk:2 * Hk * dk].reshape(B, T, Hk, dk)
        v = mixed[..., 2 * Hk * dk:].reshape(B, T, Hv, dv)
        z = self.in_proj_z(x).reshape(B, T, Hv, dv)
        beta = torch.sigmoid(self.in_proj_b(x))  # [B, T, Hv]
        g = -self.A_log.exp() * F.softplus(self.in_proj_a(x) + self.dt_bias)
        rep = Hv // Hk
        if rep > 1:
            q = q.repeat_interleave(rep, dim=2)
            k = k.repeat_interleave(rep, dim=2)
        q, k = l2norm(q).transpose(1, 2), l2norm(k).transpose(1, 2)  # [B, Hv, T, dk]
        rule = delta_rule_recurrent if self.recurrent else delta_rule_chunked
        o, _ = rule(q, k, v.transpose(1, 2), beta.transpose(1, 2), g.transpose(1, 2))
        y = self.norm(o.transpose(1, 2), z)  # [B, T, Hv, dv]
        return self.out_proj(y.reshape(B, T, Hv * dv))


class GatedAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D, H, KV, dh = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        if cfg.get("attention_bias", False):
            raise ValueError("config.json: attention_bias true is not supported by zoo/train/qwen35.py")
        self.H, self.KV, self.dh = H, KV, dh
        self.q_proj = nn.Linear(D, H * 2 * dh, bias=False)
        self.k_proj = nn.Linear(D, KV * dh, bias=False)
        self.v_proj = nn.Linear(D, KV * dh, bias=False)
        self.o_proj = nn.Linear(H * dh, D, bias=False)
        self.q_norm = OnePlusRMSNorm(dh, cfg["rms_norm_eps"])
        self.k_norm = OnePlusRMSNorm(dh, cfg["rms_norm_eps"])

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        H, KV, dh = self.H, self.KV, self.dh
        qg = self.q_proj(x).view(B, T, H, 2 * dh)
        q, gate = qg[..., :dh], qg[..., dh:]  # per head: dh query rows, then dh gate rows
        q = self.q_norm(q).transpose(1, 2)  # [B, H, T, dh]
        k = self.k_norm(self.k_proj(x).view(B, T, KV, dh)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, KV, dh).transpose(1, 2)
        rd = cos.shape[-1]
        q = torch.cat((q[..., :rd] * cos + rotate_half(q[..., :rd]) * sin, q[..., rd:]), dim=-1)
        k = torch.cat((k[..., :rd] * cos + rotate_half(k[..., :rd]) * sin, k[..., rd:]), dim=-1)
        if H > KV:
            k = k.repeat_interleave(H // KV, dim=1)
            v = v.repeat_interleave(H // KV, dim=1)
        w = torch.softmax(torch.matmul(q, k.transpose(2, 3)) * dh ** -0.5 + mask, dim=-1)
        z = torch.matmul(w, v).transpose(1, 2).reshape(B, T, H * dh)
        return self.o_proj(z * torch.sigmoid(gate.reshape(B, T, H * dh)))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D, Fd = cfg["hidden_size"], cfg["intermediate_size"]
        if cfg.get("hidden_act", "silu") != "silu":
            raise ValueError(f"config.json: hidden_act {cfg['hidden_act']!r} is not supported by zoo/train/qwen35.py (silu only)")
        self.gate_proj = nn.Linear(D, Fd, bias=False)
        self.up_proj = nn.Linear(D, Fd, bias=False)
        self.down_proj = nn.Linear(Fd, D, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg, kind):
        super().__init__()
        D, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        self.kind = kind
        self.input_layernorm = OnePlusRMSNorm(D, eps)
        if kind == "linear_attention":
            self.linear_attn = GatedDeltaNet(cfg)
        elif kind == "full_attention":
            self.self_attn = GatedAttention(cfg)
        else:
            raise ValueError(f"config.json: layer_types entry {kind!r} is not supported (linear_attention, full_attention)")
        self.post_attention_layernorm = OnePlusRMSNorm(D, eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, mask):
        h = self.input_layernorm(x)
        if self.kind == "linear_attention":
            x = x + self.linear_attn(h)
        else:
            x = x + self.self_attn(h, cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList([Layer(cfg, kind) for kind in cfg["layer_types"]])
        self.norm = OnePlusRMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


def rope_of(cfg):
    """(θ, rotated dims) of a qwen3_5_text config (rope_parameters, or the older flat fields)."""
    rp = cfg.get("rope_parameters") or {}
    if rp.get("rope_type", "default") != "default":
        raise ValueError(f"config.json: rope_parameters.rope_type {rp['rope_type']!r} is not supported (default only)")
    theta = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))
    factor = rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    return float(theta), int(cfg["head_dim"] * factor)


class LM(nn.Module):
    """Qwen3_5ForCausalLM with tied embeddings: forward(ids [B, T]) → logits [B, T, V]."""

    def __init__(self, cfg):
        super().__init__()
        if not cfg.get("tie_word_embeddings", True):
            raise ValueError("config.json: tie_word_embeddings false is not supported by zoo/train/qwen35.py")
        self.cfg = cfg
        self.theta, self.rd = rope_of(cfg)
        self.model = Body(cfg)

    def set_recurrent(self, on):
        for layer in self.model.layers:
            if layer.kind == "linear_attention":
                layer.linear_attn.recurrent = on

    def forward(self, ids):
        T = ids.shape[1]
        cos, sin = rope_cos_sin(T, self.rd, self.theta)
        mask = torch.full((T, T), float("-inf")).triu(1)
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin, mask)
        return F.linear(self.model.norm(x), self.model.embed_tokens.weight)

    def init_weights(self, std, gen):
        """HF's init for Linear/Embedding (N(0, std²)), (1+w) norms 0 and the gated
        norm 1; the DeltaNet's decay parameters as model/qwen35.go generates them
        (A = e^{A_log} ~ U[1, 16], dt = softplus(dt_bias) log-uniform in [1e-3, 0.1],
        Mamba-2's ranges); the conv keeps PyTorch's default (Kaiming-uniform)."""
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=std)
            elif isinstance(m, OnePlusRMSNorm):
                nn.init.zeros_(m.weight)
            elif isinstance(m, GatedRMSNorm):
                nn.init.ones_(m.weight)
            elif isinstance(m, GatedDeltaNet):
                with torch.no_grad():
                    A = 1 + 15 * torch.rand(m.Hv, generator=gen)
                    m.A_log.copy_(A.log())
                    dt = torch.exp(math.log(1e-3) + torch.rand(m.Hv, generator=gen) * (math.log(0.1) - math.log(1e-3)))
                    m.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus⁻¹(dt)


def make_config(args):
    """config.json in the fields Qwen3_5TextConfig.save_pretrained writes (as the golden case)."""
    types = ["full_attention" if (l + 1) % args.interval == 0 else "linear_attention" for l in range(args.layers)]
    rd = int(args.head_dim * args.partial_rotary)
    half = rd // 2
    section = [half // 3 + (1 if i < half % 3 else 0) for i in range(3)]
    cfg = {
        "architectures": ["Qwen3_5ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_output_gate": True,
        "bos_token_id": None,
        "dtype": "float32",
        "eos_token_id": 2047,
        "head_dim": args.head_dim,
        "hidden_act": "silu",
        "hidden_size": args.hidden,
        "initializer_range": args.init_std,
        "intermediate_size": args.intermediate,
        "layer_types": types,
        "linear_conv_kernel_dim": args.conv,
        "linear_key_head_dim": args.linear_dim,
        "linear_num_key_heads": args.linear_key_heads,
        "linear_num_value_heads": args.linear_value_heads,
        "linear_value_head_dim": args.linear_dim,
        "max_position_embeddings": 4096,
        "model_type": "qwen3_5_text",
        "num_attention_heads": args.heads,
        "num_hidden_layers": args.layers,
        "num_key_value_heads": args.kv_heads,
        "pad_token_id": None,
        "partial_rotary_factor": args.partial_rotary,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {"mrope_interleaved": True, "mrope_section": section,
                            "partial_rotary_factor": args.partial_rotary, "rope_theta": 10000000,
                            "rope_type": "default"},
        "tie_word_embeddings": True,
        "transformers_version": "5.8.0.dev0",
        "use_cache": True,
        "vocab_size": args.vocab,
    }
    return dict(sorted(cfg.items()))


def load_checkpoint(d):
    """LM from config.json + model.safetensors of a checkpoint folder, in eval mode."""
    cfg_path = os.path.join(d, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    if cfg.get("model_type") != "qwen3_5_text":
        sys.exit(f"{cfg_path}: model_type {cfg.get('model_type')!r}: zoo/train/qwen35.py runs qwen3_5_text only")
    if "layer_types" not in cfg:
        n = cfg.get("full_attention_interval", 4)
        cfg["layer_types"] = ["full_attention" if (l + 1) % n == 0 else "linear_attention"
                              for l in range(cfg["num_hidden_layers"])]
    return common.load_weights(LM(cfg), d)


def run_eval(args):
    common.run_eval(args, load_checkpoint)


def check_golden(args):
    """Compare logits with the golden case, in the chunked and the recurrent
    form of the delta rule: max|got − ref| / max|ref| ≤ 1e-4."""
    torch.set_num_threads(args.threads)
    d = args.check_golden
    model = load_checkpoint(d)
    ok = True
    for recurrent in (False, True):
        model.set_recurrent(recurrent)
        form = "recurrent" if recurrent else "chunked"
        ok = common.golden_ok(model, d, f" ({form} delta rule)") and ok
    if not ok:
        sys.exit(1)


def run_train(args):
    if not args.out:
        sys.exit("--out is required for training")
    cfg = make_config(args)
    torch.manual_seed(args.seed)
    model = LM(cfg)
    model.init_weights(args.init_std, torch.Generator().manual_seed(args.seed + 7))
    params = sum(p.numel() for p in model.parameters())
    print(f"{params} parameters, layers {cfg['layer_types']}", flush=True)
    # No weight decay on vectors (norms, dt_bias, A_log) and on the conv filters.
    log = common.train(model, args, no_decay=lambda n, p: p.dim() < 2 or "conv1d" in n)
    out = args.out
    common.save_safetensors(os.path.join(out, "model.safetensors"), dict(model.state_dict()))
    common.write_json(os.path.join(out, "config.json"), cfg)
    common.copy_tokenizer(out)
    name = os.path.basename(os.path.normpath(out))
    common.write_json(os.path.join(out, "zoo.json"), {"name": name, "arch": "qwen3_5", "script": "train/qwen35.py",
                                                      "lm": True, "demo": True})
    summary = ("Qwen3.5-style hybrid decoder (Gated DeltaNet + gated softmax attention, 3:1 as the released models), "
               "trained here with zoo/train/qwen35.py; saved in the HF qwen3_5_text layout.")
    extra = (f"Architecture: {args.layers} layers {cfg['layer_types']}, hidden {args.hidden}, SwiGLU {args.intermediate}, "
             f"vocab {args.vocab}, tied embeddings, (1+w) RMSNorms eps 1e-6. Softmax layers: {args.heads} heads / "
             f"{args.kv_heads} KV heads of {args.head_dim}, per-head sigmoid output gate packed in q_proj, QK-norm, "
             f"RoPE θ 1e7 on the first {int(args.head_dim * args.partial_rotary)} dims of each head. Gated DeltaNet layers: "
             f"{args.linear_key_heads} key / {args.linear_value_heads} value heads of {args.linear_dim}, causal conv "
             f"{args.conv} + SiLU, delta rule in chunks of {CHUNK} (exact). Init: Linear/Embedding N(0, {args.init_std}²), "
             f"A = e^A_log ~ U[1, 16], softplus(dt_bias) log-uniform in [1e-3, 0.1]; no weight decay on vectors and conv filters.")
    common.model_card(out, name, summary, args, log, params, extra)


def main():
    p = common.base_args(__doc__.split("\n")[0], steps=600, max_minutes=12.0)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--interval", type=int, default=4, help="every N-th layer is softmax attention (full_attention_interval)")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--partial-rotary", type=float, default=0.25)
    p.add_argument("--linear-key-heads", type=int, default=2)
    p.add_argument("--linear-value-heads", type=int, default=4)
    p.add_argument("--linear-dim", type=int, default=32)
    p.add_argument("--conv", type=int, default=4)
    p.add_argument("--intermediate", type=int, default=384)
    p.add_argument("--init-std", type=float, default=0.02)
    p.add_argument("--check-golden", help="golden case folder (qwen35_text): compare logits at rel. ≤ 1e-4")
    args = p.parse_args()
    if args.eval:
        if not args.ids or not args.logits:
            sys.exit("--eval needs --ids and --logits")
        run_eval(args)
    elif args.check_golden:
        check_golden(args)
    else:
        run_train(args)


if __name__ == "__main__":
    main()
