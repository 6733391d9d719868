"""gpt-oss-style decoder LM of the reference zoo (sinks, mixture of experts, alternating windows).

The module reproduces Hugging Face's GptOssForCausalLM (model_type gpt_oss,
eager attention, eager experts, no cache) from the facts of
shared/golden/gpt_oss/README.md, in the HF gpt_oss layout:

  * every layer: x += o(attn(input_layernorm(x))); x += moe(post_attention_layernorm(x));
    RMSNorm x·rsqrt(mean(x²) + eps)·w in float32; untied LM head after the final norm;
  * attention: grouped-query with q/k/v/o biases, YaRN RoPE (rotate-half over the
    two halves; cos and sin times the attention factor 0.1·ln(factor) + 1), scores
    scaled by head_dim^-½, a learned sink logit per head (self_attn.sinks [H])
    appended as an extra softmax column and dropped afterwards, so rows sum to
    1 − sink; layer_types alternate sliding_attention (key s seen by query t iff
    t − window < s ≤ t) and full_attention;
  * mixture of experts: router logits x·Wᵀ + b, top-k of the logits, softmax over
    those k; each expert gate_up = x·gate_up_proj[e] + b (stored (in, out)), gate
    = gate_up[..., ::2] clamped above at 7, up = gate_up[..., 1::2] clamped to
    [−7, 7], (up + 1)·gate·sigmoid(1.702·gate), then ·down_proj[e] + b, weighted
    by the routing weight.

Modes (as zoo/train/lm.py):
  train:        python3 zoo/train/gpt_oss.py --out zoo/checkpoints/gpt_oss_tiny [--steps N ...]
  eval:         python3 zoo/train/gpt_oss.py --eval <ckpt> --ids <ids.json> --logits <out.safetensors>
  golden check: python3 zoo/train/gpt_oss.py --check-golden /work/shared/golden/gpt_oss

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
from lm import RMSNorm, rotate_half  # noqa: E402  (zoo/train/lm.py)

SWIGLU_LIMIT = 7.0  # gpt-oss's clamp of the expert gate and up values
SWIGLU_ALPHA = 1.702  # its sigmoid's slope


def yarn_cos_sin(T, dh, rp):
    """cos, sin [T, dh] of YaRN RoPE (rope_parameters rp) in transformers' float32
    arithmetic, times the attention factor."""
    theta, factor = float(rp["rope_theta"]), float(rp["factor"])
    orig = float(rp["original_max_position_embeddings"])
    fast, slow = float(rp.get("beta_fast", 32.0)), float(rp.get("beta_slow", 1.0))
    truncate = rp.get("truncate", True)
    pos_freqs = theta ** (torch.arange(0, dh, 2, dtype=torch.int64).float() / dh)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)

    def corr_dim(rot):
        return (dh * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(theta))

    lo, hi = corr_dim(fast), corr_dim(slow)
    if truncate:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, dh - 1)
    if lo == hi:
        hi += 0.001
    ramp = torch.clamp((torch.arange(dh // 2, dtype=torch.float32) - lo) / (hi - lo), 0, 1)
    extra = 1 - ramp
    inv = interpolation * (1 - extra) + extrapolation * extra
    attn_factor = rp.get("attention_factor")
    if attn_factor is None:
        attn_factor = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
    pos = torch.arange(T, dtype=torch.int64).float()
    freqs = pos[:, None] * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * attn_factor, emb.sin() * attn_factor


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D, H, KV, dh = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        bias = cfg.get("attention_bias", True)
        self.H, self.KV, self.dh = H, KV, dh
        self.q_proj = nn.Linear(D, H * dh, bias=bias)
        self.k_proj = nn.Linear(D, KV * dh, bias=bias)
        self.v_proj = nn.Linear(D, KV * dh, bias=bias)
        self.o_proj = nn.Linear(H * dh, D, bias=bias)
        self.sinks = nn.Parameter(torch.zeros(H))

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        H, KV, dh = self.H, self.KV, self.dh
        q = self.q_proj(x).view(B, T, H, dh).transpose(1, 2)  # [B, H, T, dh]
        k = self.k_proj(x).view(B, T, KV, dh).transpose(1, 2)
        v = self.v_proj(x).view(B, T, KV, dh).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if H > KV:
            k = k.repeat_interleave(H // KV, dim=1)
            v = v.repeat_interleave(H // KV, dim=1)
        s = torch.matmul(q, k.transpose(2, 3)) * dh ** -0.5 + mask
        sink = self.sinks.reshape(1, H, 1, 1).expand(B, H, T, 1)
        logits = torch.cat([s, sink], dim=-1)
        logits = logits - logits.max(dim=-1, keepdim=True).values
        w = torch.softmax(logits, dim=-1)[..., :-1]
        return self.o_proj(torch.matmul(w, v).transpose(1, 2).reshape(B, T, H * dh))


class Router(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.k = cfg["num_experts_per_tok"]
        self.weight = nn.Parameter(torch.zeros(cfg["num_local_experts"], cfg["hidden_size"]))
        self.bias = nn.Parameter(torch.zeros(cfg["num_local_experts"]))

    def forward(self, x):
        """x [N, D] → routing weights [N, k] (softmax over the top-k logits) and indices [N, k]."""
        top, idx = torch.topk(F.linear(x, self.weight, self.bias), self.k, dim=-1)
        return torch.softmax(top, dim=1), idx


class Experts(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        E, D, I = cfg["num_local_experts"], cfg["hidden_size"], cfg["intermediate_size"]
        self.gate_up_proj = nn.Parameter(torch.zeros(E, D, 2 * I))
        self.gate_up_proj_bias = nn.Parameter(torch.zeros(E, 2 * I))
        self.down_proj = nn.Parameter(torch.zeros(E, I, D))
        self.down_proj_bias = nn.Parameter(torch.zeros(E, D))

    def forward(self, x, w, idx):
        """x [N, D], routing weights and indices [N, k] → Σ_k w·expert(x) [N, D], each
        expert on its tokens only."""
        out = torch.zeros_like(x)
        for e in range(self.gate_up_proj.shape[0]):
            tok, slot = torch.nonzero(idx == e, as_tuple=True)
            if tok.numel() == 0:
                continue
            gu = x[tok] @ self.gate_up_proj[e] + self.gate_up_proj_bias[e]
            gate, up = gu[..., ::2], gu[..., 1::2]
            gate = gate.clamp(max=SWIGLU_LIMIT)
            up = up.clamp(min=-SWIGLU_LIMIT, max=SWIGLU_LIMIT)
            glu = gate * torch.sigmoid(gate * SWIGLU_ALPHA)
            y = ((up + 1) * glu) @ self.down_proj[e] + self.down_proj_bias[e]
            out = out.index_add(0, tok, y * w[tok, slot, None])
        return out


class MoE(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.router = Router(cfg)
        self.experts = Experts(cfg)

    def forward(self, x):
        B, T, D = x.shape
        flat = x.reshape(B * T, D)
        w, idx = self.router(flat)
        return self.experts(flat, w, idx).reshape(B, T, D)


class Layer(nn.Module):
    def __init__(self, cfg, kind):
        super().__init__()
        if kind not in ("sliding_attention", "full_attention"):
            raise ValueError(f"config.json: layer_types entry {kind!r} is not supported (sliding_attention, full_attention)")
        D, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        self.sliding = kind == "sliding_attention"
        self.input_layernorm = RMSNorm(D, eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(D, eps)
        self.mlp = MoE(cfg)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList([Layer(cfg, kind) for kind in cfg["layer_types"]])
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


class LM(nn.Module):
    """GptOssForCausalLM: forward(ids [B, T]) → logits [B, T, V]."""

    def __init__(self, cfg):
        super().__init__()
        rp = cfg.get("rope_parameters") or dict(cfg.get("rope_scaling") or {}, rope_theta=cfg.get("rope_theta"))
        if rp.get("rope_type", rp.get("type")) != "yarn":
            raise ValueError(f"config.json: rope type {rp.get('rope_type')!r} is not supported by zoo/train/gpt_oss.py (yarn only)")
        if cfg["num_experts_per_tok"] > cfg["num_local_experts"]:
            raise ValueError("config.json: num_experts_per_tok exceeds num_local_experts")
        if cfg.get("tie_word_embeddings", False):
            raise ValueError("config.json: tie_word_embeddings true is not supported by zoo/train/gpt_oss.py")
        self.cfg, self.rp = cfg, rp
        self.model = Body(cfg)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)

    def forward(self, ids):
        T, W, dh = ids.shape[1], self.cfg["sliding_window"], self.cfg["head_dim"]
        cos, sin = yarn_cos_sin(T, dh, self.rp)
        t = torch.arange(T)
        causal = t[None, :] <= t[:, None]  # [query, key]
        neg = torch.tensor(float("-inf"))
        full_mask = torch.where(causal, torch.tensor(0.0), neg)
        slide_mask = torch.where(causal & (t[None, :] > t[:, None] - W), torch.tensor(0.0), neg)
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin, slide_mask if layer.sliding else full_mask)
        return self.lm_head(self.model.norm(x))

    def init_weights(self, std):
        """Linear, Embedding and expert matrices N(0, std²), biases 0, norms 1, sinks 0."""
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                nn.init.ones_(p)
            elif name.endswith("sinks") or "bias" in name:
                nn.init.zeros_(p)
            else:
                nn.init.normal_(p, mean=0.0, std=std)


def make_config(args):
    """config.json in the fields GptOssConfig.save_pretrained writes (transformers 5, as the golden case)."""
    types = ["sliding_attention" if l % 2 == 0 else "full_attention" for l in range(args.layers)]
    cfg = {
        "architectures": ["GptOssForCausalLM"],
        "attention_bias": True,
        "attention_dropout": 0.0,
        "bos_token_id": None,
        "dtype": "float32",
        "eos_token_id": 2047,
        "head_dim": args.head_dim,
        "hidden_act": "silu",
        "hidden_size": args.hidden,
        "initializer_range": args.init_std,
        "intermediate_size": args.intermediate,
        "layer_types": types,
        "max_position_embeddings": 131072,
        "model_type": "gpt_oss",
        "num_attention_heads": args.heads,
        "num_experts_per_tok": args.top_k,
        "num_hidden_layers": args.layers,
        "num_key_value_heads": args.kv_heads,
        "num_local_experts": args.experts,
        "output_router_logits": False,
        "pad_token_id": None,
        "rms_norm_eps": 1e-05,
        "rope_parameters": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                            "original_max_position_embeddings": 4096, "rope_theta": 150000.0,
                            "rope_type": "yarn", "truncate": False},
        "router_aux_loss_coef": 0.001,
        "sliding_window": args.window,
        "tie_word_embeddings": False,
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
    if cfg.get("model_type") != "gpt_oss":
        sys.exit(f"{cfg_path}: model_type {cfg.get('model_type')!r}: zoo/train/gpt_oss.py runs gpt_oss only")
    if any(k.endswith("_blocks") for k in open_names(d)):
        sys.exit(f"{d}/model.safetensors: MXFP4 expert blocks: zoo/train/gpt_oss.py reads plain expert tensors only")
    return common.load_weights(LM(cfg), d)


def open_names(d):
    """The tensor names of d/model.safetensors (its JSON header)."""
    with open(os.path.join(d, "model.safetensors"), "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return [k for k in json.loads(f.read(n)) if k != "__metadata__"]


def run_eval(args):
    common.run_eval(args, load_checkpoint)


def check_golden(args):
    """Compare logits with the golden case: max|got − ref| / max|ref| ≤ 1e-4."""
    torch.set_num_threads(args.threads)
    d = args.check_golden
    if not common.golden_ok(load_checkpoint(d), d):
        sys.exit(1)


def run_train(args):
    if not args.out:
        sys.exit("--out is required for training")
    cfg = make_config(args)
    torch.manual_seed(args.seed)
    model = LM(cfg)
    model.init_weights(args.init_std)
    params = sum(p.numel() for p in model.parameters())
    E, k, I, D = args.experts, args.top_k, args.intermediate, args.hidden
    active = params - args.layers * (E - k) * (3 * D * I + 2 * I + D)
    print(f"{params} parameters ({active} active per token), layers {cfg['layer_types']}", flush=True)
    log = common.train(model, args)
    out = args.out
    common.save_safetensors(os.path.join(out, "model.safetensors"), dict(model.state_dict()))
    common.write_json(os.path.join(out, "config.json"), cfg)
    common.copy_tokenizer(out)
    name = os.path.basename(os.path.normpath(out))
    common.write_json(os.path.join(out, "zoo.json"), {"name": name, "arch": "gpt_oss", "script": "train/gpt_oss.py",
                                                      "lm": True, "demo": True})
    summary = ("gpt-oss-style decoder (learned attention sinks, a mixture of experts, alternating sliding-window "
               "and full layers, YaRN), trained here with zoo/train/gpt_oss.py; saved in the HF gpt_oss layout "
               "(plain float32 experts, not MXFP4).")
    extra = (f"Architecture: {args.layers} layers {cfg['layer_types']} (sliding window {args.window}), hidden {D}, "
             f"{args.heads} heads / {args.kv_heads} KV heads of {args.head_dim} with q/k/v/o biases and a learned sink "
             f"logit per head, YaRN RoPE (θ 150000, factor 32 over 4096 positions, as released), {E} experts top-{k} "
             f"(router with bias; softmax over the top-k logits), each a clamped interleaved SwiGLU of {I} with biases, "
             f"RMSNorm eps 1e-5, vocab {args.vocab}, untied head; {active} of {params} parameters active per token. "
             f"Init: matrices N(0, {args.init_std}²), biases and sinks 0, norms 1. No auxiliary load-balancing loss.")
    common.model_card(out, name, summary, args, log, params, extra)


def main():
    p = common.base_args(__doc__.split("\n")[0], steps=600, max_minutes=12.0)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--window", type=int, default=64, help="sliding_window of the even (sliding) layers")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--experts", type=int, default=4)
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--intermediate", type=int, default=128)
    p.add_argument("--init-std", type=float, default=0.02)
    p.add_argument("--check-golden", help="golden case folder (gpt_oss): compare logits at rel. ≤ 1e-4")
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
