#!/usr/bin/env python3
"""Train the zoo's BFT language model (paper 003, Algorithm 1) on the Brown corpus.

The model is a Bayesian Filtering Transformer in this project's checkpoint
layout (model/bft_config.go: "model_type": "bft", the Llama module tree plus
model.layers.{l}.bft.q_logits and model.bft.tau_mlp.*, tau_range) with every
option at the default bft_config.go documents: REML observation precision
with the inverse-chi^2 prior (nu 1, sigma0^2 = 1/head_dim), mean-precision
kriging, no recency decay, exact diagonal FFN Jacobian clipped as
(1+J)^2 >= 0.01, Q = softplus(q_logits)*Q_max with Q_max 1, lambda_max 100 on
lambda_obs, lambda' and lambda'', initial precision from MLP_tau (Eq. 11,
hidden 16) with tau_base 1, and no W_O (head h's estimate is added to its own
residual coordinates). Sizes are the zoo's: vocab 2048, context 256, d_model
128, 4 layers, 4 heads of 32, 2 KV heads, SwiGLU MLP 384, RoPE theta 10000,
tied embedding.

Forward pass. reference/bft/bft_ref.py is a script (main(ckpt) reads and
writes files) whose FFN Jacobian comes from torch.autograd.functional.jacobian
over all B*T tokens at once, which needs (B*T*D)^2 floats (23 GB for the
parity test's 2x300 ids). bft_forward below re-states that reference step by
step as a function of a tensor dict, with one change: the diagonal of the
SwiGLU Jacobian in closed form, J_i = sum_k W_down[i,k] (silu'(g_k) W_gate[k,i]
u_k + silu(g_k) W_up[k,i]), which is differentiable and what the Go pass
computes. `--check-ref DIR` runs bft_ref.py on DIR with short ids and
compares its logits and every per-layer tensor with bft_forward's.

Initialisation (paper 003 App. J/L and notes 003 A.4, A.7): Llama-style
N(0, 0.02^2) for embedding and projections, RMSNorm weights 1, q_logits -9
(Q ~ 1.2e-4), MLP_tau's output layer zero (softplus = ln 2 at step 0) and its
hidden layer N(0, 0.02^2), tau_range 1 (so Eq. 11 equals Eq. 10, tau = 1 + ln 2,
at init; the paper gives no value). The paper's training-time extras (50
warmup steps with BFT off, a 100x learning rate for precision parameters, the
rank-16 SVD / running-average Jacobian) are not used: the exact Jacobian is
differentiated through, from step 1. BFT parameters get no weight decay.

Usage:
  bft.py [--steps N --threads 2 ...]             train into zoo/checkpoints/bft
  bft.py --eval DIR --ids IDS.json --logits OUT.safetensors
  bft.py --check-ref DIR                         compare with reference/bft/bft_ref.py
Written in this project.
"""

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

# Threads that wait for work sleep instead of spinning: on the shared 2-core
# machine spinning OpenMP threads made steps 2-3x slower. No effect on results.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from bft_ref import rms_norm, rope  # noqa: E402  (reference/bft, on the path through common)

REF = os.path.join(common.ROOT, "reference", "bft", "bft_ref.py")
NAME = "bft"

# Activations and their derivatives (the slopes of the closed-form Jacobian).
ACT = {
    "silu": (F.silu, lambda g: torch.sigmoid(g) * (1 + g * (1 - torch.sigmoid(g)))),
    "gelu": (F.gelu, lambda g: 0.5 * (1 + torch.erf(g / math.sqrt(2))) + g * torch.exp(-0.5 * g * g) / math.sqrt(2 * math.pi)),
}
ACT["swish"] = ACT["silu"]


def make_config(args):
    """config.json in the layout model/bft_config.go reads, every bft option written out."""
    dh = args.d_model // args.heads
    return {
        "model_type": "bft", "architectures": ["BFTForCausalLM"],
        "hidden_size": args.d_model, "num_hidden_layers": args.layers, "num_attention_heads": args.heads,
        "num_key_value_heads": args.kv_heads, "head_dim": dh, "intermediate_size": args.d_mlp,
        "vocab_size": args.vocab, "max_position_embeddings": args.ctx, "rms_norm_eps": 1e-6,
        "hidden_act": "silu", "rope_theta": 10000.0, "tie_word_embeddings": True,
        "attention_bias": False, "mlp_bias": False, "use_qk_norm": False, "torch_dtype": "float32",
        "bft": {
            "output_proj": False, "observation": "reml", "prior_nu": 1.0, "prior_sigma2": 1.0 / dh,
            "kriging": "mean_precision", "recency_decay": False, "jacobian": "exact",
            "jacobian_clip": "square", "jacobian_eps": 0.01, "q_max": 1.0, "lambda_max": 100.0,
            "lambda_max_on": ["obs", "posterior", "predicted"], "initial_precision": "mlp",
            "tau_base": 1.0, "tau_base_per_token": False, "tau_mlp_hidden": 16,
        },
    }


def init_params(cfg, gen):
    """Initial tensors, named as model/bft_config.go lists them (tied head, no o_proj)."""
    D, L, H, KV, F_, V = (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"],
                          cfg["num_key_value_heads"], cfg["intermediate_size"], cfg["vocab_size"])
    dh = cfg["head_dim"]
    hid = cfg["bft"]["tau_mlp_hidden"]

    def normal(*shape):
        return torch.randn(*shape, generator=gen) * 0.02

    P = {"model.embed_tokens.weight": normal(V, D)}
    for l in range(L):
        p = f"model.layers.{l}."
        P[p + "input_layernorm.weight"] = torch.ones(D)
        P[p + "self_attn.q_proj.weight"] = normal(H * dh, D)
        P[p + "self_attn.k_proj.weight"] = normal(KV * dh, D)
        P[p + "self_attn.v_proj.weight"] = normal(KV * dh, D)
        P[p + "post_attention_layernorm.weight"] = torch.ones(D)
        P[p + "mlp.gate_proj.weight"] = normal(F_, D)
        P[p + "mlp.up_proj.weight"] = normal(F_, D)
        P[p + "mlp.down_proj.weight"] = normal(D, F_)
        P[p + "bft.q_logits"] = torch.full((D,), -9.0)
    P["model.bft.tau_mlp.0.weight"] = normal(hid, D)
    P["model.bft.tau_mlp.0.bias"] = torch.zeros(hid)
    P["model.bft.tau_mlp.2.weight"] = torch.zeros(1, hid)
    P["model.bft.tau_mlp.2.bias"] = torch.zeros(1)
    P["model.bft.tau_range"] = torch.ones(1)
    P["model.norm.weight"] = torch.ones(D)
    return P


def bft_forward(W, cfg, ids, trace=False):
    """Logits [B, T, V] of a BFT LM (bft_ref.py's pass, differentiable); with trace, also
    the per-layer tensors under bft_ref.py's names (l{l}.lambda, .gain, ...)."""
    bft = cfg.get("bft", {})
    B, T = ids.shape
    D, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    dh = cfg.get("head_dim", D // H)
    eps = cfg["rms_norm_eps"]
    if cfg["hidden_act"] not in ACT:
        raise ValueError(f"hidden_act {cfg['hidden_act']!r}: this script knows {sorted(ACT)}")
    act, slope = ACT[cfg["hidden_act"]]
    for key, want in (("output_proj", False), ("observation", "reml"), ("recency_decay", False),
                      ("initial_precision", "mlp"), ("tau_base_per_token", False)):
        if bft.get(key, want) != want:
            raise ValueError(f"bft.{key} = {bft[key]!r}: this script trains and evaluates only {want!r}")
    nu = bft.get("prior_nu", 1.0)
    s02 = bft.get("prior_sigma2", 1.0 / dh)
    lmax = bft.get("lambda_max", 100.0)
    cap_on = set(bft.get("lambda_max_on", ["obs", "posterior", "predicted"]))
    q_max = bft.get("q_max", 1.0)
    jeps = bft.get("jacobian_eps", 0.01)

    def cap(x, which):
        return x.clamp(max=lmax) if (lmax > 0 and which in cap_on) else x

    out = {}
    x = W["model.embed_tokens.weight"][ids]
    # Layer-0 precision (Eq. 11), broadcast over D.
    hdn = F.gelu(F.linear(x, W["model.bft.tau_mlp.0.weight"], W["model.bft.tau_mlp.0.bias"]))
    mlp = F.linear(hdn, W["model.bft.tau_mlp.2.weight"], W["model.bft.tau_mlp.2.bias"])[..., 0]
    tau = W["model.bft.tau_range"][0] * bft.get("tau_base", 1.0) + F.softplus(mlp)
    out["tau"] = tau
    lam = tau[..., None].expand(B, T, D)

    pos = torch.arange(T)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        get = lambda n: W.get(p + n)  # noqa: E731
        out[f"l{l}.lambda"] = lam
        # Observe: Eq. 2 in the log-bias form.
        xn = rms_norm(x, get("input_layernorm.weight"), eps)
        q = F.linear(xn, get("self_attn.q_proj.weight"), get("self_attn.q_proj.bias")).view(B, T, H, dh).transpose(1, 2)
        k = F.linear(xn, get("self_attn.k_proj.weight"), get("self_attn.k_proj.bias")).view(B, T, KV, dh).transpose(1, 2)
        v = F.linear(xn, get("self_attn.v_proj.weight"), get("self_attn.v_proj.bias")).view(B, T, KV, dh).transpose(1, 2)
        if cfg.get("use_qk_norm"):
            q = rms_norm(q, get("self_attn.q_norm.weight"), eps)
            k = rms_norm(k, get("self_attn.k_norm.weight"), eps)
        q, k = rope(q, pos, cfg["rope_theta"]), rope(k, pos, cfg["rope_theta"])
        k = k.repeat_interleave(H // KV, dim=1)
        v = v.repeat_interleave(H // KV, dim=1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(dh)
        if bft.get("kriging", "mean_precision") == "mean_precision":
            scores = scores + torch.log(lam.mean(-1))[:, None, None, :]
        A = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        # Kriging estimate and REML precision (Eqs. 5-7).
        e = A @ v
        S = (A @ (v * v) - e * e).clamp(min=0)
        neff = 1.0 / (A * A).sum(-1, keepdim=True)
        lam_obs = cap((neff + nu) / (S + nu * s02), "obs").transpose(1, 2).reshape(B, T, D)
        e = e.transpose(1, 2).reshape(B, T, D)
        # Update (Eq. 3).
        K = lam_obs / (lam + lam_obs)
        x = x + K * e
        lam_post = cap(lam + lam_obs, "posterior")
        # Predict (Eqs. 4, 8, 9): FFN at Norm(h'), its exact Jacobian diagonal.
        wg, wu, wd = get("mlp.gate_proj.weight"), get("mlp.up_proj.weight"), get("mlp.down_proj.weight")
        y = rms_norm(x, get("post_attention_layernorm.weight"), eps)
        g = F.linear(y, wg, get("mlp.gate_proj.bias"))
        u = F.linear(y, wu, get("mlp.up_proj.bias"))
        x = x + F.linear(act(g) * u, wd, get("mlp.down_proj.bias"))
        if bft.get("jacobian", "exact") == "exact":
            J = (slope(g) * u) @ (wd * wg.t()).t() + act(g) @ (wd * wu.t()).t()
        else:
            J = torch.zeros_like(x)
        Q = F.softplus(get("bft.q_logits")) * q_max
        if bft.get("jacobian_clip", "square") == "abs":
            d = (1 + J).abs().clamp(min=jeps) ** 2
        else:
            d = ((1 + J) ** 2).clamp(min=jeps)
        lam = cap(1.0 / (d / lam_post + Q), "predicted")
        if trace:
            out.update({f"l{l}.pattern": A, f"l{l}.lambda_obs": lam_obs.view(B, T, H, dh),
                        f"l{l}.gain": K.view(B, T, H, dh), f"l{l}.z": (K * e).view(B, T, H, dh),
                        f"l{l}.lambda_post": lam_post, f"l{l}.resid_post": x, f"l{l}.jacobian": J,
                        f"l{l}.lambda_pred": lam})
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", True) else W["lm_head.weight"]
    out["logits"] = F.linear(rms_norm(x, W["model.norm.weight"], eps), head)
    return out


class BFTLM(torch.nn.Module):
    """bft_forward on Parameters: forward(ids [B, T]) -> logits [B, T, V]."""

    def __init__(self, cfg, tensors):
        super().__init__()
        self.cfg = cfg
        self.names = list(tensors)
        for n, t in tensors.items():
            self.register_parameter(n.replace(".", "__"), torch.nn.Parameter(t.clone().float()))

    def tensors(self):
        return {n: getattr(self, n.replace(".", "__")) for n in self.names}

    def forward(self, ids):
        return bft_forward(self.tensors(), self.cfg, ids)["logits"]


def load(ckpt):
    with open(os.path.join(ckpt, "config.json")) as f:
        cfg = json.load(f)
    return cfg, common.safetensors_io.load(os.path.join(ckpt, "model.safetensors"))


def run_eval(ckpt, ids_path, out):
    """PyTorch logits of the saved checkpoint (float32, eval mode, one thread)."""
    torch.set_num_threads(1)
    cfg, W = load(ckpt)
    with open(ids_path) as f:
        ids = torch.tensor(json.load(f), dtype=torch.int64)
    with torch.no_grad():
        logits = bft_forward(W, cfg, ids)["logits"]
    common.save_safetensors(out, {"logits": logits.float()})


def check_ref(ckpt, T=24):
    """Run reference/bft/bft_ref.py on ckpt with 2 rows of T ids and print
    max|ours - ref| / max|ref| for every tensor both produce."""
    cfg, W = load(ckpt)
    gen = torch.Generator().manual_seed(5)
    ids = torch.randint(0, cfg["vocab_size"], (2, T), generator=gen)
    with tempfile.TemporaryDirectory() as tmp:
        for f in ("config.json", "model.safetensors"):
            shutil.copy(os.path.join(ckpt, f), tmp)
        with open(os.path.join(tmp, "ids.json"), "w") as f:
            json.dump(ids.tolist(), f)
        subprocess.run([sys.executable, REF, tmp], check=True)
        ref = common.safetensors_io.load(os.path.join(tmp, "ref.safetensors"))
    with torch.no_grad():
        ours = bft_forward(W, cfg, ids, trace=True)
    worst = 0.0
    for n in sorted(ref):
        r, o = ref[n].double(), ours[n].double()
        rel = float((o - r).abs().max() / r.abs().max().clamp(min=1e-30))
        worst = max(worst, rel)
        print(f"{n:18s} {rel:.2e}")
    print(f"worst {worst:.2e} over {len(ref)} tensors (T = {T})")
    return worst


def main():
    p = common.base_args(__doc__.splitlines()[0], out=os.path.join(common.ZOO, "checkpoints", NAME),
                         steps=450, lr=3e-3, max_minutes=12.0)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--d-mlp", type=int, default=384)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--check-ref", metavar="DIR", help="compare with reference/bft/bft_ref.py on DIR")
    args = p.parse_args()
    if args.eval:
        if not (args.ids and args.logits):
            sys.exit("--eval needs --ids and --logits")
        run_eval(args.eval, args.ids, args.logits)
        return
    if args.check_ref:
        sys.exit(0 if check_ref(args.check_ref) <= 1e-4 else 1)

    torch.manual_seed(args.seed)
    cfg = make_config(args)
    model = BFTLM(cfg, init_params(cfg, torch.Generator().manual_seed(args.seed)))
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{NAME}: {n_params} parameters", flush=True)

    def on_log(step, rec):
        # Learned precision parameters, per layer: mean Q and mean tau on the held-out windows.
        W = model.tensors()
        rec["Q_mean"] = [round(float(F.softplus(W[f"model.layers.{l}.bft.q_logits"]).mean()) * cfg["bft"]["q_max"], 6)
                         for l in range(cfg["num_hidden_layers"])]
        rec["tau_range"] = round(float(W["model.bft.tau_range"][0]), 5)

    log = common.train(model, args, on_log=on_log, no_decay=lambda n, p: p.dim() < 2 or "bft" in n)
    os.makedirs(args.out, exist_ok=True)
    common.write_json(os.path.join(args.out, "config.json"), cfg)
    common.save_safetensors(os.path.join(args.out, "model.safetensors"), model.tensors())
    common.copy_tokenizer(args.out)
    steps = log[-1]["step"]
    common.model_card(
        args.out, "BFT LM (zoo)",
        "A 4-layer Bayesian Filtering Transformer language model (paper 003, Algorithm 1) in this "
        "project's BFT checkpoint layout (model/bft_config.go), trained here by zoo/train/bft.py with every "
        "BFT option at its documented default: REML observation precision (nu 1, sigma0^2 = 1/32), "
        "mean-precision kriging, exact FFN Jacobian with the (1+J)^2 >= 0.01 clip, Q = softplus(q_logits) "
        "(Q_max 1, q_logits initialised at -9), lambda_max 100 on lambda_obs/lambda'/lambda'', MLP_tau "
        "initial precision (tau_range initialised at 1, output layer at 0), no recency decay, no W_O. "
        "None of the paper's training extras (BFT warmup, precision learning-rate multiplier, low-rank "
        "Jacobian) is used.",
        args, log, n_params,
        extra=f"Sizes: d_model {args.d_model}, {args.layers} layers, {args.heads} heads of "
              f"{args.d_model // args.heads}, {args.kv_heads} KV heads, SwiGLU MLP {args.d_mlp}, RoPE theta "
              f"10000, vocab {args.vocab}, tied embedding. Seconds per step: "
              f"{log[-1]['elapsed_s'] / steps:.2f}.")
    common.write_json(os.path.join(args.out, "zoo.json"),
                      {"name": NAME, "arch": "bft", "script": "train/bft.py", "lm": True, "demo": False})


if __name__ == "__main__":
    main()
