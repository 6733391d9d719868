#!/usr/bin/env python3
"""Reference forward pass of a Selective-RoPE Transformer language model.

WRITTEN IN THIS PROJECT, NOT THE AUTHORS' CODE. The authors' language model
(github.com/timurcarstensen/selective-rope, models/transformer) needs HF
transformers and Triton; this file re-states its forward pass in plain
PyTorch (tested with torch 1.13, CPU, float32) so that the Go implementation
can be checked on random checkpoints. The attention layer follows the math
that the golden cases (../../../shared/golden/selrope_attn*) document for the
authors' layers/attn.py + modules/rotary.py, and `--golden` re-checks it
against those cases on every run.

Usage:
  selrope_ref.py [--golden CASE_DIR]... [--lm CKPT_DIR]... [--report FILE]

--golden CASE_DIR  run the attention layer of CASE_DIR (config.json with the
                   Attention constructor arguments, model.safetensors, and
                   golden.safetensors with x and the authors' outputs) and
                   report max|ref - golden| / max|golden| per tensor.
--lm CKPT_DIR      read CKPT_DIR/config.json (model_type "transformer"),
                   CKPT_DIR/model.safetensors and CKPT_DIR/ids.json (a list
                   of equal-length token id lists), and write
                   CKPT_DIR/ref.safetensors: logits [B,T,V] and per layer l
                   l{l}.angle, l{l}.omega [B,T,H,R], l{l}.phase_gate,
                   l{l}.attn [B,H,T,T].
--report FILE      write the --golden results as JSON (default: stdout).

Exit status 3 means torch (or numpy) is not installed.
"""

import json
import math
import os
import struct
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # the Go test skips on this status
    print(f"selrope_ref.py: {e}", file=sys.stderr)
    sys.exit(3)

_DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "F16": np.float16}


def read_safetensors(path):
    """Return {name: torch.Tensor} from a .safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        arr = np.frombuffer(data[b:e], dtype=_DTYPES[info["dtype"]]).reshape(info["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return out


def write_safetensors(path, tensors):
    """Write {name: float32 tensor} as .safetensors (header padded to 8 bytes)."""
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        raw = t.detach().to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


# ---------------------------------------------------------------- options

PE_DEFAULTS = {  # SelectiveRoPE keyword defaults of the release
    "skip_conv": False, "d_conv": 4, "temp_type": "rope", "temp_theta": 500000, "temp_max": 1.0,
    "phi_proj_rank": 16, "phi_parametrization": "low-rank", "conv_act": None, "use_gate": False,
    "gate_parametrization": "standard", "gate_low_rank_dim": 16, "use_bias": False,
    "pair_layout": "neox_half_split",
}


def pe_options(pe):
    o = dict(PE_DEFAULTS)
    o.update(pe)
    if o.get("type") != "selective_rope":
        raise ValueError(f"position_embedding.type {o.get('type')!r} is not selective_rope")
    if o.get("fuse_gate"):
        raise ValueError("fuse_gate is not supported")
    return o


# ---------------------------------------------------------------- building blocks

def l2_norm(x, eps=1e-6):
    """x / sqrt(sum x^2 + eps) over the last axis (fla's l2norm kernel formula)."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def rms_norm(x, w, eps):
    """x / sqrt(mean x^2 + eps) * w (fla RMSNorm)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate(x, angle, layout):
    """Rotate pairs of x [..., d] by angle [..., d/2]."""
    cos, sin = torch.cos(angle), torch.sin(angle)
    if layout == "interleaved":
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)
    r = x.shape[-1] // 2
    x0, x1 = x[..., :r], x[..., r:]
    return torch.cat([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)


def selective_angles(P, rp, pe, x, H, R):
    """Steps 1-7 of the golden README: the per-step angle pipeline from the layer input x [B,T,D]."""
    B, T, D = x.shape
    xn = l2_norm(x.reshape(B, T, H, D // H))
    flat = xn.reshape(B, T, D)
    if pe["phi_parametrization"] == "full-rank":
        w = P[rp + "phi_proj.scalar"].reshape(H, 1, 1) * F.normalize(P[rp + "phi_proj.weight"], dim=1)
        u = torch.einsum("bthc,hcr->bthr", xn, w).reshape(B, T, H * R)
    else:
        u = flat @ P[rp + "phi_proj.0.weight"].t() @ P[rp + "phi_proj.1.weight"].t()
    if pe["skip_conv"]:
        d = u - torch.cat([torch.zeros_like(u[:, :1]), u[:, :-1]], dim=1)
    else:
        w = P[rp + "phi_conv1d.weight"]  # [H*R, 1, W], tap W-1 on the current step
        d = F.conv1d(u.transpose(1, 2), w, padding=w.shape[-1] - 1, groups=H * R)[..., :T].transpose(1, 2)
        if pe["conv_act"] in ("silu", "swish"):
            d = F.silu(d)
    d = d.reshape(B, T, H, R)
    if pe["use_bias"]:
        d = d + torch.exp(P[rp + "phi_bias"])
    gate = None
    if pe["use_gate"]:
        if pe["gate_parametrization"] == "standard":
            g = flat @ P[rp + "phase_gate_proj.weight"].t() + P[rp + "phase_gate_proj.bias"]
        else:
            g = (flat @ P[rp + "phase_gate_proj.0.weight"].t()) @ P[rp + "phase_gate_proj.1.weight"].t() \
                + P[rp + "phase_gate_proj.1.bias"]
        gate = torch.sigmoid(g)
        if pe["gate_parametrization"] == "gla":
            gate = gate.reshape(B, T, H, R)
            d = d * gate
        else:
            d = d * gate[..., None]
    phi = d.double().cumsum(dim=1).float()  # float64 running sum, as torch's CPU cumsum
    temp = P[rp + "temperature"].reshape(R)
    return {"xn": xn, "u": u.reshape(B, T, H, R), "dphi": d, "phi_tilde": phi,
            "angle": temp * phi, "omega": temp * d, "phase_gate": gate}


def attention(P, pre, a, x):
    """The authors' Attention with Selective RoPE on x [B,T,D]; a holds the attention options."""
    B, T, D = x.shape
    H = a["num_heads"]
    dh = D // H
    R = dh // 2

    def proj(name):
        return F.linear(x, P[pre + name + ".weight"], P.get(pre + name + ".bias")).reshape(B, T, H, dh)

    q, k, v = proj("q_proj"), proj("k_proj"), proj("v_proj")
    tr = selective_angles(P, pre + "rotary.", a["pe"], x, H, R)
    qr = rotate(q, tr["angle"], a["pe"]["pair_layout"])
    kr = rotate(k, tr["angle"], a["pe"]["pair_layout"])
    if a.get("qk_norm"):
        qr = rms_norm(qr, P[pre + "q_norm.weight"], 1e-5)  # fla RMSNorm default eps
        kr = rms_norm(kr, P[pre + "k_norm.weight"], 1e-5)
    scores = torch.einsum("bthd,bshd->bhts", qr, kr) / math.sqrt(dh)
    t = torch.arange(T)
    masked = t[None, :] > t[:, None]
    if a.get("window_size"):
        masked = masked | (t[:, None] - t[None, :] >= a["window_size"])
    attn = torch.softmax(scores.masked_fill(masked, float("-inf")), dim=-1)
    z = torch.einsum("bhts,bshd->bthd", attn, v)
    y = F.linear(z.reshape(B, T, D), P[pre + "o_proj.weight"])
    tr.update({"q": q, "k": k, "v": v, "q_rot": qr, "k_rot": kr, "attn": attn, "attn_out": z, "y": y})
    return tr


def language_model(P, cfg, ids):
    """Logits of the pre-norm decoder: x += attn(norm(x)); x += SwiGLU(norm(x))."""
    a = {"num_heads": cfg["num_heads"], "qk_norm": cfg.get("qk_norm", False),
         "window_size": cfg.get("window_size"), "pe": pe_options(cfg["position_embedding"])}
    if cfg.get("num_kv_heads") not in (None, cfg["num_heads"]):
        raise ValueError("grouped-query attention is not supported")
    eps = cfg.get("norm_eps", 1e-6)
    x = P["model.embeddings.weight"][ids]
    extra = {}
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        tr = attention(P, p + "attn.", a, rms_norm(x, P[p + "attn_norm.weight"], eps))
        x = x + tr["y"]
        h = rms_norm(x, P[p + "mlp_norm.weight"], eps)
        x = x + F.linear(F.silu(F.linear(h, P[p + "mlp.gate_proj.weight"])) * F.linear(h, P[p + "mlp.up_proj.weight"]),
                         P[p + "mlp.down_proj.weight"])
        for key in ("angle", "omega", "attn", "phase_gate"):
            if tr[key] is not None:
                extra[f"l{l}.{key}"] = tr[key]
    x = rms_norm(x, P["model.norm.weight"], eps)
    head = P["model.embeddings.weight"] if cfg.get("tie_word_embeddings", False) else P["lm_head.weight"]
    extra["logits"] = F.linear(x, head)
    return extra


# ---------------------------------------------------------------- entry points

def check_golden(case):
    with open(os.path.join(case, "config.json")) as f:
        cfg = json.load(f)
    P = read_safetensors(os.path.join(case, "model.safetensors"))
    G = read_safetensors(os.path.join(case, "golden.safetensors"))
    a = {"num_heads": cfg["num_heads"], "qk_norm": cfg.get("qk_norm", False),
         "window_size": cfg.get("window_size"), "pe": pe_options(cfg["position_embedding"])}
    with torch.no_grad():
        tr = attention(P, "", a, G["x"].float())
    names = {"y": "y", "xn": "l0.xn", "u": "l0.u", "dphi": "l0.dphi", "phi_tilde": "l0.phi_tilde",
             "angle": "l0.angles", "q_rot": "l0.q_rot", "k_rot": "l0.k_rot", "attn": "l0.attn",
             "attn_out": "l0.attn_out", "phase_gate": "l0.phase_gate"}
    res = {}
    for key, gname in names.items():
        if gname in G and tr[key] is not None:
            ref = G[gname].double()
            res[gname] = float((tr[key].double() - ref).abs().max() / ref.abs().max())
    return res


def run_lm(d):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(d, "ids.json")) as f:
        ids = torch.tensor(json.load(f), dtype=torch.long)
    P = read_safetensors(os.path.join(d, "model.safetensors"))
    with torch.no_grad():
        out = language_model(P, cfg, ids)
    write_safetensors(os.path.join(d, "ref.safetensors"), out)


def main(argv):
    golden, lms, report = [], [], None
    it = iter(argv)
    for arg in it:
        if arg == "--golden":
            golden.append(next(it))
        elif arg == "--lm":
            lms.append(next(it))
        elif arg == "--report":
            report = next(it)
        else:
            print(__doc__, file=sys.stderr)
            return 2
    torch.set_num_threads(1)
    results = {os.path.basename(os.path.normpath(c)): check_golden(c) for c in golden}
    for d in lms:
        run_lm(d)
    text = json.dumps(results, indent=1, sort_keys=True)
    if report:
        with open(report, "w") as f:
            f.write(text)
    elif golden:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
