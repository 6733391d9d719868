#!/usr/bin/env python3
"""Reference forward pass of an isotropic-AFA language model.

WRITTEN IN THIS PROJECT FROM THE PAPER, NOT THE AUTHORS' CODE: P. Racioppo,
"Attention as an Adaptive Filter", §3.6 and Algorithm 1 (§4.1), with the
corrections of the implementer notes (001 §F: -inf causal mask, clamped
|R|^2, prediction from the mixed estimate with e^{-alpha^2 dt}, expm1 form of
the integrated decay), inside the pre-norm block and checkpoint layout of
model/afa_config.go. Plain PyTorch, CPU. It exists so that the Go pass
(model/afa.go) can be checked against an independent implementation.

Unlike the Go code, which uses the paper's factorized, memory-efficient
form (rotate by e^{-i w t}, one matmul for Re(Z~q^H Z~k), decayed weights
E*A times the rotated values, counter-rotation), this file uses the direct
per-pair statement of notes 001 §A.11 with complex tensors [B,H,T,T,d]:

    w_ij = (sigma_V^2(tau_ij) + ||q_i - e^{lambda tau_ij} * k_j||^2 + eps)^(-tau_s)
    A_ij = w_ij / sum_j' w_ij'
    zbar_i = sum_j A_ij e^{lambda tau_ij} * v_j
    z+_i = e^{lambda dt} * ((1 - s) v_i + s zbar_i),   y_i = Re(W_p z+_i + b_p)

so the notes' test oracle G.2 ("factorized equals naive") is part of the
comparison.

Usage:  afa_ref.py CKPT_DIR
reads CKPT_DIR/config.json, model.safetensors and ids.json and writes
CKPT_DIR/ref.safetensors: logits [B,T,V]; per layer l: l{l}.q, l{l}.k,
l{l}.v, l{l}.estimate, l{l}.z [B,T,H,2d] ((re, im) interleaved);
l{l}.pattern, l{l}.pattern_decayed [B,H,T,T]; l{l}.log_precision [B,T,H];
l{l}.attn_out, l{l}.resid_post [B,T,D].
Exit status 3: torch or numpy is not installed.
"""

import json
import os
import sys

try:
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bft"))
    import safetensors_io
except ImportError as e:
    print(f"afa_ref.py: {e}", file=sys.stderr)
    sys.exit(3)

ACT = {"silu": F.silu, "swish": F.silu, "gelu": F.gelu, "relu": F.relu,
       "gelu_new": lambda x: F.gelu(x, approximate="tanh"), "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh")}


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def interleave(z):
    """complex [..., d] -> real [..., 2d], (re, im) per channel."""
    return torch.view_as_real(z).flatten(-2)


def main(ckpt):
    cfg = json.load(open(os.path.join(ckpt, "config.json")))
    opt = cfg.get("afa", {})
    W = safetensors_io.load(os.path.join(ckpt, "model.safetensors"))
    ids = torch.tensor(json.load(open(os.path.join(ckpt, "ids.json"))))
    B, T = ids.shape
    D, H = cfg["hidden_size"], cfg["num_attention_heads"]
    d = cfg.get("head_dim", 2 * D // H) // 2
    eps_n, act = cfg.get("rms_norm_eps", 1e-6), ACT[cfg.get("hidden_act", "silu")]
    dt = opt.get("dt", 1.0)
    eps = opt.get("epsilon", 1e-6)
    minexp = opt.get("min_exponent", -50.0)
    qkv_bias, o_bias = cfg.get("qkv_bias", False), cfg.get("o_bias", False)

    n = torch.arange(T, dtype=torch.float64)
    lag = (n[:, None] - n[None, :]).clamp(min=0)  # integer lag i - j
    tau = lag * dt
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    out = {}
    x = W["model.embed_tokens.weight"][ids]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}.attn."
        get = lambda name: W[p + name]
        cw = lambda name: torch.complex(get(name + ".weight_real"), get(name + ".weight_imag"))
        cb = lambda name: torch.complex(get(name + ".bias_real"), get(name + ".bias_imag"))

        h = rms_norm(x, W[f"model.layers.{l}.input_layernorm.weight"], eps_n).to(torch.complex64)
        zv = h @ cw("v_proj").T
        if qkv_bias:
            zv = zv + cb("v_proj")
        zv = zv.view(B, T, H, d)
        if opt.get("qk_source", "values") == "values":
            zq = torch.einsum("hrc,bthc->bthr", cw("q_proj"), zv)
            zk = torch.einsum("hrc,bthc->bthr", cw("k_proj"), zv)
            if qkv_bias:
                zq, zk = zq + cb("q_proj"), zk + cb("k_proj")
        else:
            zq, zk = h @ cw("q_proj").T, h @ cw("k_proj").T
            if qkv_bias:
                zq, zk = zq + cb("q_proj"), zk + cb("k_proj")
            zq, zk = zq.view(B, T, H, d), zk.view(B, T, H, d)
        out[f"l{l}.q"], out[f"l{l}.k"], out[f"l{l}.v"] = interleave(zq), interleave(zk), interleave(zv)
        if opt.get("normalize_qk", False):
            zq = zq / zq.abs().pow(2).sum(-1, keepdim=True).sqrt().clamp(min=1e-12)
            zk = zk / zk.abs().pow(2).sum(-1, keepdim=True).sqrt().clamp(min=1e-12)

        a = get("alpha").double() ** 2  # [H]
        om = get("omega").double()
        omega = torch.stack([om, -om], -1).reshape(H, d)  # +w_m on 2m, -w_m on 2m+1
        s2, eta2, tau_s = get("sigma").double() ** 2, get("eta").double() ** 2, get("tau_s").double()
        s = torch.sigmoid(get("delta").double())  # [H, d]

        # per head and lag: E = e^{-a tau}, integrated decay, covariance (§3.6)
        E = torch.exp((-a[:, None, None] * tau).clamp(min=minexp))  # [H,T,T]
        if opt.get("kernel_form", "exact") == "paper":
            kap = torch.where(a[:, None, None] > eps, (1 - E * E + eps) / (2 * a[:, None, None] + eps), lag.expand(H, T, T))
        else:
            kap = torch.where(a[:, None, None] > eps,
                              -torch.expm1((-2 * a[:, None, None] * tau).clamp(min=2 * minexp)) / (2 * a[:, None, None]),
                              tau.expand(H, T, T))
        cov = s2[:, None, None] * kap + eta2[:, None, None] * E * E

        # e^{lambda tau} per head, pair and channel: [H,T,T,d]
        trans = (E[..., None] * torch.exp(1j * omega[:, None, None, :] * tau[None, :, :, None])).to(torch.complex64)
        qh, kh, vh = (z.permute(0, 2, 1, 3) for z in (zq, zk, zv))  # [B,H,T,d]
        pulled_k = trans[None] * kh[:, :, None, :, :]  # [B,H,i,j,d]
        r2 = (qh[:, :, :, None, :] - pulled_k).abs().pow(2).sum(-1).double()
        logit = -tau_s[:, None, None] * torch.log(cov + r2 + eps)
        logit = logit.masked_fill(~causal, float("-inf"))
        A = logit.softmax(-1)
        out[f"l{l}.pattern"] = A
        out[f"l{l}.pattern_decayed"] = A * E
        out[f"l{l}.log_precision"] = torch.logsumexp(logit, -1).permute(0, 2, 1)
        zbar = (A.to(torch.complex64)[..., None] * trans[None] * vh[:, :, None, :, :]).sum(3)  # [B,H,T,d]
        zbar = zbar.permute(0, 2, 1, 3)
        out[f"l{l}.estimate"] = interleave(zbar)

        mixed = (1 - s).float() * zv + s.float() * zbar
        step = (torch.exp(torch.clamp(-a * dt, min=minexp))[:, None] * torch.exp(1j * omega * dt)).to(torch.complex64)
        zplus = step * mixed
        out[f"l{l}.z"] = interleave(zplus)
        y = (zplus.reshape(B, T, H * d) @ cw("o_proj").T).real
        if o_bias:
            y = y + get("o_proj.bias_real")
        out[f"l{l}.attn_out"] = y
        x = x + y

        q = f"model.layers.{l}."
        u = rms_norm(x, W[q + "post_attention_layernorm.weight"], eps_n)
        x = x + F.linear(act(F.linear(u, W[q + "mlp.gate_proj.weight"])) * F.linear(u, W[q + "mlp.up_proj.weight"]), W[q + "mlp.down_proj.weight"])
        out[f"l{l}.resid_post"] = x

    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", True) else W["lm_head.weight"]
    out["logits"] = F.linear(rms_norm(x, W["model.norm.weight"], eps_n), head)
    safetensors_io.save(os.path.join(ckpt, "ref.safetensors"), out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1])
