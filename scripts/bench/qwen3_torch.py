#!/usr/bin/env python3
"""PyTorch side of scripts/bench/compare.sh: a minimal Qwen3 forward pass written
here (no transformers), weights read from safetensors by hand, and the driver
that runs it beside `probe bench` in alternating processes.

Subcommands (each prints JSON on stdout):

  run     --model DIR --ids FILE --mode plain|attn [--reps N] [--threads 2]
          one process, one measurement: {"tokens_per_s", "seconds",
          "peak_rss_mib", "threads"} like `probe bench` (best of N reps,
          loading excluded; peak RSS of the process, loading included).
          plain: the forward pass (each layer's T×T scores live only inside
          the layer, as in Hugging Face eager attention without
          output_attentions). attn: every layer's attention probabilities kept,
          as output_attentions=True returns them, plus the BFT diagnostics of
          every layer, head and query computed from them in torch (n_eff,
          entropy n_eff, S per dimension (float64), λobs, K, BOS mass, ‖e‖).
  check   --model DIR --ids FILE --logits FILE.safetensors
          max |Δlogit| / max |logit| against Go's logits (probe capture).
  sgemm   [--threads 2] [--n 2048]   torch.matmul float32 n³ GFLOP/s, best of 5.
  compare ...                        the side-by-side driver (see compare.sh).

Requires only /usr/bin/python3 with Debian's python3-torch (1.13) and numpy.
"""
import argparse
import json
import math
import os
import random
import resource
import struct
import subprocess
import sys
import time

import numpy as np
import torch

# ---------------------------------------------------------------------------
# safetensors, read by hand: 8-byte little-endian header length, JSON header,
# raw little-endian data.

_DTYPES = {"F32": (np.float32, 4), "F16": (np.float16, 2), "BF16": (np.uint16, 2), "I64": (np.int64, 8)}


def read_safetensors(path):
    """Returns {name: torch tensor} (BF16/F16 widened to float32)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt, size = _DTYPES[info["dtype"]]
        lo, hi = info["data_offsets"]
        arr = np.frombuffer(data, dtype=dt, count=(hi - lo) // size, offset=lo)
        if info["dtype"] == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] == "F16":
            arr = arr.astype(np.float32)
        out[name] = torch.from_numpy(arr.copy()).reshape(info["shape"])
    return out


def load_checkpoint(d):
    """config.json and the weights of a Hugging Face directory (single or sharded safetensors)."""
    cfg = json.load(open(os.path.join(d, "config.json")))
    index = os.path.join(d, "model.safetensors.index.json")
    w = {}
    if os.path.exists(index):
        for f in sorted(set(json.load(open(index))["weight_map"].values())):
            w.update(read_safetensors(os.path.join(d, f)))
    else:
        w = read_safetensors(os.path.join(d, "model.safetensors"))
    return cfg, {k[len("model."):] if k.startswith("model.") else k: v for k, v in w.items()}


# ---------------------------------------------------------------------------
# Qwen3: RMSNorm, q/k/v projections, per-head RMSNorm of q and k (QK-norm)
# before rotate-half RoPE, grouped-query attention, SwiGLU MLP.


class Qwen3:
    def __init__(self, cfg, w):
        self.c, self.w = cfg, w
        self.L = cfg["num_hidden_layers"]
        self.H = cfg["num_attention_heads"]
        self.KV = cfg["num_key_value_heads"]
        self.dh = cfg.get("head_dim") or cfg["hidden_size"] // self.H
        self.eps = cfg["rms_norm_eps"]
        self.theta = cfg.get("rope_theta", 10000.0)
        self.head = w.get("lm_head.weight", w["embed_tokens.weight"])

    def rms(self, x, weight):
        # Qwen3RMSNorm: float32 mean square, x·rsqrt(ms + eps), times the weight
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    def rope(self, T):
        inv = 1.0 / (self.theta ** (torch.arange(0, self.dh, 2, dtype=torch.int64).float() / self.dh))
        f = torch.outer(torch.arange(T, dtype=torch.int64).float(), inv)
        emb = torch.cat((f, f), dim=-1)
        return emb.cos(), emb.sin()

    @staticmethod
    def rot(x, cos, sin):
        h = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., h:], x[..., :h]), dim=-1) * sin

    def forward(self, ids, keep_attn=False, logits=False):
        """Hidden states after the final norm (and logits when asked). With
        keep_attn, also every layer's attention probabilities [H, T, T] and
        value vectors [KV, T, dh], as output_attentions (plus a value hook)
        would give them."""
        w, H, KV, dh = self.w, self.H, self.KV, self.dh
        T = ids.shape[0]
        x = w["embed_tokens.weight"][ids]
        cos, sin = self.rope(T)
        mask = torch.full((T, T), float("-inf")).triu(1)
        attns, values = [], []
        for l in range(self.L):
            p = "layers.%d." % l
            h = self.rms(x, w[p + "input_layernorm.weight"])
            q = (h @ w[p + "self_attn.q_proj.weight"].T).view(T, H, dh).transpose(0, 1)
            k = (h @ w[p + "self_attn.k_proj.weight"].T).view(T, KV, dh).transpose(0, 1)
            v = (h @ w[p + "self_attn.v_proj.weight"].T).view(T, KV, dh).transpose(0, 1)
            q = self.rot(self.rms(q, w[p + "self_attn.q_norm.weight"]), cos, sin)
            k = self.rot(self.rms(k, w[p + "self_attn.k_norm.weight"]), cos, sin)
            kr = k.repeat_interleave(H // KV, dim=0)
            vr = v.repeat_interleave(H // KV, dim=0)
            a = torch.softmax(q @ kr.transpose(1, 2) / math.sqrt(dh) + mask, dim=-1)
            z = (a @ vr).transpose(0, 1).reshape(T, H * dh)
            if keep_attn:
                attns.append(a)
                values.append(v)
            del a
            x = x + z @ w[p + "self_attn.o_proj.weight"].T
            h = self.rms(x, w[p + "post_attention_layernorm.weight"])
            g = torch.nn.functional.silu(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T)
            x = x + g @ w[p + "mlp.down_proj.weight"].T
        x = self.rms(x, w["norm.weight"])
        out = {"hidden": x, "attentions": attns, "values": values}
        if logits:
            out["logits"] = x @ self.head.T
        return out


def diagnostics(attns, values, H, KV):
    """The BFT App. I diagnostics of every layer, head and query from stored
    attention probabilities, in torch: n_eff = 1/Σα², entropy n_eff,
    per-dimension e = αv and S = Σα(v − e)² in float64 (shifted by the
    head's mean value, as probe does), λobs = (n_eff + 1)/(S̄ + 1/dh),
    per-dimension λ and K means, K at λ = 1, BOS mass α₀ and ‖e‖. One head
    at a time (float64 copies of one [T, T] map)."""
    res = []
    for a, v in zip(attns, values):
        dh = v.shape[-1]
        for hh in range(H):
            A = a[hh]
            vv = v[hh // (H // KV)].double()
            c = vv.mean(0)
            w = vv - c
            A64 = A.double()
            s1 = A64.sum(-1, keepdim=True)
            neff = 1 / A64.pow(2).sum(-1)
            ent = torch.exp(-torch.special.xlogy(A64, A64).sum(-1))
            f = A64 @ w
            g = A64 @ w.pow(2)
            u = f + c * (s1 - 1)
            e = f + c * s1
            S = (g - u * (2 * f - u * s1)).clamp_min(0)
            lam = (neff + 1) / (S.mean(-1) + 1 / dh)
            lam_dim = (neff[:, None] + 1) / (S + 1 / dh)
            res.append(torch.stack([neff, ent, S.mean(-1), lam, lam / (1 + lam), lam_dim.mean(-1),
                                    (lam_dim / (1 + lam_dim)).mean(-1), A64[:, 0], e.norm(dim=-1)]))
            del A64, f, g, S
    return res


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def cmd_run(args):
    torch.set_num_threads(args.threads)
    cfg, w = load_checkpoint(args.model)
    m = Qwen3(cfg, w)
    ids = torch.tensor(json.load(open(args.ids))[: args.tokens or None], dtype=torch.int64)
    best = None
    with torch.no_grad():
        for _ in range(args.reps):
            t0 = time.perf_counter()
            if args.mode == "plain":
                m.forward(ids)
            else:
                out = m.forward(ids, keep_attn=True)
                diagnostics(out["attentions"], out["values"], m.H, m.KV)
                del out
            s = time.perf_counter() - t0
            best = s if best is None else min(best, s)
    T = ids.shape[0]
    print(json.dumps({"tokens_per_s": T / best, "seconds": best, "peak_rss_mib": peak_rss_mib(), "threads": args.threads}))


def cmd_check(args):
    cfg, w = load_checkpoint(args.model)
    m = Qwen3(cfg, w)
    ids = torch.tensor(json.load(open(args.ids)), dtype=torch.int64)
    with torch.no_grad():
        got = m.forward(ids, logits=True)["logits"]
    ref = read_safetensors(args.logits)["logits"].reshape(got.shape)
    rel = float((got - ref).abs().max() / ref.abs().max())
    print(json.dumps({"logits_rel_err": rel, "T": int(ids.shape[0])}))
    if not rel <= args.tol:
        sys.exit("logits differ from probe's: rel. error %.3g > %g" % (rel, args.tol))


def cmd_sgemm(args):
    torch.set_num_threads(args.threads)
    n = args.n
    a, b = torch.randn(n, n), torch.randn(n, n)
    best = None
    for _ in range(5):
        t0 = time.perf_counter()
        a @ b
        s = time.perf_counter() - t0
        best = s if best is None else min(best, s)
    print(json.dumps({"sgemm_gflops": 2 * n ** 3 / best / 1e9, "n": n, "threads": args.threads}))


# ---------------------------------------------------------------------------
# The driver: alternating runs of the four modes in one invocation.

MODES = {
    "a": "PyTorch plain forward",
    "b": "PyTorch + attentions kept + diagnostics",
    "c": "probe bench --no-diagnostics",
    "d": "probe bench (all diagnostics)",
    "e": "probe bench --no-diagnostics, pure Go",
    "f": "probe bench (all diagnostics), pure Go",
}


def forward_flops(cfg, T, res=None):
    """Useful FLOPs of one forward pass without the LM head: 2·T per weight of
    the layers' matrices, plus 2·dh per (query, visible key) pair for q·k and
    again for α·v (the causal half: T(T+1)/2 pairs per head). res is a probe
    bench result: its pass runs "blocks" blocks, the last of them only through
    its heads (no o_proj, no MLP) when "last_block_heads_only" is set."""
    D, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    dh = cfg.get("head_dim") or D // H
    F = cfg["intermediate_size"]
    per_layer = D * H * dh * 2 + D * KV * dh * 2 + 3 * D * F
    blocks = (res or {}).get("blocks", L)
    flops = blocks * (2 * T * per_layer + 4 * dh * H * T * (T + 1) / 2)
    if (res or {}).get("last_block_heads_only"):
        flops -= 2 * T * (D * H * dh + 3 * D * F)
    return flops


def mem_available():
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def loadavg():
    return open("/proc/loadavg").read().split()[:3]


def run_json(cmd, env):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        return {"error": (p.stderr.strip() or p.stdout.strip()).splitlines()[-1:] or ["exit %d" % p.returncode]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def cmd_compare(args):
    env = dict(os.environ)
    cfg = json.load(open(os.path.join(args.model, "config.json")))
    here = os.path.abspath(__file__)
    L, H = cfg["num_hidden_layers"], cfg["num_attention_heads"]
    weights = os.path.getsize(os.path.join(args.model, "model.safetensors"))
    report = {"model": args.model, "config": cfg, "weights_bytes": weights, "threads": args.threads,
              "openblas_coretype": env.get("OPENBLAS_CORETYPE", "(unset: detected)"), "load_before": loadavg(), "lengths": {}}
    sg = run_json([sys.executable, here, "sgemm", "--threads", str(args.threads)], env)
    report["sgemm"] = sg
    report["sgemm_go_gflops"] = args.go_sgemm
    peak = max(sg.get("sgemm_gflops", 0), args.go_sgemm)
    report["sgemm_peak_gflops"] = peak
    print("sgemm peak: %.1f GFLOP/s, the larger of torch.matmul 2048³ (%d threads, best of 5: %.1f) and "
          "BenchmarkSgemmPeak (best of 5: %.1f)" % (peak, args.threads, sg.get("sgemm_gflops", 0), args.go_sgemm))
    print("OPENBLAS_CORETYPE: %s" % report["openblas_coretype"])
    print("load average before: %s" % " ".join(report["load_before"]))
    modes = [m for m in args.modes if m in MODES]
    if args.probe_go:
        modes += [m for m in "ef" if m not in modes]
    else:
        modes = [m for m in modes if m not in "ef"]
    for T in args.tokens:
        ids = os.path.join(args.work, "ids-%d.json" % T)
        rng = random.Random(T)
        json.dump([rng.randrange(cfg["vocab_size"]) for _ in range(T)], open(ids, "w"))
        gen = env.copy()
        gen["GOMAXPROCS"] = str(args.threads)
        cmds = {
            "a": [sys.executable, here, "run", "--model", args.model, "--ids", ids, "--mode", "plain"],
            "b": [sys.executable, here, "run", "--model", args.model, "--ids", ids, "--mode", "attn"],
            "c": [args.probe, "bench", "--model", args.model, "--ids", ids, "--no-diagnostics"],
            "d": [args.probe, "bench", "--model", args.model, "--ids", ids],
            "e": [args.probe_go or "", "bench", "--model", args.model, "--ids", ids, "--no-diagnostics"],
            "f": [args.probe_go or "", "bench", "--model", args.model, "--ids", ids],
        }
        for k in "ab":
            cmds[k] += ["--reps", str(args.reps), "--threads", str(args.threads)]
        for k in "cdef":
            cmds[k] += ["--reps", str(args.reps)]
        # What a PyTorch run needs beyond the weights: (a) one layer's scores
        # and probabilities, (b) every layer's probabilities.
        need = {"a": 2 * H * T * T * 4 + weights, "b": L * H * T * T * 4 + H * T * T * 4 + weights}
        avail = mem_available()
        results = {k: [] for k in modes}
        skipped = {}
        for k in modes:
            # (at most half of the available memory: the machine may be shared)
            if k in need and need[k] > 0.5 * avail and not args.force:
                skipped[k] = "cannot run: needs ≥ %.1f GB (attention maps %s) and %.1f GB is available (--force to try)" % (
                    need[k] / 1e9, "of every layer" if k == "b" else "of one layer", avail / 1e9)
        for r in range(args.rounds):
            order = modes[r % len(modes):] + modes[:r % len(modes)]  # rotate, so no mode always runs first
            for k in order:
                if k in skipped:
                    continue
                res = run_json(cmds[k], gen)
                res["load"] = loadavg()
                results[k].append(res)
                if "error" in res:
                    skipped[k] = "failed: %s" % res["error"]
        flops = forward_flops(cfg, T)
        row = {"flops": flops, "modes": {}}
        print("\nT = %d (%.1f GFLOP per forward pass; best of %d rounds × %d reps; GFLOP/s counts what each pass runs)" % (
            T, flops / 1e9, args.rounds, args.reps))
        print("  %-46s %12s %10s %14s %9s %8s" % ("mode", "tokens/s", "seconds", "peak RSS MiB", "GFLOP/s", "% peak"))
        for k in modes:
            ok = [x for x in results[k] if "error" not in x]
            if k in skipped and not ok:
                print("  %-46s %s" % ("(%s) %s" % (k, MODES[k]), skipped[k]))
                row["modes"][k] = {"skipped": skipped[k]}
                continue
            best = max(ok, key=lambda x: x["tokens_per_s"])
            rss = max(x["peak_rss_mib"] for x in ok)
            mf = forward_flops(cfg, T, best)
            gfs = mf / best["seconds"] / 1e9
            row["modes"][k] = {"tokens_per_s": best["tokens_per_s"], "seconds": best["seconds"], "peak_rss_mib": rss,
                               "gflops": gfs, "pct_peak": 100 * gfs / peak, "flops": mf, "runs": results[k]}
            print("  %-46s %12.1f %10.3f %14.0f %9.1f %7.1f%%" % ("(%s) %s" % (k, MODES[k]), best["tokens_per_s"],
                                                                  best["seconds"], rss, gfs, 100 * gfs / peak))
            if mf != flops:
                print("  %-46s %s" % ("", "(%.1f GFLOP: %d blocks, the last through its heads only; nothing reads the rest)"
                                      % (mf / 1e9, best.get("blocks", L))))
        M = row["modes"]

        def ratio(x, y, key="tokens_per_s"):
            if key in M.get(x, {}) and key in M.get(y, {}):
                return M[x][key] / M[y][key]
            return None

        ratios = {"d/a tokens/s": ratio("d", "a"), "c/a tokens/s": ratio("c", "a"), "d/b tokens/s": ratio("d", "b"),
                  "d/c tokens/s": ratio("d", "c"), "RSS d/b": ratio("d", "b", "peak_rss_mib"),
                  "RSS d/a": ratio("d", "a", "peak_rss_mib"),
                  "c/e tokens/s (OpenBLAS/pure Go, plain)": ratio("c", "e"),
                  "d/f tokens/s (OpenBLAS/pure Go, diagnostics)": ratio("d", "f")}
        if "peak_rss_mib" in M.get("d", {}):
            ratios["RSS (d) above weights, MiB"] = M["d"]["peak_rss_mib"] - weights / 2 ** 20
        row["ratios"] = {k: v for k, v in ratios.items() if v is not None}
        for k, v in row["ratios"].items():
            print("  %-46s %.3f" % (k, v))
        report["lengths"][str(T)] = row
    report["load_after"] = loadavg()
    print("\nload average after: %s" % " ".join(report["load_after"]))
    if args.json:
        json.dump(report, open(args.json, "w"), indent=1)
        print("results: %s" % args.json)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--model", required=True)
    r.add_argument("--ids", required=True)
    r.add_argument("--tokens", type=int, default=0)
    r.add_argument("--mode", choices=["plain", "attn"], default="plain")
    r.add_argument("--reps", type=int, default=1)
    r.add_argument("--threads", type=int, default=2)
    c = sub.add_parser("check")
    c.add_argument("--model", required=True)
    c.add_argument("--ids", required=True)
    c.add_argument("--logits", required=True)
    c.add_argument("--tol", type=float, default=1e-4)
    s = sub.add_parser("sgemm")
    s.add_argument("--threads", type=int, default=2)
    s.add_argument("--n", type=int, default=2048)
    p = sub.add_parser("compare")
    p.add_argument("--model", required=True)
    p.add_argument("--probe", required=True, help="probe binary built with -tags openblas")
    p.add_argument("--probe-go", default="", help="pure-Go probe binary: adds modes (e) and (f)")
    p.add_argument("--tokens", type=int, nargs="+", default=[1024, 4096])
    p.add_argument("--modes", default="abcd")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--work", required=True)
    p.add_argument("--json", default="")
    p.add_argument("--go-sgemm", type=float, default=0, help="GFLOP/s of probe's BenchmarkSgemmPeak in this run")
    p.add_argument("--force", action="store_true", help="run PyTorch modes even when they cannot fit in memory")
    a = ap.parse_args()
    {"run": cmd_run, "check": cmd_check, "sgemm": cmd_sgemm, "compare": cmd_compare}[a.cmd](a)


if __name__ == "__main__":
    main()
