"""Qwen3-style decoder LM of the reference zoo, with an optional Qiu et al. output gate.

The module reproduces Hugging Face's Qwen3ForCausalLM (eager attention) in
the checkpoint layout model/decoder.go reads: RMSNorm pre-norm, per-head
RMSNorm on q and k before RoPE (rotate-half, cos/sin from float32 angles as
HF computes them), grouped-query attention, SwiGLU MLP, no biases, tied
embeddings (lm_head.weight is not saved, as save_pretrained omits it).

--gate headwise adds the head-wise sigmoid output gate of Qiu et al.
("Gated Attention for Large Language Models"): the gate logits are packed in
q_proj, whose output, viewed as [KV groups, G·head_dim + G] with G query
heads per key/value head, holds each group's G·head_dim query rows followed
by its G gate rows. The gate is computed from the same normalized input as
the queries, sees neither q_norm nor RoPE, and multiplies each head's
attention output before o_proj (model/gated.go).

Modes:
  train:        python3 zoo/train/lm.py --gate none|headwise --out <dir> [--steps N ...]
  eval:         python3 zoo/train/lm.py --eval <ckpt> --ids <ids.json> --logits <out.safetensors>
  golden check: python3 zoo/train/lm.py --check-golden /work/shared/golden/<case>
  sample:       python3 zoo/train/lm.py --sample <ckpt> --tokens 8192 --stream-out <file.json>

Written in this project (torch 1.13, CPU, float32).
"""

import json
import os
import sys
import time

# OpenMP workers that sleep instead of spinning while they wait: on the
# shared 2-core machine spinning threads more than doubled the CPU time per
# step. Must be set before torch loads libgomp; results are unaffected.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402  (zoo/train/common.py)

EOT_ID = 2047  # <|endoftext|> in the zoo tokenizer


class RMSNorm(nn.Module):
    """RMSNorm as HF's Qwen3RMSNorm: x·rsqrt(mean(x²) + eps)·w over the last axis."""

    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


def rope_cos_sin(T, dh, theta):
    """cos, sin [T, dh] of the rotate-half RoPE, with HF's float32 angle arithmetic."""
    inv = 1.0 / (theta ** (torch.arange(0, dh, 2, dtype=torch.int64).float() / dh))
    pos = torch.arange(T, dtype=torch.int64).float()
    freqs = pos[:, None] * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D, H, KV, dh = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        self.H, self.KV, self.dh, self.G = H, KV, dh, H // KV
        self.gate = bool(cfg.get("headwise_attn_output_gate", False))
        if cfg.get("elementwise_attn_output_gate", False):
            raise ValueError("config.json: elementwise_attn_output_gate is not supported by zoo/train/lm.py")
        if cfg.get("qkv_bias", False) or cfg.get("attention_bias", False):
            raise ValueError("config.json: attention biases are not supported by zoo/train/lm.py")
        qk_norm = cfg.get("use_qk_norm", True)
        if not qk_norm:
            raise ValueError("config.json: use_qk_norm false is not supported by zoo/train/lm.py")
        q_rows = H * dh + (H if self.gate else 0)
        self.q_proj = nn.Linear(D, q_rows, bias=False)
        self.k_proj = nn.Linear(D, KV * dh, bias=False)
        self.v_proj = nn.Linear(D, KV * dh, bias=False)
        self.o_proj = nn.Linear(H * dh, D, bias=False)
        eps = cfg["rms_norm_eps"]
        self.q_norm = RMSNorm(dh, eps)
        self.k_norm = RMSNorm(dh, eps)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        H, KV, dh, G = self.H, self.KV, self.dh, self.G
        qg = self.q_proj(x)
        gate = None
        if self.gate:
            # per KV group: G·dh query rows, then G gate rows
            qg = qg.view(B, T, KV, G * dh + G)
            q, gate = qg[..., :G * dh], qg[..., G * dh:]
            q = q.reshape(B, T, H, dh)
            gate = torch.sigmoid(gate.reshape(B, T, H, 1))
        else:
            q = qg.view(B, T, H, dh)
        k = self.k_proj(x).view(B, T, KV, dh)
        v = self.v_proj(x).view(B, T, KV, dh).transpose(1, 2)
        q = self.q_norm(q).transpose(1, 2)  # [B, H, T, dh]
        k = self.k_norm(k).transpose(1, 2)  # [B, KV, T, dh]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if G > 1:
            k = k.repeat_interleave(G, dim=1)
            v = v.repeat_interleave(G, dim=1)
        w = torch.matmul(q, k.transpose(2, 3)) * (dh ** -0.5) + mask
        w = torch.softmax(w, dim=-1, dtype=torch.float32)
        z = torch.matmul(w, v).transpose(1, 2)  # [B, T, H, dh]
        if gate is not None:
            z = z * gate
        return self.o_proj(z.reshape(B, T, H * dh))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D, Fd = cfg["hidden_size"], cfg["intermediate_size"]
        if cfg.get("hidden_act", "silu") != "silu":
            raise ValueError("config.json: hidden_act %r is not supported by zoo/train/lm.py" % cfg["hidden_act"])
        self.gate_proj = nn.Linear(D, Fd, bias=False)
        self.up_proj = nn.Linear(D, Fd, bias=False)
        self.down_proj = nn.Linear(Fd, D, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList([Layer(cfg) for _ in range(cfg["num_hidden_layers"])])
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


class LM(nn.Module):
    """Qwen3ForCausalLM with tied embeddings; state_dict names are HF's."""

    def __init__(self, cfg):
        super().__init__()
        if not cfg.get("tie_word_embeddings", True):
            raise ValueError("config.json: untied embeddings are not supported by zoo/train/lm.py")
        if cfg.get("rope_scaling") is not None:
            raise ValueError("config.json: rope_scaling is not supported by zoo/train/lm.py")
        self.cfg = cfg
        self.model = Body(cfg)

    def forward(self, ids):
        T = ids.shape[1]
        cos, sin = rope_cos_sin(T, self.cfg["head_dim"], self.cfg["rope_theta"])
        mask = torch.full((T, T), float("-inf")).triu(1)
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin, mask)
        x = self.model.norm(x)
        return F.linear(x, self.model.embed_tokens.weight)

    def init_weights(self, std):
        """HF's _init_weights: Linear and Embedding N(0, std²), norm weights 1."""
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=std)
            elif isinstance(m, RMSNorm):
                nn.init.ones_(m.weight)

    def hf_state_dict(self):
        """The tensors save_pretrained writes (tied lm_head.weight omitted)."""
        return {k: v for k, v in self.state_dict().items()}


def make_config(gate, args):
    """config.json as transformers' save_pretrained writes it (keys sorted).

    --gate none: the fields of Qwen3Config (transformers 4.51, as the golden
    qwen3_gqa case). --gate headwise: those of Qiu et al.'s Qwen3Config, as the
    golden qwen3_gate_headwise case, with its auto_map (a trust_remote_code
    checkpoint of their code carries it) and qkv_bias, which their modeling
    code reads although the config class does not declare it.
    """
    cfg = {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "head_dim": args.head_dim,
        "hidden_act": "silu",
        "hidden_size": args.hidden,
        "initializer_range": args.init_std,
        "intermediate_size": args.intermediate,
        "max_position_embeddings": 4096,
        "max_window_layers": args.layers,
        "model_type": "qwen3",
        "num_attention_heads": args.heads,
        "num_hidden_layers": args.layers,
        "num_key_value_heads": args.kv_heads,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "sliding_window": None,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "transformers_version": "4.51.0.dev0",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": args.vocab,
    }
    if gate == "headwise":
        cfg.update({
            "auto_map": {"AutoConfig": "configuration_qwen3.Qwen3Config",
                         "AutoModelForCausalLM": "modeling_qwen3.Qwen3ForCausalLM"},
            "elementwise_attn_output_gate": False,
            "headwise_attn_output_gate": True,
            "qkv_bias": False,
            "transformers_version": "4.46.0.dev0",
            "use_qk_norm": True,
        })
    return dict(sorted(cfg.items()))


def load_checkpoint(d):
    """LM from config.json + model.safetensors of a checkpoint folder, in eval mode."""
    cfg_path = os.path.join(d, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    if cfg.get("model_type") != "qwen3":
        sys.exit(f"{cfg_path}: model_type {cfg.get('model_type')!r}: zoo/train/lm.py runs qwen3 only")
    cfg.setdefault("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    cfg.setdefault("num_key_value_heads", cfg["num_attention_heads"])
    cfg.setdefault("rms_norm_eps", 1e-6)
    cfg.setdefault("rope_theta", 10000.0)
    return common.load_weights(LM(cfg), d)


def run_eval(args):
    common.run_eval(args, load_checkpoint)


def check_golden(args):
    """Compare logits with a golden case: max|got − ref| / max|ref| ≤ 1e-4."""
    torch.set_num_threads(args.threads)
    d = args.check_golden
    if not common.golden_ok(load_checkpoint(d), d):
        sys.exit(1)


def run_sample(args):
    """Sample a token stream from a checkpoint.

    ids[0] is <|endoftext|> (id 2047); each following token is drawn with
    torch.multinomial (generator seeded with --sample-seed) from
    softmax(logits / temperature) at the last position of a forward pass over
    the last --window ids, whose positions run from 0 (the window is
    re-encoded from scratch at every step; no cache).
    """
    torch.set_num_threads(args.threads)
    model = load_checkpoint(args.sample)
    gen = torch.Generator().manual_seed(args.sample_seed)
    ids = [EOT_ID]
    t0 = time.time()
    with torch.no_grad():
        while len(ids) < args.tokens:
            ctx = torch.tensor([ids[-args.window:]], dtype=torch.int64)
            logits = model(ctx)[0, -1] / args.temperature
            p = torch.softmax(logits.double(), dim=-1)
            ids.append(int(torch.multinomial(p, 1, generator=gen).item()))
            if len(ids) % 1024 == 0:
                print(f"{len(ids)} tokens, {time.time() - t0:.0f} s", flush=True)
    name = os.path.basename(os.path.normpath(args.sample))
    src = (f"sampled by zoo/train/lm.py --sample from zoo/checkpoints/{name} (trained here on the Brown corpus): "
           f"ids[0] = {EOT_ID} (<|endoftext|>), then {args.tokens - 1} tokens, each drawn with torch.multinomial "
           f"(torch.Generator seeded {args.sample_seed}) from softmax(logits/{args.temperature}) at the last "
           f"position of a forward pass over the last {args.window} ids (positions 0..{args.window - 1}, "
           f"re-encoded each step, float32)")
    common.write_json(args.stream_out, {"source": src, "model": name, "seed": args.sample_seed,
                                        "temperature": args.temperature, "ids": ids})
    print(f"wrote {args.stream_out}: {len(ids)} ids in {time.time() - t0:.0f} s")


def byte_decoder():
    """The inverse of the byte-level BPE alphabet: printable bytes stand for
    themselves, the other 68 bytes for the code points 256, 257, … in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    inv, extra = {}, 0
    for b in range(256):
        if b in keep:
            inv[chr(b)] = b
        else:
            inv[chr(256 + extra)] = b
            extra += 1
    return inv


def run_decode(args):
    """Print the first --count ids of a --sample stream as text (tokenizer.json vocab)."""
    with open(args.decode) as f:
        ids = json.load(f)["ids"][:args.count]
    with open(args.tokenizer) as f:
        tok = json.load(f)
    names = {i: t for t, i in tok["model"]["vocab"].items()}
    special = {a["id"]: a["content"] for a in tok.get("added_tokens", [])}
    inv = byte_decoder()
    out = bytearray()
    for i in ids:
        if i in special:
            out += special[i].encode()
        else:
            out += bytes(inv[c] for c in names[i])
    print(out.decode("utf-8", errors="replace"))


def run_train(args):
    if not args.out:
        sys.exit("--out is required for training")
    cfg = make_config(args.gate, args)
    torch.manual_seed(args.seed)
    model = LM(cfg)
    model.init_weights(args.init_std)
    params = sum(p.numel() for p in model.parameters())
    print(f"{params} parameters, gate {args.gate}", flush=True)
    log = common.train(model, args)
    out = args.out
    common.save_safetensors(os.path.join(out, "model.safetensors"), model.hf_state_dict())
    common.write_json(os.path.join(out, "config.json"), cfg)
    common.copy_tokenizer(out)
    name = os.path.basename(os.path.normpath(out))
    arch = "gated" if args.gate == "headwise" else "qwen3"
    common.write_json(os.path.join(out, "zoo.json"), {"name": name, "arch": arch, "script": "train/lm.py",
                                                      "lm": True, "demo": args.gate == "headwise"})
    if args.gate == "headwise":
        summary = ("Qwen3-style decoder with Qiu et al.'s head-wise sigmoid attention-output gate "
                   "(gate logits packed in q_proj per KV group), trained here with zoo/train/lm.py --gate headwise.")
    else:
        summary = "Qwen3-style decoder (the gated model's baseline), trained here with zoo/train/lm.py --gate none."
    extra = (f"Architecture: {args.layers} layers, hidden {args.hidden}, {args.heads} heads / {args.kv_heads} KV heads, "
             f"head_dim {args.head_dim}, SwiGLU {args.intermediate}, vocab {args.vocab}, RMSNorm eps 1e-6, QK-norm, "
             f"RoPE θ 10000, tied embeddings, no biases; init N(0, {args.init_std}²) as HF's _init_weights. "
             f"Unigram entropy of the training ids: {unigram_entropy():.4f} nats.")
    common.model_card(out, name, summary, args, log, params, extra)


def unigram_entropy():
    ids = common.load_ids("train")
    c = torch.bincount(ids).double()
    p = c[c > 0] / c.sum()
    return float(-(p * p.log()).sum())


def main():
    p = common.base_args(__doc__.split("\n")[0], steps=1200)
    p.add_argument("--gate", choices=["none", "headwise"], default="none")
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--intermediate", type=int, default=384)
    p.add_argument("--init-std", type=float, default=0.02)
    p.add_argument("--check-golden", help="golden case folder: compare logits at rel. ≤ 1e-4")
    p.add_argument("--sample", help="checkpoint folder to sample a token stream from")
    p.add_argument("--tokens", type=int, default=8192, help="stream length including the leading <|endoftext|>")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--window", type=int, default=256, help="sampling context: the last N ids")
    p.add_argument("--sample-seed", type=int, default=2024)
    p.add_argument("--stream-out", help="output JSON of --sample")
    p.add_argument("--decode", help="stream JSON of --sample: print its first --count ids as text")
    p.add_argument("--count", type=int, default=300)
    p.add_argument("--tokenizer", default=os.path.join(common.DATA, "tokenizer.json"))
    args = p.parse_args()
    if args.decode:
        run_decode(args)
    elif args.eval:
        if not args.ids or not args.logits:
            sys.exit("--eval needs --ids and --logits")
        run_eval(args)
    elif args.check_golden:
        check_golden(args)
    elif args.sample:
        if not args.stream_out:
            sys.exit("--sample needs --stream-out")
        run_sample(args)
    else:
        run_train(args)


if __name__ == "__main__":
    main()
