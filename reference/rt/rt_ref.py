#!/usr/bin/env python3
"""Reference forward pass of an RT-Transformer language model.

WRITTEN IN THIS PROJECT FROM THE PAPER, NOT THE AUTHORS' CODE (the paper,
"RT-Transformer: The Transformer Block as a Spherical State Estimator",
releases none): Algorithm 1 (RT-RFA) and Algorithm 2 (RT-Transformer) of
App. D.5, on the checkpoint layout and options documented in
model/rt_config.go. Plain PyTorch, CPU. It exists so that the Go pass
(model/rt.go) can be checked against a second, independently written
implementation; unlike the Go code (real arithmetic on interleaved (re, im)
pairs, one pair at a time) it works with torch complex tensors throughout:
e^{-i w t} phases, Re(Q~^H K~) by a complex matmul, conj inner products for
the tangent projection.

Usage:  rt_ref.py CKPT_DIR
reads CKPT_DIR/config.json, model.safetensors and ids.json and writes
CKPT_DIR/ref.safetensors: logits [B,T,V] and per layer l: l{l}.magnitude,
l{l}.log_precision, l{l}.self_agreement [B,T,H]; l{l}.pattern [B,H,T,T];
l{l}.rot_q, l{l}.rot_k, l{l}.consensus, l{l}.z [B,T,H,2C] (re, im
interleaved); l{l}.resid_mid, l{l}.retracted, l{l}.resid_post [B,T,D].
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
    print(f"rt_ref.py: {e}", file=sys.stderr)
    sys.exit(3)

ACT = {"silu": F.silu, "swish": F.silu, "gelu": F.gelu, "relu": F.relu,
       "gelu_new": lambda x: F.gelu(x, approximate="tanh"), "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh")}


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def to_complex(x, B, T, H, C):
    """[B,T,H*2C] reals, (re, im) interleaved per channel -> complex [B,T,H,C]."""
    return torch.view_as_complex(x.reshape(B, T, H, C, 2).contiguous())


def to_real(z):
    """complex [B,T,H,C] -> [B,T,H,2C] interleaved."""
    B, T, H, C = z.shape
    return torch.view_as_real(z).reshape(B, T, H, 2 * C)


def unit(z, dims, eps=1e-12):
    """z / max(||z||, eps) over dims, and the norm."""
    n = z.abs().pow(2).sum(dims, keepdim=True).sqrt()
    return z / n.clamp(min=eps), n


def main(ckpt):
    cfg = json.load(open(os.path.join(ckpt, "config.json")))
    opt = cfg.get("rt", {})
    W = safetensors_io.load(os.path.join(ckpt, "model.safetensors"))
    ids = torch.tensor(json.load(open(os.path.join(ckpt, "ids.json"))))
    B, T = ids.shape
    D, H = cfg["hidden_size"], cfg["num_attention_heads"]
    C = cfg.get("head_dim", 2 * D // H) // 2
    eps, act = cfg.get("rms_norm_eps", 1e-6), ACT[cfg.get("hidden_act", "silu")]
    scope = (2, 3) if opt.get("norm_scope", "head") == "global" else (3,)
    d_rob = 2 * C if opt.get("robust_dim", "complex") == "real" else C
    keps = opt.get("kappa_eps", 1e-6)
    minexp = opt.get("min_exponent", -50.0)
    kernel = opt.get("kernel", "alg1")

    t = torch.arange(T, dtype=torch.float64)
    lag = (t[:, None] - t[None, :]).clamp(min=0)  # [T,T], i - j
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    out = {}
    x = W["model.embed_tokens.weight"][ids]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        get = lambda n: W.get(p + n)
        sp = lambda n: F.softplus(get("attn." + n).double())  # [H]
        mu, s2, eta2, gam2, tth2, nu, beta = (sp(n) for n in ("mu_raw", "sigma_raw", "eta_raw", "gamma_raw", "tau_theta_raw", "nu_raw", "beta_raw"))
        omega = get("attn.omega").double()  # [H,C]

        # 1  projections, magnitudes, normalization
        proj = lambda n: to_complex(F.linear(x, get(f"attn.{n}_proj.weight"), get(f"attn.{n}_proj.bias")), B, T, H, C)
        q, k, v = proj("q"), proj("k"), proj("v")
        q, _ = unit(q, scope)
        k, _ = unit(k, scope)
        v, M = unit(v, scope)
        M = M.expand(B, T, H, 1)[..., 0]  # [B,T,H]
        out[f"l{l}.magnitude"] = M

        # 2  rotation into the common frame
        phase = torch.exp(-1j * omega[None, :, :] * t[:, None, None]).to(torch.complex64)  # [T,H,C]
        qt, kt, vt = q * phase, k * phase, v * phase
        out[f"l{l}.rot_q"], out[f"l{l}.rot_k"] = to_real(qt), to_real(kt)

        # 3  kernels and directional precision (Eq. 10), per head [H,T,T]
        E = torch.exp((-mu[:, None, None] * lag).clamp(min=minexp))
        if kernel == "prop1":
            proc = s2[:, None, None] * (-torch.expm1(-2 * mu[:, None, None] * lag)) / (2 * mu[:, None, None])
        else:
            proc = s2[:, None, None] * (1 - E * E)
        Sig = proc + eta2[:, None, None] * E * E + gam2[:, None, None]
        Sig0 = (eta2 + gam2)[:, None, None]
        M2 = (M.double() ** 2).permute(0, 2, 1)  # [B,H,T]
        kappa = 1.0 / (Sig0 / (M2[..., :, None] + keps) + Sig / (M2[..., None, :] * E * E + keps) + tth2[:, None, None])

        # 4  spherical attention with the Student-t weight (Eqs. 11, 14)
        qh, kh = qt.permute(0, 2, 1, 3), kt.permute(0, 2, 1, 3)  # [B,H,T,C]
        cos = (qh.conj() @ kh.transpose(-1, -2)).real.double()
        R2 = (qh.abs().pow(2).sum(-1)[..., :, None] + kh.abs().pow(2).sum(-1)[..., None, :]).double() - 2 * cos
        R2 = R2.clamp(min=0)
        expo = ((nu + d_rob) / d_rob)[:, None, None]
        L = torch.log(kappa) - expo * torch.log1p(kappa * R2 / nu[:, None, None])
        L = L.masked_fill(~causal, float("-inf"))
        A = (beta[:, None, None] * L).softmax(-1).float()
        out[f"l{l}.pattern"] = A
        out[f"l{l}.log_precision"] = torch.logsumexp(L, -1).permute(0, 2, 1)

        # 5  aggregation and counter-rotation (no decay on A)
        s = A.to(torch.complex64) @ vt.permute(0, 2, 1, 3)  # [B,H,T,C]
        vbar = s.permute(0, 2, 1, 3) * phase.conj()
        out[f"l{l}.consensus"] = to_real(vbar)

        # 6  tangent projection against the unit value, L_o, residual
        rho = (v.conj() * vbar).real.sum(-1) / v.abs().pow(2).sum(-1)  # [B,T,H]
        out[f"l{l}.self_agreement"] = rho
        ubar = vbar - rho[..., None] * v if opt.get("tangent_projection", True) else vbar
        out[f"l{l}.z"] = to_real(ubar)
        x = x + F.linear(to_real(ubar).reshape(B, T, H * 2 * C), get("attn.o_proj.weight"), get("attn.o_proj.bias"))
        out[f"l{l}.resid_mid"] = x

        # 7  retraction; Algorithm 2's FFN on U+
        if opt.get("retraction", "l2") == "rms":
            u = rms_norm(x, get("retract_norm.weight"), eps)
        else:
            u = x / x.norm(dim=-1, keepdim=True).clamp(min=1e-12)
        out[f"l{l}.retracted"] = u
        x = x + F.linear(act(F.linear(u, get("mlp.gate_proj.weight"))) * F.linear(u, get("mlp.up_proj.weight")), get("mlp.down_proj.weight"))
        out[f"l{l}.resid_post"] = x

    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", True) else W["lm_head.weight"]
    out["logits"] = F.linear(rms_norm(x, W["model.norm.weight"], eps), head)
    safetensors_io.save(os.path.join(ckpt, "ref.safetensors"), out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1])
