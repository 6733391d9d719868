#!/usr/bin/env python3
"""Reference forward pass of a Bayesian Filtering Transformer (BFT) language model.

WRITTEN IN THIS PROJECT FROM THE PAPER, NOT THE AUTHORS' CODE (none is
released): Long et al., "Precision Tracked Transformer via Kalman Filtering,
Kriging and Process Noise", Algorithm 1 (App. C), Eqs. 2-11, on the
checkpoint layout documented in model/bft_config.go. Plain PyTorch, float32,
CPU. It exists so that the Go pass (model/bft*.go) can be checked against a
second, independently written implementation. Two deliberate differences of
method from the Go code:

  * S uses the paper's expanded square (Eq. 7: S = A(V*V) - e*e, clamped at 0)
    where the Go code sums (v - e)^2 in two passes;
  * the FFN Jacobian diagonal comes from torch.autograd, not from the closed
    form W_down[i,k](act'(g_k) W_gate[k,i] u_k + act(g_k) W_up[k,i]).

Usage:  bft_ref.py CKPT_DIR
reads CKPT_DIR/config.json, model.safetensors and ids.json (a list of
equal-length token id lists) and writes CKPT_DIR/ref.safetensors with
logits [B,T,V], tau [B,T] and per layer l: l{l}.lambda, l{l}.lambda_post,
l{l}.jacobian, l{l}.lambda_pred, l{l}.resid_post [B,T,D]; l{l}.pattern
[B,H,T,T]; l{l}.lambda_obs, l{l}.gain, l{l}.z [B,T,H,dh].
Exit status 3: torch or numpy is not installed.
"""

import json
import math
import os
import sys

try:
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import safetensors_io
except ImportError as e:
    print(f"bft_ref.py: {e}", file=sys.stderr)
    sys.exit(3)

ACT = {
    "silu": F.silu,
    "swish": F.silu,
    "gelu": F.gelu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_fast": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
}


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope(x, pos, theta):
    """Rotate-half RoPE of x [..., T, d] (Hugging Face Llama)."""
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    ang = pos.float()[:, None] * inv[None, :]
    emb = torch.cat([ang, ang], -1)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * emb.cos() + torch.cat([-x2, x1], -1) * emb.sin()


def main(ckpt):
    cfg = json.load(open(os.path.join(ckpt, "config.json")))
    bft = cfg.get("bft", {})
    W = safetensors_io.load(os.path.join(ckpt, "model.safetensors"))
    ids = torch.tensor(json.load(open(os.path.join(ckpt, "ids.json"))))
    B, T = ids.shape
    D, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    dh = cfg.get("head_dim", D // H)
    eps, act = cfg["rms_norm_eps"], ACT[cfg["hidden_act"]]
    nu = bft.get("prior_nu", 1.0)
    s02 = bft.get("prior_sigma2", 1.0 / dh)
    lmax = bft.get("lambda_max", 100.0)
    cap_on = set(bft.get("lambda_max_on", ["obs", "posterior", "predicted"]))
    q_max = bft.get("q_max", 1.0)
    jeps = bft.get("jacobian_eps", 0.01)

    def cap(x, which):
        return x.clamp(max=lmax) if (lmax > 0 and which in cap_on) else x

    out = {}
    x = W["model.embed_tokens.weight"][ids]  # [B,T,D]

    # Layer-0 precision tau (Eq. 10 / 11), broadcast over D.
    base = W["model.bft.tau_base"][ids] if bft.get("tau_base_per_token") else torch.full((B, T), bft.get("tau_base", 1.0))
    mode = bft.get("initial_precision", "mlp")
    if mode == "constant":
        tau = base
    elif mode == "table":
        tau = base + F.softplus(W["model.bft.tau_logits"][ids])
    else:
        hdn = F.gelu(F.linear(x, W["model.bft.tau_mlp.0.weight"], W["model.bft.tau_mlp.0.bias"]))
        mlp = F.linear(hdn, W["model.bft.tau_mlp.2.weight"], W["model.bft.tau_mlp.2.bias"])[..., 0]
        tau = W["model.bft.tau_range"][0] * base + F.softplus(mlp)
    out["tau"] = tau
    lam = tau[..., None].expand(B, T, D).clone()

    pos = torch.arange(T)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    lag = (pos[:, None] - pos[None, :]).float()
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        get = lambda n: W.get(p + n)
        out[f"l{l}.lambda"] = lam

        # Observe (Eq. 2 in the log-bias form of Remark 1).
        xn = rms_norm(x, get("input_layernorm.weight"), eps)
        q = F.linear(xn, get("self_attn.q_proj.weight"), get("self_attn.q_proj.bias")).view(B, T, H, dh).transpose(1, 2)
        k = F.linear(xn, get("self_attn.k_proj.weight"), get("self_attn.k_proj.bias")).view(B, T, KV, dh).transpose(1, 2)
        v = F.linear(xn, get("self_attn.v_proj.weight"), get("self_attn.v_proj.bias")).view(B, T, KV, dh).transpose(1, 2)
        if cfg.get("use_qk_norm"):
            q = rms_norm(q, get("self_attn.q_norm.weight"), eps)
            k = rms_norm(k, get("self_attn.k_norm.weight"), eps)
        q, k = rope(q, pos, cfg["rope_theta"]), rope(k, pos, cfg["rope_theta"])
        k = k.repeat_interleave(H // KV, dim=1)
        v = v.repeat_interleave(H // KV, dim=1)  # [B,H,T,dh]
        scores = q @ k.transpose(-1, -2) / math.sqrt(dh)
        if bft.get("kriging", "mean_precision") == "mean_precision":
            scores = scores + torch.log(lam.mean(-1))[:, None, None, :]
        if bft.get("recency_decay"):
            rho = torch.sigmoid(get("bft.rho_logit")[0])
            scores = scores + lag * torch.log(rho)
        scores = scores.masked_fill(~causal, float("-inf"))
        A = scores.softmax(-1)
        out[f"l{l}.pattern"] = A

        # Kriging estimate and observation precision (Eq. 5-7, or Eq. 13).
        e = A @ v
        if bft.get("observation", "reml") == "sandwich":
            A2 = A * A
            meat = (A2 @ (v * v) - 2 * e * (A2 @ v) + e * e * A2.sum(-1, keepdim=True)).clamp(min=0)
            var = meat / A.sum(-1, keepdim=True) ** 2
        else:
            S = (A @ (v * v) - e * e).clamp(min=0)
            neff = 1.0 / (A * A).sum(-1, keepdim=True)
            var = (S + nu * s02) / (neff + nu)
        lam_obs = cap(1.0 / var, "obs").transpose(1, 2).reshape(B, T, D)  # concat heads
        e = e.transpose(1, 2).reshape(B, T, D)
        out[f"l{l}.lambda_obs"] = lam_obs.view(B, T, H, dh)

        # Update (Eq. 3).
        K = lam_obs / (lam + lam_obs)
        out[f"l{l}.gain"] = K.view(B, T, H, dh)
        z = K * e
        out[f"l{l}.z"] = z.view(B, T, H, dh)
        upd = F.linear(z, get("self_attn.o_proj.weight"), get("self_attn.o_proj.bias")) if bft.get("output_proj") else z
        x = x + upd
        lam = cap(lam + lam_obs, "posterior")
        out[f"l{l}.lambda_post"] = lam

        # Predict (Eq. 4), with the Jacobian diagonal by autograd (Eq. 8).
        wg, bg = get("mlp.gate_proj.weight"), get("mlp.gate_proj.bias")
        wu, bu = get("mlp.up_proj.weight"), get("mlp.up_proj.bias")
        wd, bd = get("mlp.down_proj.weight"), get("mlp.down_proj.bias")
        ffn = lambda y: F.linear(act(F.linear(y, wg, bg)) * F.linear(y, wu, bu), wd, bd)
        y = rms_norm(x, get("post_attention_layernorm.weight"), eps)
        x = x + ffn(y)
        out[f"l{l}.resid_post"] = x
        if bft.get("jacobian", "exact") == "exact":
            flat = y.reshape(B * T, D)
            full = torch.autograd.functional.jacobian(ffn, flat)  # [n, D, n, D]
            idx = torch.arange(B * T)
            J = torch.diagonal(full[idx, :, idx, :], dim1=-2, dim2=-1).reshape(B, T, D)
        else:
            J = torch.zeros(B, T, D)
        out[f"l{l}.jacobian"] = J
        Q = F.softplus(get("bft.q_logits")) * q_max
        if bft.get("jacobian_clip", "square") == "abs":
            d = (1 + J).abs().clamp(min=jeps) ** 2
        else:
            d = ((1 + J) ** 2).clamp(min=jeps)
        lam = cap(1.0 / (d / lam + Q), "predicted")  # Eq. 9
        out[f"l{l}.lambda_pred"] = lam

    xf = rms_norm(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", True) else W["lm_head.weight"]
    out["logits"] = F.linear(xf, head)
    safetensors_io.save(os.path.join(ckpt, "ref.safetensors"), out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1])
