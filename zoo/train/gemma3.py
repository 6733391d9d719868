"""Gemma-3-style decoder LM of the reference zoo (local/global attention).

The module reproduces Hugging Face's Gemma3ForCausalLM (model_type
gemma3_text, eager attention, no cache) from the facts of
shared/golden/gemma3_text/README.md, in the HF gemma3_text layout:

  * embeddings times √D, the scale a float32 tensor (Gemma3TextScaledWordEmbedding);
  * every layer: x += post_attention_layernorm(attn(input_layernorm(x)));
    x += post_feedforward_layernorm(mlp(pre_feedforward_layernorm(x)));
  * every RMSNorm (the four per layer, the final one, q_norm/k_norm over
    head_dim) is x·rsqrt(mean(x²) + eps)·(1 + w) in float32;
  * attention: grouped-query, QK-norm before RoPE (rotate-half over the whole
    head), scores scaled by query_pre_attn_scalar^-½ (not head_dim^-½);
    layer_types "sliding_attention" layers see the last sliding_window keys
    (s ≤ t and s > t − window) and use RoPE θ rope_parameters.sliding_attention,
    "full_attention" layers see every earlier key with θ of rope_parameters.full_attention;
  * GeGLU MLP: down(gelu_tanh(gate x) · up x);
  * no logit soft-capping (attn_logit_softcapping and final_logit_softcapping null);
    tied embeddings (lm_head.weight not saved).

Modes (as zoo/train/lm.py):
  train:        python3 zoo/train/gemma3.py --out zoo/checkpoints/gemma3_tiny [--steps N ...]
  eval:         python3 zoo/train/gemma3.py --eval <ckpt> --ids <ids.json> --logits <out.safetensors>
  golden check: python3 zoo/train/gemma3.py --check-golden /work/shared/golden/gemma3_text

Written in this project (torch 1.13, CPU, float32).
"""

import json
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see lm.py

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402  (zoo/train/common.py)
from lm import rope_cos_sin, rotate_half  # noqa: E402  (zoo/train/lm.py)
from qwen35 import OnePlusRMSNorm  # noqa: E402  (zoo/train/qwen35.py: Gemma's RMSNorm is the same (1 + w) form)


class Attention(nn.Module):
    def __init__(self, cfg, sliding):
        super().__init__()
        D, H, KV, dh = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        if cfg.get("attention_bias", False):
            raise ValueError("config.json: attention_bias true is not supported by zoo/train/gemma3.py")
        self.H, self.KV, self.dh = H, KV, dh
        self.sliding = sliding
        self.scale = float(cfg["query_pre_attn_scalar"]) ** -0.5
        self.q_proj = nn.Linear(D, H * dh, bias=False)
        self.k_proj = nn.Linear(D, KV * dh, bias=False)
        self.v_proj = nn.Linear(D, KV * dh, bias=False)
        self.o_proj = nn.Linear(H * dh, D, bias=False)
        self.q_norm = OnePlusRMSNorm(dh, cfg["rms_norm_eps"])
        self.k_norm = OnePlusRMSNorm(dh, cfg["rms_norm_eps"])

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        H, KV, dh = self.H, self.KV, self.dh
        q = self.q_norm(self.q_proj(x).view(B, T, H, dh)).transpose(1, 2)  # [B, H, T, dh]
        k = self.k_norm(self.k_proj(x).view(B, T, KV, dh)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, KV, dh).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if H > KV:
            k = k.repeat_interleave(H // KV, dim=1)
            v = v.repeat_interleave(H // KV, dim=1)
        w = torch.softmax(torch.matmul(q, k.transpose(2, 3)) * self.scale + mask, dim=-1)
        return self.o_proj(torch.matmul(w, v).transpose(1, 2).reshape(B, T, H * dh))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D, Fd = cfg["hidden_size"], cfg["intermediate_size"]
        act = cfg.get("hidden_activation", "gelu_pytorch_tanh")
        if act != "gelu_pytorch_tanh":
            raise ValueError(f"config.json: hidden_activation {act!r} is not supported by zoo/train/gemma3.py (gelu_pytorch_tanh only)")
        self.gate_proj = nn.Linear(D, Fd, bias=False)
        self.up_proj = nn.Linear(D, Fd, bias=False)
        self.down_proj = nn.Linear(Fd, D, bias=False)

    def forward(self, x):
        return self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg, kind):
        super().__init__()
        if kind not in ("sliding_attention", "full_attention"):
            raise ValueError(f"config.json: layer_types entry {kind!r} is not supported (sliding_attention, full_attention)")
        D, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        self.sliding = kind == "sliding_attention"
        self.input_layernorm = OnePlusRMSNorm(D, eps)
        self.self_attn = Attention(cfg, self.sliding)
        self.post_attention_layernorm = OnePlusRMSNorm(D, eps)
        self.pre_feedforward_layernorm = OnePlusRMSNorm(D, eps)
        self.mlp = MLP(cfg)
        self.post_feedforward_layernorm = OnePlusRMSNorm(D, eps)

    def forward(self, x, cos, sin, mask):
        x = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), cos, sin, mask))
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))


class Body(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList([Layer(cfg, kind) for kind in cfg["layer_types"]])
        self.norm = OnePlusRMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


def rope_thetas(cfg):
    """(θ sliding, θ full) from rope_parameters (transformers 5) or rope_local_base_freq/rope_theta (4.x)."""
    rp = cfg.get("rope_parameters")
    if rp:
        out = []
        for kind in ("sliding_attention", "full_attention"):
            p = rp.get(kind) or {}
            if p.get("rope_type", "default") != "default":
                raise ValueError(f"config.json: rope_parameters.{kind}.rope_type {p['rope_type']!r} is not supported (default only)")
            out.append(float(p.get("rope_theta", 10000.0 if kind == "sliding_attention" else 1e6)))
        return tuple(out)
    if cfg.get("rope_scaling"):
        raise ValueError("config.json: rope_scaling is not supported by zoo/train/gemma3.py")
    return float(cfg.get("rope_local_base_freq", 10000.0)), float(cfg.get("rope_theta", 1e6))


class LM(nn.Module):
    """Gemma3ForCausalLM with tied embeddings: forward(ids [B, T]) → logits [B, T, V]."""

    def __init__(self, cfg):
        super().__init__()
        for f in ("attn_logit_softcapping", "final_logit_softcapping"):
            if cfg.get(f) is not None:
                raise ValueError(f"config.json: {f} {cfg[f]} is not supported by zoo/train/gemma3.py (null only)")
        if cfg.get("use_bidirectional_attention", False):
            raise ValueError("config.json: use_bidirectional_attention true is not supported by zoo/train/gemma3.py")
        if not cfg.get("tie_word_embeddings", True):
            raise ValueError("config.json: tie_word_embeddings false is not supported by zoo/train/gemma3.py")
        self.cfg = cfg
        self.theta_local, self.theta_global = rope_thetas(cfg)
        self.model = Body(cfg)
        self.embed_scale = torch.tensor(cfg["hidden_size"] ** 0.5, dtype=torch.float32)

    def forward(self, ids):
        T, W, dh = ids.shape[1], self.cfg["sliding_window"], self.cfg["head_dim"]
        local = rope_cos_sin(T, dh, self.theta_local)
        glob = rope_cos_sin(T, dh, self.theta_global)
        t = torch.arange(T)
        causal = t[None, :] <= t[:, None]  # [query, key]
        neg = torch.tensor(float("-inf"))
        full_mask = torch.where(causal, torch.tensor(0.0), neg)
        slide_mask = torch.where(causal & (t[None, :] > t[:, None] - W), torch.tensor(0.0), neg)
        x = self.model.embed_tokens(ids) * self.embed_scale
        for layer in self.model.layers:
            if layer.sliding:
                x = layer(x, *local, slide_mask)
            else:
                x = layer(x, *glob, full_mask)
        return F.linear(self.model.norm(x), self.model.embed_tokens.weight)

    def init_weights(self, std):
        """HF's Gemma init: Linear and Embedding N(0, std²), (1+w) norm weights 0."""
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=std)
            elif isinstance(m, OnePlusRMSNorm):
                nn.init.zeros_(m.weight)


def make_config(args):
    """config.json in the fields Gemma3TextConfig.save_pretrained writes (transformers 5, as the golden case)."""
    types = ["full_attention" if (l + 1) % args.pattern == 0 else "sliding_attention" for l in range(args.layers)]
    cfg = {
        "_sliding_window_pattern": args.pattern,
        "architectures": ["Gemma3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_logit_softcapping": None,
        "bos_token_id": None,
        "dtype": "float32",
        "eos_token_id": 2047,
        "final_logit_softcapping": None,
        "head_dim": args.head_dim,
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": args.hidden,
        "initializer_range": args.init_std,
        "intermediate_size": args.intermediate,
        "layer_types": types,
        "max_position_embeddings": 4096,
        "model_type": "gemma3_text",
        "num_attention_heads": args.heads,
        "num_hidden_layers": args.layers,
        "num_key_value_heads": args.kv_heads,
        "pad_token_id": None,
        "query_pre_attn_scalar": args.query_pre_attn_scalar,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {
            "full_attention": {"rope_theta": 1000000.0, "rope_type": "default"},
            "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
        },
        "sliding_window": args.window,
        "tie_word_embeddings": True,
        "transformers_version": "5.8.0.dev0",
        "use_bidirectional_attention": False,
        "use_cache": True,
        "vocab_size": args.vocab,
    }
    return dict(sorted(cfg.items()))


def load_checkpoint(d):
    """LM from config.json + model.safetensors of a checkpoint folder, in eval mode."""
    cfg_path = os.path.join(d, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    if cfg.get("model_type") != "gemma3_text":
        sys.exit(f"{cfg_path}: model_type {cfg.get('model_type')!r}: zoo/train/gemma3.py runs gemma3_text only")
    if "layer_types" not in cfg:
        n = cfg.get("sliding_window_pattern", cfg.get("_sliding_window_pattern", 6))
        cfg["layer_types"] = ["full_attention" if (l + 1) % n == 0 else "sliding_attention"
                              for l in range(cfg["num_hidden_layers"])]
    return common.load_weights(LM(cfg), d)


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
    print(f"{params} parameters, layers {cfg['layer_types']}", flush=True)
    log = common.train(model, args)
    out = args.out
    common.save_safetensors(os.path.join(out, "model.safetensors"), dict(model.state_dict()))
    common.write_json(os.path.join(out, "config.json"), cfg)
    common.copy_tokenizer(out)
    name = os.path.basename(os.path.normpath(out))
    common.write_json(os.path.join(out, "zoo.json"), {"name": name, "arch": "gemma3", "script": "train/gemma3.py",
                                                      "lm": True, "demo": True})
    summary = ("Gemma-3-style decoder (sliding-window local layers and a global layer, QK-norm, pre/post norms, GeGLU), "
               "trained here with zoo/train/gemma3.py; saved in the HF gemma3_text layout.")
    extra = (f"Architecture: {args.layers} layers {cfg['layer_types']} (sliding window {args.window}), hidden {args.hidden} "
             f"(embeddings × √{args.hidden}), {args.heads} heads / {args.kv_heads} KV heads of {args.head_dim}, "
             f"query_pre_attn_scalar {args.query_pre_attn_scalar} (scores × {args.query_pre_attn_scalar}^-½), QK-norm, "
             f"RoPE θ 1e4 (sliding) / 1e6 (global), GeGLU (gelu tanh) {args.intermediate}, (1+w) RMSNorms eps 1e-6 "
             f"before and after attention and MLP, vocab {args.vocab}, tied embeddings, no soft-capping. "
             f"Init: Linear/Embedding N(0, {args.init_std}²), norm weights 0.")
    common.model_card(out, name, summary, args, log, params, extra)


def main():
    p = common.base_args(__doc__.split("\n")[0], steps=600, max_minutes=12.0)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--pattern", type=int, default=4, help="every N-th layer is global (full_attention)")
    p.add_argument("--window", type=int, default=64, help="sliding_window of the local layers")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--query-pre-attn-scalar", type=int, default=48,
                   help="scores × this^-½; ≠ head_dim as in Gemma 3 27B (168 vs 128), so parity tests see it")
    p.add_argument("--intermediate", type=int, default=384)
    p.add_argument("--init-std", type=float, default=0.02)
    p.add_argument("--check-golden", help="golden case folder (gemma3_text): compare logits at rel. ≤ 1e-4")
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
