"""Falcon-H1-style hybrid decoder LM of the reference zoo (attention and Mamba-2 side by side in every layer).

The module reproduces Hugging Face's FalconH1ForCausalLM (model_type
falcon_h1, eager attention, torch fallback mixer, no cache) from the facts
of shared/golden/falcon_h1/README.md and the Mamba-2 paper (Dao & Gu 2024),
in the HF falcon_h1 layout model/falcon_h1.go reads:

  * every layer: h = input_layernorm(x);
        x += ssm_out_multiplier·mamba(h) + attention_out_multiplier·self_attn(attention_in_multiplier·h)
        x += down_multiplier·down_proj(up_proj(h2) ⊙ silu(gate_multiplier·gate_proj(h2))),  h2 = pre_ff_layernorm(x)
    (mlp_multipliers = [gate_multiplier, down_multiplier]); embeddings ×
    embedding_multiplier; logits = lm_head(final_layernorm(x)) × lm_head_multiplier,
    untied head; RMSNorm w·x·rsqrt(mean(x²) + eps) in float32;
  * attention: grouped-query, no biases, k × key_multiplier right after
    k_proj (before RoPE), rotate-half RoPE (rope_parameters.rope_theta),
    scores scaled by head_dim^-½, causal;
  * Mamba-2 mixer (FalconH1Mixer.torch_forward's equations): u = ssm_in_multiplier·h;
    in_proj(u) × mup_vector, the per-section ssm_multipliers over
    [z (I) | x (I) | B (G·N) | C (G·N) | dt (H)]; [x | B | C] through the
    depthwise causal conv (kernel K, bias) and SiLU; dt = clamp(softplus(dt +
    dt_bias), time_step_limit); A = −exp(A_log); head h reads B/C group
    h / (H/G); per head, with S₀ = 0,
        S_t = exp(dt_t·A)·S_{t−1} + dt_t·x_t·B_tᵀ,   y_t = S_t·C_t + D·x_t
    computed in its dual (SSD, quadratic) form y = M·x + D·x with
        M[t, s] = (C_t·B_s)·exp(Σ_{r=s+1..t} dt_r·A)·dt_s   (s ≤ t)
    (ssd_quadratic, the training default; the segment sums are cumulative
    sums over each column, never differences of prefix sums) or the plain
    recurrence (ssd_recurrent, --check-golden runs both); then the gated
    RMSNorm with mamba_norm_before_gate false, norm(y ⊙ silu(z)) per group
    of I/G channels, × norm.weight; out_proj.

Modes (as zoo/train/lm.py):
  train:        python3 zoo/train/falcon_h1.py --out zoo/checkpoints/falcon_h1_tiny [--steps N ...]
  eval:         python3 zoo/train/falcon_h1.py --eval <ckpt> --ids <ids.json> --logits <out.safetensors>
  golden check: python3 zoo/train/falcon_h1.py --check-golden /work/shared/golden/falcon_h1

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
from lm import RMSNorm, rope_cos_sin, rotate_half  # noqa: E402  (zoo/train/lm.py)


def ssd_quadratic(x, dt, a, b, c):
    """The SSD dual form: x [B, T, H, P], dt [B, T, H], A [H], B and C
    [B, T, H, N] → y [B, T, H, P] without the D skip, y_t = Σ_{s≤t} M[t, s]·x_s,
    M[t, s] = (C_t·B_s)·exp(Σ_{r=s+1..t} dt_r·A)·dt_s. The segment sums are
    cumulative sums down each column s of the strictly lower triangle, so a
    near-diagonal sum never comes from two large prefix sums."""
    T = x.shape[1]
    da = (dt * a).permute(0, 2, 1)  # [B, H, T]
    strict = torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-1)
    seg = torch.cumsum(da[..., :, None].expand(*da.shape, T).masked_fill(~strict, 0.0), dim=-2)  # [B, H, t, s]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    decay = torch.exp(seg.masked_fill(~causal, float("-inf")))
    cb = torch.einsum("bthn,bshn->bhts", c, b)
    m = cb * decay * dt.permute(0, 2, 1)[:, :, None, :]  # × dt_s
    return torch.einsum("bhts,bshp->bthp", m, x)


def ssd_recurrent(x, dt, a, b, c):
    """The recurrence S_t = exp(dt_t·A)·S_{t−1} + dt_t·x_t·B_tᵀ, y_t = S_t·C_t
    (shapes as ssd_quadratic), one step at a time."""
    Bsz, T, H, P = x.shape
    S = x.new_zeros(Bsz, H, P, b.shape[-1])
    ys = []
    for t in range(T):
        S = torch.exp(dt[:, t] * a)[:, :, None, None] * S + (dt[:, t, :, None] * x[:, t])[..., None] * b[:, t, :, None, :]
        ys.append(torch.einsum("bhpn,bhn->bhp", S, c[:, t]))
    return torch.stack(ys, dim=1)


class Mixer(nn.Module):
    """FalconH1Mixer: the Mamba-2 mixer with Falcon-H1's ssm_in multiplier and mup_vector."""

    def __init__(self, cfg):
        super().__init__()
        D = cfg["hidden_size"]
        H, P, N, G, K = (cfg["mamba_n_heads"], cfg["mamba_d_head"], cfg["mamba_d_state"], cfg["mamba_n_groups"],
                         cfg["mamba_d_conv"])
        I = cfg["mamba_d_ssm"]
        if H * P != I:
            raise ValueError(f"config.json: mamba_n_heads {H} × mamba_d_head {P} ≠ mamba_d_ssm {I}")
        if H % G or I % G:
            raise ValueError(f"config.json: mamba_n_groups {G} must divide mamba_n_heads {H} and mamba_d_ssm {I}")
        for field, want in (("mamba_rms_norm", True), ("mamba_norm_before_gate", False), ("mamba_proj_bias", False),
                            ("projectors_bias", False), ("mamba_conv_bias", True)):
            if cfg.get(field, want) != want:
                raise ValueError(f"config.json: {field} {cfg[field]} is not supported by zoo/train/falcon_h1.py (only {want})")
        lo, hi = cfg.get("time_step_limit", [0.0, float("inf")])
        if lo > hi:
            raise ValueError(f"config.json: time_step_limit [{lo}, {hi}] has min > max")
        self.H, self.P, self.N, self.G, self.I, self.K = H, P, N, G, I, K
        self.lo, self.hi, self.eps = float(lo), float(hi), cfg["rms_norm_eps"]
        self.in_mult = cfg.get("ssm_in_multiplier", 1.0)
        conv_dim = I + 2 * G * N
        self.in_proj = nn.Linear(D, I + conv_dim + H, bias=False)
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, K, groups=conv_dim, padding=K - 1, bias=True)
        self.dt_bias = nn.Parameter(torch.zeros(H))
        self.A_log = nn.Parameter(torch.zeros(H))
        self.D = nn.Parameter(torch.ones(H))
        self.norm = nn.Parameter(torch.ones(I))  # saved as norm.weight (hf_state_dict)
        self.out_proj = nn.Linear(I, D, bias=False)
        m = cfg.get("ssm_multipliers", [1.0] * 5)
        sizes = [I, I, G * N, G * N, H]
        self.register_buffer("mup_vector", torch.cat([torch.full((n,), float(v)) for n, v in zip(sizes, m)]),
                             persistent=False)
        self.recurrent = False

    def forward(self, h):
        Bsz, T, _ = h.shape
        H, P, N, G, I = self.H, self.P, self.N, self.G, self.I
        proj = self.in_proj(h * self.in_mult) * self.mup_vector  # in_proj split [z | xBC | dt]
        z, xbc, dt = proj.split([I, I + 2 * G * N, H], dim=-1)
        xbc = F.silu(self.conv1d(xbc.transpose(1, 2))[..., :T].transpose(1, 2))  # causal conv + SiLU
        x, b, c = xbc.split([I, G * N, G * N], dim=-1)
        dt = torch.clamp(F.softplus(dt + self.dt_bias), self.lo, self.hi)  # dt softplus with bias and limits
        a = -torch.exp(self.A_log)
        x = x.reshape(Bsz, T, H, P)
        b = b.reshape(Bsz, T, G, N).repeat_interleave(H // G, dim=2)  # head h reads group h/(H/G)
        c = c.reshape(Bsz, T, G, N).repeat_interleave(H // G, dim=2)
        y = (ssd_recurrent if self.recurrent else ssd_quadratic)(x, dt, a, b, c)
        y = (y + self.D[:, None] * x).reshape(Bsz, T, I)  # D skip
        g = (y * F.silu(z)).reshape(Bsz, T, G, I // G)  # gated RMSNorm, per group, gate first
        g = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.out_proj(self.norm * g.reshape(Bsz, T, I))


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
        dh = cfg.get("head_dim") or D // H
        if cfg.get("attention_bias", False):
            raise ValueError("config.json: attention_bias true is not supported by zoo/train/falcon_h1.py")
        self.H, self.KV, self.dh = H, KV, dh
        self.key_mult = cfg.get("key_multiplier", 1.0)
        self.q_proj = nn.Linear(D, H * dh, bias=False)
        self.k_proj = nn.Linear(D, KV * dh, bias=False)
        self.v_proj = nn.Linear(D, KV * dh, bias=False)
        self.o_proj = nn.Linear(H * dh, D, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        H, KV, dh = self.H, self.KV, self.dh
        q = self.q_proj(x).view(B, T, H, dh).transpose(1, 2)
        k = (self.k_proj(x) * self.key_mult).view(B, T, KV, dh).transpose(1, 2)  # key_multiplier before RoPE
        v = self.v_proj(x).view(B, T, KV, dh).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if H > KV:
            k = k.repeat_interleave(H // KV, dim=1)
            v = v.repeat_interleave(H // KV, dim=1)
        w = torch.softmax(torch.matmul(q, k.transpose(2, 3)) * dh ** -0.5 + mask, dim=-1)
        return self.o_proj(torch.matmul(w, v).transpose(1, 2).reshape(B, T, H * dh))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D, F_ = cfg["hidden_size"], cfg["intermediate_size"]
        if cfg.get("mlp_bias", False):
            raise ValueError("config.json: mlp_bias true is not supported by zoo/train/falcon_h1.py")
        self.gate_mult, self.down_mult = cfg.get("mlp_multipliers", [1.0, 1.0])
        self.gate_proj = nn.Linear(D, F_, bias=False)
        self.up_proj = nn.Linear(D, F_, bias=False)
        self.down_proj = nn.Linear(F_, D, bias=False)

    def forward(self, x):
        return self.down_proj(self.up_proj(x) * F.silu(self.gate_proj(x) * self.gate_mult)) * self.down_mult


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        self.input_layernorm = RMSNorm(D, eps)
        self.mamba = Mixer(cfg)
        self.self_attn = Attention(cfg)
        self.pre_ff_layernorm = RMSNorm(D, eps)
        self.feed_forward = MLP(cfg)
        self.attn_in = cfg.get("attention_in_multiplier", 1.0)
        self.attn_out = cfg.get("attention_out_multiplier", 1.0)
        self.ssm_out = cfg.get("ssm_out_multiplier", 1.0)

    def forward(self, x, cos, sin, mask):
        h = self.input_layernorm(x)
        x = x + self.ssm_out * self.mamba(h) + self.attn_out * self.self_attn(h * self.attn_in, cos, sin, mask)
        return x + self.feed_forward(self.pre_ff_layernorm(x))


class Body(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList([Layer(cfg) for _ in range(cfg["num_hidden_layers"])])
        self.final_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


class LM(nn.Module):
    """FalconH1ForCausalLM: forward(ids [B, T]) → logits [B, T, V]."""

    def __init__(self, cfg):
        super().__init__()
        if cfg.get("tie_word_embeddings", False):
            raise ValueError("config.json: tie_word_embeddings true is not supported by zoo/train/falcon_h1.py")
        rp = cfg.get("rope_parameters") or {"rope_type": "default", "rope_theta": cfg.get("rope_theta", 10000.0)}
        if rp.get("rope_type", "default") != "default":
            raise ValueError(f"config.json: rope type {rp.get('rope_type')!r} is not supported by zoo/train/falcon_h1.py")
        self.cfg, self.theta = cfg, float(rp["rope_theta"])
        self.dh = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        self.model = Body(cfg)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)

    def set_recurrent(self, on):
        for layer in self.model.layers:
            layer.mamba.recurrent = on

    def forward(self, ids):
        T = ids.shape[1]
        cos, sin = rope_cos_sin(T, self.dh, self.theta)
        t = torch.arange(T)
        mask = torch.where(t[None, :] <= t[:, None], torch.tensor(0.0), torch.tensor(float("-inf")))
        x = self.model.embed_tokens(ids) * self.cfg.get("embedding_multiplier", 1.0)
        for layer in self.model.layers:
            x = layer(x, cos, sin, mask)
        return self.lm_head(self.model.final_layernorm(x)) * self.cfg.get("lm_head_multiplier", 1.0)

    def init_weights(self, std, gen):
        """Linear and Embedding N(0, std²); conv1d as torch's default (by the
        global seed); norms 1; Mamba-2's initialisation of the mixer vectors:
        A = exp(A_log) ~ U[1, 16], softplus(dt_bias) log-uniform in
        [time_step_min, time_step_max], D = 1."""
        lo, hi = self.cfg["time_step_min"], self.cfg["time_step_max"]
        for name, p in self.named_parameters():
            if "conv1d" in name:
                continue
            if name.endswith("norm.weight") or name.endswith("mamba.norm") or name.endswith(".D"):
                nn.init.ones_(p)
            elif name.endswith("A_log"):
                with torch.no_grad():
                    p.copy_(torch.log(torch.empty(p.shape).uniform_(1.0, 16.0, generator=gen)))
            elif name.endswith("dt_bias"):
                with torch.no_grad():
                    u = torch.rand(p.shape, generator=gen)
                    dt = torch.exp(u * (math.log(hi) - math.log(lo)) + math.log(lo)).clamp(min=1e-4)
                    p.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus⁻¹(dt)
            else:
                with torch.no_grad():
                    p.copy_(torch.randn(p.shape, generator=gen) * std)

    def hf_state_dict(self):
        """The state dict in HF names (the mixer's norm is norm.weight)."""
        return {(k + ".weight" if k.endswith("mamba.norm") else k): v for k, v in self.state_dict().items()}

    def load_hf(self, tensors):
        return {(k[:-len(".weight")] if k.endswith("mamba.norm.weight") else k): v for k, v in tensors.items()}


def make_config(args):
    """config.json in the fields FalconH1Config.save_pretrained writes
    (transformers 5, as the golden case)."""
    I = args.ssm_heads * args.ssm_head_dim
    if I % args.hidden:
        sys.exit(f"--ssm-heads {args.ssm_heads} × --ssm-head-dim {args.ssm_head_dim} = {I} must be a multiple of --hidden {args.hidden} (mamba_expand)")
    cfg = {
        "architectures": ["FalconH1ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attention_in_multiplier": args.mult_attn_in,
        "attention_out_multiplier": args.mult_attn_out,
        "bos_token_id": None,
        "dtype": "float32",
        "embedding_multiplier": args.mult_embedding,
        "eos_token_id": 2047,
        "hidden_act": "silu",
        "hidden_size": args.hidden,
        "initializer_range": args.init_std,
        "intermediate_size": args.intermediate,
        "key_multiplier": args.mult_key,
        "lm_head_multiplier": args.mult_lm_head,
        "mamba_chunk_size": args.chunk,
        "mamba_conv_bias": True,
        "mamba_d_conv": args.conv,
        "mamba_d_head": args.ssm_head_dim,
        "mamba_d_ssm": I,
        "mamba_d_state": args.state,
        "mamba_expand": I // args.hidden,
        "mamba_n_groups": args.groups,
        "mamba_n_heads": args.ssm_heads,
        "mamba_norm_before_gate": False,
        "mamba_proj_bias": False,
        "mamba_rms_norm": True,
        "max_position_embeddings": 4096,
        "mlp_bias": False,
        "mlp_multipliers": [args.mult_gate, args.mult_down],
        "model_type": "falcon_h1",
        "num_attention_heads": args.heads,
        "num_hidden_layers": args.layers,
        "num_key_value_heads": args.kv_heads,
        "num_logits_to_keep": 1,
        "pad_token_id": None,
        "projectors_bias": False,
        "rms_norm_eps": 1e-05,
        "rope_parameters": {"rope_theta": args.rope_theta, "rope_type": "default"},
        "ssm_in_multiplier": args.mult_ssm_in,
        "ssm_multipliers": args.mult_ssm,
        "ssm_out_multiplier": args.mult_ssm_out,
        "tie_word_embeddings": False,
        "time_step_limit": [args.dt_min, args.dt_max],
        "time_step_max": 0.1,
        "time_step_min": 0.001,
        "transformers_version": "5.8.0.dev0",
        "use_cache": True,
        "vocab_size": args.vocab,
    }
    return cfg


def load_checkpoint(d):
    """LM from config.json + model.safetensors of a checkpoint folder, in eval mode."""
    cfg_path = os.path.join(d, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    if cfg.get("model_type") != "falcon_h1":
        sys.exit(f"{cfg_path}: model_type {cfg.get('model_type')!r}: zoo/train/falcon_h1.py runs falcon_h1 only")
    try:
        model = LM(cfg)
    except ValueError as e:
        sys.exit(f"{cfg_path}: {e}")
    return common.load_weights(model, d, rename=model.load_hf)


def run_eval(args):
    common.run_eval(args, load_checkpoint)


def check_golden(args):
    """Compare logits with the golden case, with the SSM in its quadratic
    (SSD) and its recurrent form: max|got − ref| / max|ref| ≤ 1e-4."""
    torch.set_num_threads(args.threads)
    d = args.check_golden
    model = load_checkpoint(d)
    ok = True
    for recurrent in (False, True):
        model.set_recurrent(recurrent)
        ok = common.golden_ok(model, d, f" ({'recurrent' if recurrent else 'quadratic SSD'} scan)") and ok
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
    print(f"{params} parameters", flush=True)
    # No weight decay on vectors (norms, dt_bias, A_log, D) and on the conv filters.
    log = common.train(model, args, no_decay=lambda n, p: p.dim() < 2 or "conv1d" in n)
    out = args.out
    common.save_safetensors(os.path.join(out, "model.safetensors"), model.hf_state_dict())
    common.write_json(os.path.join(out, "config.json"), cfg)
    common.copy_tokenizer(out)
    name = os.path.basename(os.path.normpath(out))
    common.write_json(os.path.join(out, "zoo.json"), {"name": name, "arch": "falcon_h1", "script": "train/falcon_h1.py",
                                                      "lm": True, "demo": True})
    summary = ("Falcon-H1-style hybrid decoder (softmax attention and a Mamba-2 mixer side by side in every layer, "
               "with Falcon-H1's multipliers), trained here with zoo/train/falcon_h1.py; saved in the HF falcon_h1 layout.")
    I = args.ssm_heads * args.ssm_head_dim
    extra = (f"Architecture: {args.layers} layers, hidden {args.hidden}, SwiGLU {args.intermediate}, vocab {args.vocab}, "
             f"untied head, RMSNorm eps 1e-5. Attention: {args.heads} heads / {args.kv_heads} KV heads of "
             f"{args.hidden // args.heads}, no biases, RoPE θ {args.rope_theta:g}. Mamba-2 mixer: {args.ssm_heads} heads of "
             f"{args.ssm_head_dim} (width {I}), state {args.state}, {args.groups} B/C groups, causal conv {args.conv} "
             f"with bias + SiLU, dt limits [{args.dt_min}, {args.dt_max}], gated RMSNorm per group (gate first); "
             f"trained with the SSD quadratic form (mamba_chunk_size {args.chunk} is recorded, not used numerically). "
             f"Multipliers (names as the release's config; values chosen here so that each is exercised, not the "
             f"release's µP-tuned ones): embedding {args.mult_embedding}, lm_head {args.mult_lm_head}, key {args.mult_key}, "
             f"attention_in {args.mult_attn_in}, attention_out {args.mult_attn_out}, ssm_in {args.mult_ssm_in}, "
             f"ssm_out {args.mult_ssm_out}, ssm_multipliers {args.mult_ssm} (z, x, B, C, dt), mlp_multipliers "
             f"[{args.mult_gate}, {args.mult_down}] (gate, down). Init: Linear/Embedding N(0, {args.init_std}²), "
             f"conv1d torch's default, A = e^A_log ~ U[1, 16], softplus(dt_bias) log-uniform in [1e-3, 0.1], D = 1; "
             f"no weight decay on vectors and conv filters.")
    common.model_card(out, name, summary, args, log, params, extra)


def main():
    p = common.base_args(__doc__.split("\n")[0], steps=600, max_minutes=12.0)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--intermediate", type=int, default=192)
    p.add_argument("--ssm-heads", type=int, default=4)
    p.add_argument("--ssm-head-dim", type=int, default=32)
    p.add_argument("--state", type=int, default=16)
    p.add_argument("--groups", type=int, default=2)
    p.add_argument("--conv", type=int, default=4)
    p.add_argument("--chunk", type=int, default=64, help="mamba_chunk_size written to config.json")
    p.add_argument("--dt-min", type=float, default=0.001, help="time_step_limit[0]")
    p.add_argument("--dt-max", type=float, default=1.0, help="time_step_limit[1]")
    p.add_argument("--rope-theta", type=float, default=100000.0)
    p.add_argument("--mult-embedding", type=float, default=2.0)
    p.add_argument("--mult-lm-head", type=float, default=0.5)
    p.add_argument("--mult-key", type=float, default=0.8)
    p.add_argument("--mult-attn-in", type=float, default=1.1)
    p.add_argument("--mult-attn-out", type=float, default=0.9)
    p.add_argument("--mult-ssm-in", type=float, default=1.2)
    p.add_argument("--mult-ssm-out", type=float, default=0.8)
    p.add_argument("--mult-ssm", type=float, nargs=5, default=[1.1, 0.9, 1.2, 0.8, 1.1],
                   help="ssm_multipliers over [z, x, B, C, dt]")
    p.add_argument("--mult-gate", type=float, default=0.9, help="mlp_multipliers[0]")
    p.add_argument("--mult-down", type=float, default=1.1, help="mlp_multipliers[1]")
    p.add_argument("--init-std", type=float, default=0.02)
    p.add_argument("--check-golden", help="golden case folder (falcon_h1): compare logits at rel. ≤ 1e-4")
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
