#!/usr/bin/env python3
"""Train the zoo's Selective-RoPE language model (paper 002) on the Brown corpus.

The model is the authors' Transformer LM (model_type "transformer",
TransformerForCausalLM state_dict names) with Selective RoPE in every
attention layer, in the configuration of the authors' final released LM
sweep (notes 002, section D "Release LM configs"): full-rank weight-normalised
phi-projection, learned causal conv of width 4 with SiLU, "standard" phase
gate, no bias, temperatures "rope" with theta 500000 (frozen), NeoX pair
layout, no QK-norm. Sizes are the zoo's: vocab 2048, context 256, d_model
128, 4 layers, 4 heads; Selective RoPE shares one angle set per head between
q and k, and the authors' layer has no grouped-query attention, so there are
4 KV heads. The embedding is tied to the LM head (the authors default to an
untied head; the loader supports both).

The forward pass used for training and for --eval is
reference/selrope/selrope_ref.py's language_model, called on a dict of torch
Parameters (it is differentiable as written). Initialisation follows the
authors' HF _init_weights (notes 002 A.8): every Linear, Conv1d and the
embedding N(0, 0.02^2) with zero biases, RMSNorm weights 1, the full-rank
ChunkedLinear V kaiming_uniform(a=0) per head with its scale g = 1, Theta the
"rope" schedule, not trained (temp_grad false).

Usage:
  selrope.py [--steps N --threads 2 ...]            train into zoo/checkpoints/selrope
  selrope.py --eval DIR --ids IDS.json --logits OUT.safetensors
Written in this project.
"""

import json
import math
import os
import sys

# Threads that wait for work sleep instead of spinning: on the shared 2-core
# machine spinning OpenMP threads made steps 2-3x slower. No effect on results.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

sys.path.insert(0, os.path.join(common.ROOT, "reference", "selrope"))
import selrope_ref  # noqa: E402  (reference/selrope/selrope_ref.py)

NAME = "selrope"


def make_config(args):
    """config.json in the layout of the authors' TransformerConfig (model/selrope_model.go)."""
    return {
        "model_type": "transformer", "architectures": ["TransformerForCausalLM"],
        "hidden_size": args.d_model, "num_hidden_layers": args.layers, "num_heads": args.heads,
        "num_kv_heads": None, "qkv_bias": False, "qk_norm": False, "window_size": None,
        "max_position_embeddings": args.ctx, "hidden_ratio": 4, "intermediate_size": args.d_mlp,
        "hidden_act": "swish", "norm_eps": 1e-6, "elementwise_affine": True,
        "tie_word_embeddings": True, "vocab_size": args.vocab, "torch_dtype": "float32",
        "fuse_norm": True, "fuse_swiglu": True, "fuse_cross_entropy": True,
        "position_embedding": {
            "type": "selective_rope", "skip_conv": False, "d_conv": 4, "temp_type": "rope",
            "temp_theta": 500000, "temp_max": 1.0, "temp_grad": False, "phi_proj_rank": 16,
            "phi_parametrization": "full-rank", "conv_act": "silu", "use_gate": True,
            "gate_parametrization": "standard", "gate_low_rank_dim": 16, "use_bias": False,
            "use_triton": False, "fuse_gate": False,
        },
    }


def rope_temperature(theta, d, temp_max):
    """The release's "rope" temperatures: temp_max / theta^(2n/d), n < d/2 (float32 as torch)."""
    return temp_max / (theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))


def init_params(cfg, gen):
    """Initial tensors, named as TransformerForCausalLM.state_dict() (tied head: no lm_head)."""
    D, L, H, F, V = (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_heads"],
                     cfg["intermediate_size"], cfg["vocab_size"])
    dh = D // H
    R, C = dh // 2, D // H
    pe = cfg["position_embedding"]

    def normal(*shape):
        return torch.randn(*shape, generator=gen) * 0.02

    P = {"model.embeddings.weight": normal(V, D)}
    for l in range(L):
        p = f"model.layers.{l}."
        P[p + "attn_norm.weight"] = torch.ones(D)
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            P[p + f"attn.{n}.weight"] = normal(D, D)
        r = p + "attn.rotary."
        # ChunkedLinear(C -> R per head): kaiming_uniform(a=0) on each head's
        # [C, R] block, i.e. U(-b, b) with b = sqrt(6 / fan_in) and torch's
        # fan_in of a [C, R] matrix = R.
        bound = math.sqrt(6.0 / R)
        P[r + "phi_proj.weight"] = (torch.rand(H, C, R, generator=gen) * 2 - 1) * bound
        P[r + "phi_proj.scalar"] = torch.ones(H)
        P[r + "phi_conv1d.weight"] = normal(H * R, 1, pe["d_conv"])
        P[r + "temperature"] = rope_temperature(pe["temp_theta"], dh, pe["temp_max"]).reshape(1, 1, 1, R)
        P[r + "phase_gate_proj.weight"] = normal(H, D)
        P[r + "phase_gate_proj.bias"] = torch.zeros(H)
        P[p + "mlp_norm.weight"] = torch.ones(D)
        P[p + "mlp.gate_proj.weight"] = normal(F, D)
        P[p + "mlp.up_proj.weight"] = normal(F, D)
        P[p + "mlp.down_proj.weight"] = normal(D, F)
    P["model.norm.weight"] = torch.ones(D)
    return P


class SelRoPELM(torch.nn.Module):
    """selrope_ref.language_model on Parameters: forward(ids [B, T]) -> logits [B, T, V]."""

    def __init__(self, cfg, tensors):
        super().__init__()
        self.cfg = cfg
        self.names = list(tensors)
        for n, t in tensors.items():
            frozen = n.endswith("rotary.temperature") and not cfg["position_embedding"].get("temp_grad")
            self.register_parameter(n.replace(".", "__"),
                                    torch.nn.Parameter(t.clone().float(), requires_grad=not frozen))

    def tensors(self):
        return {n: getattr(self, n.replace(".", "__")) for n in self.names}

    def forward(self, ids):
        return selrope_ref.language_model(self.tensors(), self.cfg, ids)["logits"]


def load(ckpt):
    with open(os.path.join(ckpt, "config.json")) as f:
        cfg = json.load(f)
    return cfg, selrope_ref.read_safetensors(os.path.join(ckpt, "model.safetensors"))


def run_eval(ckpt, ids_path, out):
    """PyTorch logits of the saved checkpoint (float32, eval mode, one thread)."""
    torch.set_num_threads(1)
    cfg, P = load(ckpt)
    with open(ids_path) as f:
        ids = torch.tensor(json.load(f), dtype=torch.int64)
    with torch.no_grad():
        logits = selrope_ref.language_model(P, cfg, ids)["logits"]
    common.save_safetensors(out, {"logits": logits.float()})


def main():
    p = common.base_args(__doc__.splitlines()[0], out=os.path.join(common.ZOO, "checkpoints", NAME),
                         steps=700, lr=3e-3, max_minutes=12.0)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-mlp", type=int, default=384)
    p.add_argument("--vocab", type=int, default=2048)
    args = p.parse_args()
    if args.eval:
        if not (args.ids and args.logits):
            sys.exit("--eval needs --ids and --logits")
        run_eval(args.eval, args.ids, args.logits)
        return

    torch.manual_seed(args.seed)
    cfg = make_config(args)
    model = SelRoPELM(cfg, init_params(cfg, torch.Generator().manual_seed(args.seed)))
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{NAME}: {n_params} parameters", flush=True)
    log = common.train(model, args)
    os.makedirs(args.out, exist_ok=True)
    common.write_json(os.path.join(args.out, "config.json"), cfg)
    common.save_safetensors(os.path.join(args.out, "model.safetensors"), model.tensors())
    common.copy_tokenizer(args.out)
    steps = log[-1]["step"]
    common.model_card(
        args.out, "Selective-RoPE LM (zoo)",
        "A 4-layer Selective-RoPE Transformer language model (paper 002, \"Selective Rotary Position "
        "Embedding\") in the authors' TransformerForCausalLM layout, trained here by zoo/train/selrope.py. "
        "Rotary options of the authors' final released LM sweep: full-rank weight-normalised phi-projection, "
        "causal conv (width 4) with SiLU, standard phase gate, no bias, frozen \"rope\" temperatures "
        "(theta 500000), NeoX pairs, no QK-norm; tied embedding; no grouped-query attention (the layer "
        "has none). Initialisation as the authors' HF _init_weights (N(0, 0.02^2)), so training starts "
        "close to NoPE and the rotation is learned.",
        args, log, n_params,
        extra=f"Sizes: d_model {args.d_model}, {args.layers} layers, {args.heads} heads (head dim "
              f"{args.d_model // args.heads}), MLP {args.d_mlp}, vocab {args.vocab}. Seconds per step: "
              f"{log[-1]['elapsed_s'] / steps:.2f}.")
    common.write_json(os.path.join(args.out, "zoo.json"),
                      {"name": NAME, "arch": "selrope", "script": "train/selrope.py", "lm": True, "demo": False})


if __name__ == "__main__":
    main()
