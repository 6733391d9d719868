"""RoPE tables of the scaled rope types, restated in PyTorch (written here).

A second implementation of what transformers 5 (modeling_rope_utils.py and
RotaryEmbeddingConfigMixin.standardize_rope_params) computes, for the Go tables
of model/rope.go: the float32 inverse frequencies, the attention factor, and cos
and sin as the rotary embedding's forward returns them (angles inv_freq @
position_ids in float32, cat(freqs, freqs), cos/sin times the attention factor).
Nothing is imported from transformers; the formulas were restated from its
documented behaviour (see README.md).

Usage: /usr/bin/python3 rope_ref.py OUT.json  (torch 1.13 is enough)
"""
import json
import math
import sys

import torch


def standardize(cfg):
    """The RoPE parameters of config dict cfg, as transformers 5 reads them."""
    p = dict(cfg.get("rope_scaling") or cfg.get("rope_parameters") or {})
    p.setdefault("rope_theta", cfg.get("rope_theta", 10000.0))
    p.setdefault("rope_type", p.get("type", "default"))
    if cfg.get("partial_rotary_factor") is not None:
        p.setdefault("partial_rotary_factor", cfg["partial_rotary_factor"])
    if p["rope_type"] in ("llama3", "yarn", "longrope"):
        if "original_max_position_embeddings" in cfg:
            p["original_max_position_embeddings"] = cfg["original_max_position_embeddings"]
        else:
            p.setdefault("original_max_position_embeddings", cfg["max_position_embeddings"])
    return p


def rotary_dim(cfg, p):
    return int(cfg["head_dim"] * p.get("partial_rotary_factor", 1.0))


def exponents(dim):
    return torch.arange(0, dim, 2, dtype=torch.int64).float() / dim


def yarn(cfg, p, dim):
    base = p["rope_theta"]
    factor = p["factor"]
    orig = p["original_max_position_embeddings"]
    if factor is None:
        factor = cfg["max_position_embeddings"] / orig

    def mscale(s, m=1.0):
        return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0

    att = p.get("attention_factor")
    if att is None:
        if p.get("mscale") and p.get("mscale_all_dim"):
            att = mscale(factor, p["mscale"]) / mscale(factor, p["mscale_all_dim"])
        else:
            att = mscale(factor)
    fast = p.get("beta_fast") or 32
    slow = p.get("beta_slow") or 1

    def corr(rot):
        return dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = corr(fast), corr(slow)
    if p.get("truncate", True):
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, dim - 1)
    if lo == hi:
        hi += 0.001
    pos = base ** exponents(dim)
    extrap = 1.0 / pos
    interp = 1.0 / (factor * pos)
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - lo) / (hi - lo), 0, 1)
    w = 1 - ramp  # extrapolation weight
    return interp * (1 - w) + extrap * w, att


def longrope(cfg, p, dim, seq_len):
    base = p["rope_theta"]
    orig = p["original_max_position_embeddings"]
    factor = p.get("factor")
    if factor is None:
        factor = cfg["max_position_embeddings"] / orig
    att = p.get("attention_factor")
    if att is None:
        att = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
    lam = p["long_factor"] if seq_len > orig else p["short_factor"]
    lam = torch.tensor(lam, dtype=torch.float32)
    return 1.0 / (lam * base ** exponents(dim)), att


def table(cfg, seq_len, positions):
    p = standardize(cfg)
    dim = rotary_dim(cfg, p)
    if p["rope_type"] == "yarn":
        inv, att = yarn(cfg, p, dim)
    elif p["rope_type"] == "longrope":
        inv, att = longrope(cfg, p, dim, seq_len)
    else:
        raise ValueError(p["rope_type"])
    ids = torch.tensor(positions, dtype=torch.int64)[None, :].float()
    freqs = (inv[None, :, None].float() @ ids[:, None, :]).transpose(1, 2)[0]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos() * att, emb.sin() * att
    half = dim // 2
    return {
        "dim": dim,
        "inv_freq": inv.tolist(),
        "attention_factor": att,
        "cos": cos[:, :half].tolist(),
        "sin": sin[:, :half].tolist(),
    }


def golden(name):
    with open(f"../../../shared/golden/{name}/config.json") as f:
        c = json.load(f)
    c.setdefault("head_dim", c["hidden_size"] // c["num_attention_heads"])
    return c


def cases():
    olmo3, gpt_oss, phi3 = golden("olmo3"), golden("gpt_oss"), golden("phi3")
    rp = {"max_position_embeddings": 163840, "head_dim": 64, "rope_theta": 10000.0}
    few = [0, 1, 2, 31, 32, 33, 47]
    far = [0, 1, 100, 1000, 4095, 4096, 8191]
    yield "olmo3", olmo3, 48, list(range(48))
    yield "gpt_oss", gpt_oss, 48, list(range(48))
    yield "gpt_oss_head64_far", dict(gpt_oss, head_dim=64), 8192, far
    yield "phi3_long", phi3, 48, list(range(48))
    yield "phi3_short", phi3, 32, list(range(32))
    yield "phi3_short_20", phi3, 20, list(range(20))
    # DeepSeek-V2-style yarn: rope_scaling, mscale and mscale_all_dim, truncate default (true)
    yield "yarn_mscale", dict(rp, rope_scaling={"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1,
                                                "mscale": 0.707, "mscale_all_dim": 0.707,
                                                "original_max_position_embeddings": 4096}), 8192, far
    yield "yarn_mscale_ratio", dict(rp, rope_scaling={"rope_type": "yarn", "factor": 16, "mscale": 1.0,
                                                      "mscale_all_dim": 0.5, "original_max_position_embeddings": 2048}), 48, few
    # yarn with partial rotary, defaults for beta, truncate false, factor from the lengths (null)
    yield "yarn_partial_null_factor", dict(rp, max_position_embeddings=16384, partial_rotary_factor=0.5,
                                           rope_parameters={"rope_type": "yarn", "factor": None, "truncate": False,
                                                            "rope_theta": 500000.0, "original_max_position_embeddings": 4096}), 4097, far[:6] + [4096]
    # longrope with factor and attention_factor given, top-level original length
    lf = [1.0 + 0.37 * i for i in range(24)]
    sf = [1.0 + 0.01 * i for i in range(24)]
    lr = dict(rp, head_dim=64, partial_rotary_factor=0.75, max_position_embeddings=131072,
              original_max_position_embeddings=4096,
              rope_scaling={"type": "longrope", "long_factor": lf, "short_factor": sf, "factor": 32.0,
                            "original_max_position_embeddings": 1024})
    yield "longrope_toplevel_orig_short", lr, 4096, [0, 1, 1023, 1024, 4095]
    yield "longrope_toplevel_orig_long", lr, 4097, [0, 1, 1023, 1024, 4096]
    yield "longrope_attention_factor", dict(lr, rope_scaling=dict(lr["rope_scaling"], attention_factor=1.25)), 4097, [0, 5, 4096]


def main():
    out = []
    for name, cfg, seq_len, positions in cases():
        t = table(cfg, seq_len, positions)
        rope = {k: cfg[k] for k in ("rope_parameters", "rope_scaling", "rope_theta", "partial_rotary_factor",
                                    "original_max_position_embeddings") if k in cfg}
        out.append(dict(name=name, config=dict(rope, max_position_embeddings=cfg["max_position_embeddings"]),
                        head_dim=cfg["head_dim"], seq_len=seq_len, positions=positions, **t))
    with open(sys.argv[1], "w") as f:
        json.dump({"torch": torch.__version__, "cases": out}, f, indent=None, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
