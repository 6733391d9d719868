"""Robust Filter Attention language models for the zoo (PyTorch 1.13, CPU).

An isotropic RFA (the paper's M1, §3.2 and Algorithm 1 of App. D.3) and a
spectrally coupled SC-RFA (M2, §3.4) language model, written in this project
from the paper (Racioppo, "Robust Filter Attention: Self-Attention as a
Parallel State Estimator"), the implementer notes (shared/notes/000_rfa.md)
and the golden READMEs (shared/golden/rfa_*), with the module tree and the
state_dict names of the authors' code, so that a checkpoint saved here loads
in this project's Go reader (model/rfa*.go) exactly as one of theirs would:

    token_embedding                       Embedding(V, d_e), tied to lm_head.weight
    backbone.input_proj                   Linear(d_e, d_e)
    backbone.blocks.{l}.norm1 / norm2     LayerNorm(d_e)
    backbone.blocks.{l}.attn              MultiheadIsotropicRFA:
        sigma_v, sigma_tilde_v, eta_v, gamma_v, tau_param, nu_param [H],
        t_shift_param [1, H], P_prior_log / P_scale_log [1, 1, H, 1, 1] (parameters),
        t_measure int64 [max_len], omega_v [H, d/2], mu_v [H] (buffers),
        W_q, W_k, W_v: Linear(d_e, 2·H·d) (outputs [re block | im block], head-major inside),
        W_o: Linear(2·H·d, d_e)
    backbone.blocks.{l}.ffn.0 / ffn.2     Linear(d_e, F) → ReLU → Linear(F, d_e)
    backbone.final_norm, backbone.output_proj
    lm_head                               Linear(d_e, V) with bias, weight = token_embedding.weight

The authors' persistent [4096, 4096] abs_idx and causal_mask buffers are not
registered (lags and the mask are recomputed), as the golden checkpoints
exclude them; t_measure keeps its full length 4096 (max_len), which is what
lets the Go pass run these models up to T = 4096.

Usage:
    python3 zoo/train/rfa.py --check-golden /work/shared/golden/rfa_m1      (also rfa_m2_sc, rfa_m2_7_gate)
    python3 zoo/train/rfa.py --variant m1 --out zoo/checkpoints/rfa_m1 --threads 2
    python3 zoo/train/rfa.py --variant m2 --out zoo/checkpoints/rfa_m2_sc --threads 2
    python3 zoo/train/rfa.py --eval <ckpt dir> --ids ids.json --logits out.safetensors

Written in this project; no code from the authors' repository.
"""

import argparse
import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402  (zoo/train/common.py)

MAX_LEN = 4096  # the authors' hard-coded max_len (t_measure's length)
COV_EPS = 0.01  # added to V by the authors' covariance kernel
BROWNIAN_BELOW = 1e-5  # |μ_eff| below this: the μ → 0 (L'Hôpital) kernel σ²·lag

# The authors' args namespace, field by field in the order of the golden
# config.json files (the WikiText-103 notebook's "MODEL SETTINGS" and
# "DEFAULT ABLATION OPTIONS" cells). Sizes are filled in by make_args.
BASE_ARGS = [
    ("gpu", 0), ("device", "cpu"), ("batch_size", 16), ("vocab_size", None), ("d_e", None),
    ("seq_len", None), ("n_heads", None), ("num_blocks", None), ("d_k_total", None), ("d_v_total", None),
    ("max_learned_decay", 5.0), ("max_fixed_decay", 5.0), ("max_exponent", 0), ("min_exponent", -10),
    ("epsilon", 1e-05), ("compute_metadata", False), ("compute_pulled_forward_estimates", False),
    ("causal", True), ("t_equal", True), ("sep_params", False), ("lambda_real_zero", False),
    ("use_full_residual_norm", 1), ("use_robust_weight", True), ("additive_bias_type", 1),
    ("multiplicative_bias_type", 1), ("t_shift", None), ("learn_t_shift", True), ("learn_rotations", False),
    ("learn_decay", False), ("rotate_values", True), ("zero_process_noise", False),
    ("zero_key_measurement_noise", False), ("use_total_precision_gate", 1), ("use_inner_residual", False),
    ("use_outer_residual", True), ("use_complex_input_norm", 0), ("use_complex_output_norm", False),
    ("use_real_input_norm", True), ("use_real_output_norm", True), ("add_gaussian_noise", False),
    ("use_complex_conj_constraint", True), ("use_colored_prior", False),
    ("scale_decay_by_time_interval", True), ("zero_rotations", False), ("use_ss_process_noise", False),
    ("damping", 0.05), ("omega_rescale", 1.0), ("use_rope", True), ("use_alibi", False),
    ("use_SC_RoPE", False), ("use_log_linear_decay", False), ("zero_frac", 0.25),
    ("target_ss_process_var", 0.1), ("target_measurement_var", 1.0), ("sigma_sq_v_floor", 0),
    ("ablation_name", None),
]

# The notebook's ablation cells for the two zoo models (the golden rfa_m1 and
# rfa_m2_sc configs differ from each other in exactly these fields).
ABLATIONS = {
    "m1": {"ablation_name": "M1", "use_SC_RoPE": False, "scale_decay_by_time_interval": True},
    "m2": {"ablation_name": "M2", "use_SC_RoPE": True, "scale_decay_by_time_interval": False},
}

# Args fields that change the forward pass, with the one value implemented
# here (the same list the Go reader enforces, model/rfa_config.go). Any other
# value is refused by name.
FIXED = {
    "t_equal": True, "sep_params": False, "lambda_real_zero": False, "use_full_residual_norm": 1,
    "use_robust_weight": True, "additive_bias_type": 1, "multiplicative_bias_type": 1, "t_shift": None,
    "learn_rotations": False, "learn_decay": False, "rotate_values": True, "zero_process_noise": False,
    "zero_key_measurement_noise": False, "zero_rotations": False, "use_outer_residual": True,
    "use_complex_input_norm": 0, "use_complex_output_norm": False, "use_real_input_norm": True,
    "use_real_output_norm": True, "add_gaussian_noise": False, "use_complex_conj_constraint": True,
    "use_colored_prior": False, "use_ss_process_noise": False, "use_log_linear_decay": False,
    "use_alibi": False, "use_rope": True, "sigma_sq_v_floor": 0,
}


def check_args(a):
    """Refuse an args namespace whose forward pass is not implemented here."""
    for k, want in FIXED.items():
        if k in a and a[k] != want and not (want is not None and a[k] is not None and float(a[k]) == float(want)):
            raise ValueError(f"config field {k} = {a[k]!r} is not supported (supported: {want!r})")
    if a["use_inner_residual"] and not a["use_total_precision_gate"]:
        raise ValueError("use_inner_residual without use_total_precision_gate is not supported")
    if a["d_k_total"] != a["d_v_total"]:
        raise ValueError(f"d_k_total {a['d_k_total']} differs from d_v_total {a['d_v_total']}")
    d = a["d_k_total"] // a["n_heads"]
    if d * a["n_heads"] != a["d_k_total"] or d % 2:
        raise ValueError(f"d_k_total {a['d_k_total']} must be n_heads × an even number of complex dims")


def frequency_banks(H, d, use_sc, damping, zero_frac):
    """The fixed ω and μ buffers of the authors' RoPE / SC-RoPE banks.

    Per head there are d/2 distinct frequencies (conjugate pairs). RoPE (M1):
    ω_k = 10000^(−k/(d/2)) in every head. SC (M2): one master bank
    ω_m = 10000^(−m/M), M = H·d/2, in ascending order, sharded d/2 per head
    (head 0 slowest). The decays are always the SC schedule μ_h = b·max ω of
    the head's SC shard, with the first int(H·zero_frac) heads at μ = 0 (the
    golden rfa_m1 and rfa_m2_sc buffers are exactly these values for H = 4,
    d = 8). Returns omega_v [H, d/2] and mu_v [H] (float32).
    """
    nf = d // 2
    M = H * nf
    master = torch.tensor([10000.0 ** (-m / M) for m in range(M)], dtype=torch.float64).flip(0).reshape(H, nf)
    mu = damping * master[:, -1]
    mu[: int(H * zero_frac)] = 0.0
    if use_sc:
        omega = master
    else:
        omega = torch.tensor([10000.0 ** (-k / nf) for k in range(nf)], dtype=torch.float64).expand(H, nf)
    return omega.float().contiguous(), mu.float()


def _inv_softplus(y):
    return math.log(math.expm1(y))


class MultiheadIsotropicRFA(nn.Module):
    """Isotropic Robust Filter Attention (paper §3.2, Alg. 1), per head h with
    d complex dimensions, t_i = i and lags τ = i − j ≥ 0 shifted by the
    learned Δt₊ = softplus(t_shift_param) (App. C.6):

        E(τ) = exp(clamp(−μ(τ+Δt₊), min_exponent, max_exponent))
        V(τ) = σ²(1 − E²)/(2μ) + η²E² + γ² + 0.01     (σ²(τ+Δt₊) for |μ| < 1e-5)
        Q̃, K̃, Ṽ = e^{−iωt} ⊙ (Q, K, V)
        ‖R_ij‖² = ‖Q_i‖² + E²‖K_j‖² − 2E·Re(Q̃_i†K̃_j)   (clamped at 0)
        Â = softmax_j(τ_s(−log V − κ log(1 + ‖R‖²/(νV)))),  κ = (ν+d)/d
        V̄_i = e^{iωt_i} Σ_j Â_ij E_ij Ṽ_j;  [gate: V̄ ← gV̄ + (1−g)V]
        out = W_o[Re, Im](e^{iωΔt₊} V̄)

    with σ² = softplus(sigma_v), η² = softplus(eta_v)+ε, γ² = softplus(gamma_v)+ε,
    ν = d·softplus(nu_param)+2+ε, τ_s = softplus(tau_param)+ε, μ = mu_v·scale and
    ω = ±omega_v interleaved (fixed buffers).
    """

    def __init__(self, a):
        super().__init__()
        self.a = a
        H = a["n_heads"]
        D = a["d_e"]
        self.H, self.d = H, a["d_k_total"] // H
        self.eps = float(a["epsilon"])
        self.scale = a["max_fixed_decay"] / (a["seq_len"] - 1) if a["scale_decay_by_time_interval"] else 1.0
        self.gate = bool(a["use_inner_residual"]) and bool(a["use_total_precision_gate"])
        self.record = False
        self.diag = {}
        P = lambda *s: nn.Parameter(torch.zeros(*s))  # noqa: E731
        self.sigma_v, self.sigma_tilde_v, self.eta_v, self.gamma_v = P(H), P(H), P(H), P(H)
        self.tau_param, self.nu_param = P(H), P(H)
        self.t_shift_param = P(1, H)
        self.P_prior_log, self.P_scale_log = P(1, 1, H, 1, 1), P(1, 1, H, 1, 1)
        self.register_buffer("t_measure", torch.arange(MAX_LEN, dtype=torch.int64))
        omega, mu = frequency_banks(H, self.d, a["use_SC_RoPE"], a["damping"], a["zero_frac"])
        self.register_buffer("omega_v", omega)
        self.register_buffer("mu_v", mu)
        W = 2 * a["d_k_total"]
        self.W_q, self.W_k, self.W_v = nn.Linear(D, W), nn.Linear(D, W), nn.Linear(D, W)
        self.W_o = nn.Linear(W, D)

    def init_weights(self, gen):
        """The authors' initialisation as the notes describe it (A.8)."""
        a, H = self.a, self.H
        with torch.no_grad():
            mu_raw = self.mu_v.double()
            # σ² = 2·μ·target_ss_process_var from the *unscaled* buffer μ (as
            # the authors' code does, so M1 starts with σ²/2μ_eff ≫ 0.1);
            # 1e-6 for μ = 0 heads.
            s2 = [2 * float(m) * a["target_ss_process_var"] if m > 0 else 1e-6 for m in mu_raw]
            self.sigma_v.copy_(torch.tensor([_inv_softplus(s) for s in s2]))
            self.sigma_tilde_v.fill_(0.1)
            self.eta_v.fill_(1.0)
            self.gamma_v.fill_(1.0)
            self.tau_param.fill_(1.0)
            self.nu_param.fill_(4.0)
            self.t_shift_param.zero_()
            self.P_prior_log.zero_()
            self.P_scale_log.fill_(-2.0)
            D, n = a["d_e"], a["d_k_total"]
            for lin in (self.W_q, self.W_k, self.W_v):
                mag = math.sqrt(2.0 / (D + n)) * torch.randn(n, D, generator=gen)
                ph = 2 * math.pi * torch.rand(n, D, generator=gen)
                lin.weight.copy_(torch.cat([mag * torch.cos(ph), mag * torch.sin(ph)], 0))
                lin.bias.zero_()
            mag = math.sqrt(2.0 / (D + n)) * torch.randn(D, n, generator=gen)
            ph = 2 * math.pi * torch.rand(D, n, generator=gen)
            self.W_o.weight.copy_(torch.cat([mag * torch.cos(ph), mag * torch.sin(ph)], 1) / math.sqrt(2))
            self.W_o.bias.zero_()

    def head_params(self):
        """Per-head values as the authors' metadata reports them ([H] each)."""
        eps, d = self.eps, self.d
        sp = F.softplus
        p = {
            "mu_v": self.mu_v * self.scale,
            "sigma_sq_v": sp(self.sigma_v),
            "sigma_tilde_sq_v": sp(self.sigma_tilde_v),
            "eta_sq_v": sp(self.eta_v) + eps,
            "gamma_sq_v": sp(self.gamma_v) + eps,
            "tau": sp(self.tau_param) + eps,
            "nu_over_d": (d * sp(self.nu_param) + 2 + eps) / d,
        }
        p["t_shift"] = sp(self.t_shift_param[0]) if self.a["learn_t_shift"] else torch.zeros_like(self.mu_v)
        return p

    def forward(self, x):
        B, T, _ = x.shape
        H, d, eps = self.H, self.d, self.eps
        sp = F.softplus
        # Projections R → C: [B, T, 2, H, d] → re/im [B, H, T, d].
        def proj(lin):
            y = lin(x).view(B, T, 2, H, d)
            return y[:, :, 0].transpose(1, 2), y[:, :, 1].transpose(1, 2)
        qr, qi = proj(self.W_q)
        kr, ki = proj(self.W_k)
        vr, vi = proj(self.W_v)

        # Fixed dynamics: μ per head, ω per complex channel (+ω′, −ω′ interleaved).
        om = torch.stack([self.omega_v, -self.omega_v], -1).reshape(H, d).double() * self.a["omega_rescale"]
        tshift = sp(self.t_shift_param[0]) if self.a["learn_t_shift"] else torch.zeros(H, dtype=x.dtype)

        # Lag kernels (Toeplitz, lags 0..T−1): E and V [T, H].
        lag = torch.arange(T, dtype=x.dtype)[:, None] + tshift[None, :]
        mu32 = (self.mu_v * self.scale).to(x.dtype)  # μ_eff [H]
        e = torch.clamp(-mu32 * lag, min=float(self.a["min_exponent"]), max=float(self.a["max_exponent"]))
        E = torch.exp(e)
        s2, eta2, gam2 = sp(self.sigma_v), sp(self.eta_v) + eps, sp(self.gamma_v) + eps
        brown = mu32.abs() < BROWNIAN_BELOW
        safe_mu = torch.where(brown, torch.ones_like(mu32), mu32)
        proc = torch.where(brown, s2 * lag, s2 * (-torch.expm1(2 * e)) / (2 * safe_mu))
        Vlag = proc + eta2 * E * E + gam2 + COV_EPS  # [T, H]
        nu = d * sp(self.nu_param) + 2 + eps
        kappa = (nu + d) / d
        tau_s = sp(self.tau_param) + eps

        # Rotations Φ̃⁻ = e^{−iωt} (angles in float64, as the Go pass).
        ang = torch.arange(T, dtype=torch.float64)[None, :, None] * om[:, None, :]  # [H, T, d]
        cos, sin = torch.cos(ang).to(x.dtype), torch.sin(ang).to(x.dtype)
        rot = lambda r, i: (r * cos + i * sin, i * cos - r * sin)  # noqa: E731  (× e^{−iθ})
        qtr, qti = rot(qr, qi)
        ktr, kti = rot(kr, ki)
        vtr, vti = rot(vr, vi)

        # Lag index matrix (i − j, 0 above the diagonal) and the causal mask.
        idx = torch.arange(T)
        lagm = (idx[:, None] - idx[None, :]).clamp(min=0)
        causal = idx[None, :] <= idx[:, None]  # [T, T]
        Em = E[lagm].permute(2, 0, 1)  # [H, T, T]
        logV = torch.log(Vlag)[lagm].permute(2, 0, 1)
        invnuV = (1.0 / (nu[None, :] * Vlag))[lagm].permute(2, 0, 1)

        # Squared residual (Eq. 10) via one matmul for the cross term, and the
        # logits; batch-free [H, T, T] factors are formed once (fewer
        # full-size [B, H, T, T] operations: this is the training cost).
        qn = (qr * qr + qi * qi).sum(-1)  # [B, H, T]
        kn = (kr * kr + ki * ki).sum(-1)
        cross = torch.matmul(torch.cat([qtr, qti], -1), torch.cat([ktr, kti], -1).transpose(-1, -2))  # [B, H, T, T]
        R2 = torch.addcmul(qn[..., :, None] - cross * (2 * Em), Em * Em, kn[..., None, :])
        R2 = R2.clamp(min=0)
        u = torch.log1p(invnuV * R2)
        bias = (-tau_s[:, None, None] * logV).masked_fill(~causal, float("-inf"))  # τ_s·B, causal mask
        logit = torch.addcmul(bias, -(tau_s * kappa)[:, None, None], u)
        A_hat = torch.softmax(logit, -1)
        A = A_hat * Em
        mr, mi = torch.matmul(A, torch.cat([vtr, vti], -1)).split(d, -1)
        # Counter-rotation Φ̃⁺ = e^{+iωt}.
        er, ei = mr * cos - mi * sin, mi * cos + mr * sin

        P_tot = None
        if self.gate or self.record:
            energy = (-logV - u).masked_fill(~causal, float("-inf"))
            P_tot = torch.logsumexp(energy, -1).detach()  # [B, H, T]
        g = None
        if self.gate:
            nug = d * (sp(self.nu_param) + 2 + eps)
            ps = torch.exp(self.P_scale_log.view(H))
            pp = self.P_prior_log.view(H)
            g = torch.sigmoid(ps[:, None] * (P_tot + torch.log(nug - 2 + eps)[:, None] - torch.log(nug + eps)[:, None])
                              - pp[:, None])[..., None]  # [B, H, T, 1]
            er, ei = g * er + (1 - g) * vr, g * ei + (1 - g) * vi
        est_r, est_i = er, ei
        # Prediction at the learned horizon: e^{+iωΔt₊} (no extra decay).
        if self.a["learn_t_shift"]:
            th = om * tshift.double()[:, None]  # [H, d], float64 angles; differentiable in Δt₊
            c2 = torch.cos(th).to(x.dtype)[None, :, None, :]
            s2r = torch.sin(th).to(x.dtype)[None, :, None, :]
            er, ei = er * c2 - ei * s2r, ei * c2 + er * s2r
        # Output projection C → R on [Re (h·d+k) ‖ Im (h·d+k)].
        z = torch.cat([er.transpose(1, 2).reshape(B, T, H * d), ei.transpose(1, 2).reshape(B, T, H * d)], -1)
        out = self.W_o(z)
        if self.record:
            hl = lambda t: t.permute(0, 2, 3, 1)  # noqa: E731  [B, H, i, j] → [B, i, j, H]
            self.diag = {
                "attn_mat": hl(A_hat), "decayed_attn_mat": hl(A),
                "est_latent": torch.stack([est_r, est_i], -1).permute(0, 2, 1, 3, 4),
                "P_tot": P_tot.transpose(1, 2), "V_lag": Vlag[None], "R2": hl(R2),
                "gate": None if g is None else g.permute(0, 2, 1, 3)[..., None],
                "attn_out": out,
            }
        return out


class RFATransformerBlock(nn.Module):
    """Pre-norm block: x + attn(norm1(x)), then x + ffn(norm2(x))."""

    def __init__(self, a, hidden):
        super().__init__()
        D = a["d_e"]
        self.attn = MultiheadIsotropicRFA(a)
        self.norm1, self.norm2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.ffn = nn.Sequential(nn.Linear(D, hidden), nn.ReLU(), nn.Linear(hidden, D))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.ffn(self.norm2(x))


class RFATransformerNetwork(nn.Module):
    def __init__(self, a, hidden):
        super().__init__()
        D = a["d_e"]
        self.input_proj = nn.Linear(D, D)
        self.blocks = nn.ModuleList([RFATransformerBlock(a, hidden) for _ in range(a["num_blocks"])])
        self.final_norm = nn.LayerNorm(D)
        self.output_proj = nn.Linear(D, D)

    def forward(self, x, hidden=None):
        x = self.input_proj(x)
        for blk in self.blocks:
            x = blk(x)
            if hidden is not None:
                hidden.append(x)
        return self.output_proj(self.final_norm(x))


class LanguageModel(nn.Module):
    """token_embedding → backbone → lm_head (weight tied to the embedding, own bias)."""

    def __init__(self, a):
        super().__init__()
        check_args(a)
        self.args = a
        hidden = a.get("hidden_dim") or 4 * a["d_v_total"]
        self.token_embedding = nn.Embedding(a["vocab_size"], a["d_e"])
        self.backbone = RFATransformerNetwork(a, hidden)
        self.lm_head = nn.Linear(a["d_e"], a["vocab_size"])
        self.lm_head.weight = self.token_embedding.weight

    def init_weights(self, seed):
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            self.token_embedding.weight.normal_(0.0, 0.02, generator=gen)
            self.lm_head.bias.zero_()
            for m in self.modules():
                if isinstance(m, nn.Linear) and m is not self.lm_head:
                    bound = 1 / math.sqrt(m.in_features)
                    m.weight.uniform_(-bound, bound, generator=gen)
                    m.bias.zero_()
            for blk in self.backbone.blocks:
                blk.attn.init_weights(gen)

    def forward(self, ids, hidden=None):
        return self.lm_head(self.backbone(self.token_embedding(ids), hidden))


# ---------------------------------------------------------------- files

def save_state(path, tensors):
    """Write {name: tensor} as safetensors keeping float32 and int64 (t_measure) dtypes."""
    common.safetensors_io.save(path, tensors, keep_dtypes=True)


def args_from_config(cfg):
    a = {k: cfg[k] for k, _ in BASE_ARGS if k in cfg}
    a["hidden_dim"] = cfg.get("hidden_dim")
    for k in ("vocab_size", "d_e", "seq_len", "n_heads", "num_blocks", "d_k_total", "d_v_total"):
        if k not in a:
            raise ValueError(f"config.json: field {k} is missing")
    for k, v in BASE_ARGS:
        a.setdefault(k, v)
    return a


def load_model(ckpt):
    """Build the model from ckpt/config.json and load ckpt/model.safetensors."""
    with open(os.path.join(ckpt, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("architecture") != "rfa_lm":
        raise ValueError(f"{ckpt}/config.json: architecture {cfg.get('architecture')!r}, want 'rfa_lm'")
    model = LanguageModel(args_from_config(cfg))
    sd = common.safetensors_io.load(os.path.join(ckpt, "model.safetensors"))
    missing, unexpected = model.load_state_dict(sd, strict=False)
    unexpected = [k for k in unexpected if not k.endswith((".abs_idx", ".causal_mask"))]
    if missing or unexpected:
        raise ValueError(f"{ckpt}/model.safetensors: missing {missing}, unexpected {unexpected}")
    model.eval()
    return model, cfg


def rel(got, ref):
    got, ref = got.double(), ref.double()
    return ((got - ref).abs().max() / ref.abs().max().clamp(min=1e-30)).item()


def check_golden(gdir):
    """Compare this implementation with a golden case of the authors' code."""
    model, cfg = load_model(gdir)
    g = common.safetensors_io.load(os.path.join(gdir, "golden.safetensors"))
    ids = g["input_ids"].long()
    for blk in model.backbone.blocks:
        blk.attn.record = True
    hidden = []
    with torch.no_grad():
        logits = model(ids, hidden)
    rows = [("logits", logits, g["logits"])]
    for l, blk in enumerate(model.backbone.blocks):
        dg = blk.attn.diag
        rows.append((f"hidden.{l}", hidden[l], g[f"hidden.{l}"]))
        for k in ("attn_mat", "decayed_attn_mat", "est_latent", "P_tot", "gate"):
            if f"l{l}.{k}" in g:
                rows.append((f"l{l}.{k}", dg[k], g[f"l{l}.{k}"]))
        rows.append((f"l{l}.x.V_lag", dg["V_lag"], g[f"l{l}.x.V_lag"]))
        rows.append((f"l{l}.x.attn_out", dg["attn_out"], g[f"l{l}.x.attn_out"]))
        causal = torch.tril(torch.ones(ids.shape[1], ids.shape[1], dtype=torch.bool))[None, :, :, None]
        rows.append((f"l{l}.x.R_qk_abs_sq (j≤i)", dg["R2"] * causal, g[f"l{l}.x.R_qk_abs_sq"] * causal))
        hp = blk.attn.head_params()
        for k in ("mu_v", "sigma_sq_v", "eta_sq_v", "gamma_sq_v", "tau", "nu_over_d", "sigma_tilde_sq_v"):
            rows.append((f"l{l}.{k}", hp[k], g[f"l{l}.{k}"]))
    if "f64.logits" in g:
        # The same weights in float64 against the authors' float64 run.
        model64 = model.double()
        h64 = []
        with torch.no_grad():
            l64 = model64(ids, h64)
        rows.append(("f64.logits", l64, g["f64.logits"]))
        for l in range(len(h64)):
            if f"f64.hidden.{l}" in g:
                rows.append((f"f64.hidden.{l}", h64[l], g[f"f64.hidden.{l}"]))
            if f"f64.l{l}.attn_mat" in g:
                rows.append((f"f64.l{l}.attn_mat", model64.backbone.blocks[l].attn.diag["attn_mat"], g[f"f64.l{l}.attn_mat"]))
    worst = 0.0
    print(f"golden {gdir} ({cfg.get('ablation_name')}): max|got−ref|/max|ref|")
    for name, got, ref in rows:
        if tuple(got.shape) != tuple(ref.shape):
            raise SystemExit(f"{name}: shape {tuple(got.shape)} vs golden {tuple(ref.shape)}")
        r = rel(got, ref)
        worst = max(worst, r)
        print(f"  {name:32s} {r:.2e}")
    ok = worst <= 1e-4
    print(f"worst {worst:.2e}: {'PASS' if ok else 'FAIL'} (≤ 1e-4)")
    return ok


def eval_mode(ckpt, ids_path, out):
    torch.set_num_threads(1)
    model, _ = load_model(ckpt)
    with open(ids_path) as f:
        ids = torch.tensor(json.load(f), dtype=torch.int64)
    with torch.no_grad():
        logits = model(ids)
    common.save_safetensors(out, {"logits": logits.float()})


# ---------------------------------------------------------------- training

def make_args(variant, vocab, d_e, heads, blocks, dk_total, seq_len, batch):
    a = dict(BASE_ARGS)
    a.update(vocab_size=vocab, d_e=d_e, seq_len=seq_len, n_heads=heads, num_blocks=blocks,
             d_k_total=dk_total, d_v_total=dk_total, batch_size=batch)
    a.update(ABLATIONS[variant])
    a["hidden_dim"] = 4 * dk_total
    return a


def config_json(a, model, args, variant):
    cfg = {k: a[k] for k, _ in BASE_ARGS}
    H, d = a["n_heads"], a["d_k_total"] // a["n_heads"]
    cfg.update({
        "architecture": "rfa_lm",
        "model_constructor": "LanguageModel(RFATransformerNetwork(args, num_blocks=args.num_blocks, n_heads=args.n_heads, "
                             "input_dim=args.d_e, query_key_dim_total=args.d_k_total, value_dim_total=args.d_v_total, "
                             "hidden_dim=4*args.d_v_total, Norm=nn.LayerNorm), vocab_size=args.vocab_size, embed_dim=args.d_e)",
        "hidden_dim": a["hidden_dim"],
        "norm": "torch.nn.LayerNorm(d_e), eps=1e-05, elementwise_affine=True",
        "d_k_head": d, "d_v_head": d, "n_omega_per_head": d // 2,
        "tied_embeddings": True,
        "internal_buffer_max_len": MAX_LEN,
        "excluded_state_dict_entries": [
            e for l in range(a["num_blocks"]) for e in (
                {"name": f"backbone.blocks.{l}.attn.abs_idx", "shape": [MAX_LEN, MAX_LEN], "dtype": "torch.int64"},
                {"name": f"backbone.blocks.{l}.attn.causal_mask", "shape": [1, MAX_LEN, MAX_LEN, 1], "dtype": "torch.float32"})],
        "construction_seed": args.seed,
        "trained_by": "zoo/train/rfa.py (this project's PyTorch re-implementation with the authors' state_dict names)",
        "zoo_variant": variant,
        "torch_version": torch.__version__,
    })
    return cfg


def history_record(model, step, hist):
    hist["step"].append(step)
    with torch.no_grad():
        for l, blk in enumerate(model.backbone.blocks):
            for k, v in blk.attn.head_params().items():
                hist.setdefault(f"l{l}.{k}", []).append([round(float(x), 8) for x in v.reshape(-1)])


def save_checkpoint(out, model, cfg, step):
    os.makedirs(out, exist_ok=True)
    common.write_json(os.path.join(out, "config.json"), cfg)
    save_state(os.path.join(out, "model.safetensors"), model.state_dict())
    # The step of this checkpoint, where report/papers.RFASeriesDirs reads it.
    common.write_json(os.path.join(out, "trainer_state.json"), {"global_step": step})


def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)


def train_main(args):
    name = os.path.basename(os.path.normpath(args.out))
    torch.manual_seed(args.seed)
    a = make_args(args.variant, 2048, args.d_e, args.heads, args.blocks, args.dk_total, args.ctx, args.batch)
    model = LanguageModel(a)
    model.init_weights(args.seed)
    nparams = sum(p.numel() for p in model.parameters())
    cfg = config_json(a, model, args, args.variant)
    hist = {"step": [], "x_label": "training step", "layer": a["num_blocks"] - 1}
    history_record(model, 0, hist)
    series_at = set()
    if args.series > 0:
        series_at = {round(args.steps * k / (args.series + 1)) for k in range(1, args.series + 1)}

    def on_log(step, rec):
        history_record(model, step, hist)
        hp = model.backbone.blocks[-1].attn.head_params()
        rec["last_layer"] = {k: [round(float(x), 5) for x in hp[k]] for k in ("sigma_sq_v", "eta_sq_v", "gamma_sq_v", "tau", "nu_over_d", "t_shift")}

    def on_step(step):
        if step in series_at:
            save_checkpoint(os.path.join(args.out, "series", f"checkpoint-{step}"), model, cfg, step)

    # No weight decay on vectors and on the filter's scalar parameters.
    no_decay = lambda n, p: p.dim() < 2 or (".attn." in n and ".W_" not in n)  # noqa: E731
    if os.path.isdir(os.path.join(args.out, "series")):
        import shutil
        shutil.rmtree(os.path.join(args.out, "series"))
    log = common.train(model, args, on_log=on_log, on_step=on_step, no_decay=no_decay)
    step = log[-1]["step"]
    save_checkpoint(args.out, model, cfg, step)
    common.write_json(os.path.join(args.out, "history.json"), hist)
    common.copy_tokenizer(args.out)
    arch = "rfa"
    common.write_json(os.path.join(args.out, "zoo.json"), {
        "name": name, "arch": arch, "script": "train/rfa.py", "lm": True, "demo": bool(args.demo)})
    H, d = a["n_heads"], a["d_k_total"] // a["n_heads"]
    summary = (f"{'Isotropic RFA (the paper’s M1)' if args.variant == 'm1' else 'Spectrally coupled SC-RFA (the paper’s M2, b = 0.05)'} "
               f"language model trained by zoo/train/rfa.py: d_e {a['d_e']}, {a['num_blocks']} blocks, {H} heads × {d} complex "
               f"dims (d_k_total = d_v_total = {a['d_k_total']}), FFN {a['hidden_dim']}, LayerNorm, tied embedding with "
               f"lm_head bias; state_dict in the RFA authors' naming (config.json = their args namespace, "
               f"ablation_name {a['ablation_name']}). μ and ω are fixed buffers; σ², η², γ², ν, τ_s and Δt₊ are learned.")
    extra = ("Parameter history: `history.json` (per-head values of every layer at every evaluation, "
             "analysis.ReadRFAHistory format). ")
    if series_at:
        extra += ("Intermediate checkpoints for RFA Figs. 8–10: `series/checkpoint-<step>/` "
                  "(config.json, model.safetensors, trainer_state.json); the final model is this folder "
                  f"(trainer_state.json global_step {step}).")
    common.model_card(args.out, name, summary, args, log, nparams, extra)
    print(f"{name}: {nparams} parameters, folder {dir_bytes(args.out) / 1e6:.2f} MB")


def main():
    p = common.base_args("RFA (M1 / SC-RFA M2) language model for the zoo", steps=450, lr=3e-3, eval_every=25, max_minutes=8.0)
    p.add_argument("--variant", choices=["m1", "m2"], default="m2")
    p.add_argument("--d-e", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--blocks", type=int, default=4)
    p.add_argument("--dk-total", type=int, default=64, help="complex dims over all heads (d_k_total = d_v_total)")
    p.add_argument("--series", type=int, default=0, help="intermediate checkpoints saved under series/")
    p.add_argument("--demo", action="store_true", help="zoo.json demo: true")
    p.add_argument("--check-golden", metavar="DIR")
    args = p.parse_args()
    if args.check_golden:
        torch.set_num_threads(args.threads)
        sys.exit(0 if check_golden(args.check_golden) else 1)
    if args.eval:
        if not args.ids or not args.logits:
            p.error("--eval needs --ids and --logits")
        eval_mode(args.eval, args.ids, args.logits)
        return
    if not args.out:
        p.error("--out is required for training")
    train_main(args)


if __name__ == "__main__":
    main()
