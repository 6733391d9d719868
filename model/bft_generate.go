package model

import (
	"math"
	"math/rand/v2"
	"strings"
)

// The parameters of random checkpoints of the filter mechanisms that have
// no released code (BFT, RT, AFA; their families' generated), for tests,
// demos and the PyTorch references in reference/{bft,rt,afa}.

// bftGenerated sets the BFT parameters of a generated model: q_logits
// N(−3, 0.5²) (Q ≈ 0.05·Q_max), rho_logit near logit(0.99), tau_logits
// N(0, 1), tau_range in [0.5, 1.5] and tau_base uniform in [0, 1], so that
// every τ is positive.
func bftGenerated(rng *rand.Rand) func(string, []float32) {
	return func(name string, x []float32) {
		set := func(f func() float64) {
			for i := range x {
				x[i] = float32(f())
			}
		}
		switch {
		case strings.HasSuffix(name, ".bft.q_logits"):
			set(func() float64 { return -3 + 0.5*rng.NormFloat64() })
		case strings.HasSuffix(name, ".bft.rho_logit"):
			set(func() float64 { return math.Log(0.99/0.01) - 2*rng.Float64() })
		case name == "model.bft.tau_logits":
			set(rng.NormFloat64)
		case name == "model.bft.tau_range":
			set(func() float64 { return 0.5 + rng.Float64() })
		case name == "model.bft.tau_base":
			set(rng.Float64)
		}
	}
}

// invSoftplus returns x with softplus(x) = y (y > 0).
func invSoftplus(y float64) float64 { return math.Log(math.Expm1(y)) }

// rtGenerated sets the RT filter parameters of a generated model: ω a
// RoPE-like spectrum 10000^(−c/C) per head, scaled by a random factor in
// [0.5, 1.5]; μ log-spaced over the heads from 0.02 to 0.5; σ̃², η², γ²,
// τ_θ² around 0.2–1; ν in [2, 10]; β_s in [1, 3].
func rtGenerated(rng *rand.Rand, H, C int) func(string, []float32) {
	return func(name string, x []float32) {
		if !strings.Contains(name, ".attn.") || strings.HasSuffix(name, ".weight") || strings.HasSuffix(name, ".bias") {
			return
		}
		for h := 0; h < H; h++ {
			frac := float64(h) / float64(max(H-1, 1))
			switch {
			case strings.HasSuffix(name, ".omega"):
				f := 0.5 + rng.Float64()
				for c := 0; c < C; c++ {
					x[h*C+c] = float32(f * math.Pow(10000, -float64(c)/float64(C)))
				}
			case strings.HasSuffix(name, ".mu_raw"):
				x[h] = float32(invSoftplus(0.02 * math.Pow(25, frac)))
			case strings.HasSuffix(name, ".nu_raw"):
				x[h] = float32(invSoftplus(2 + 8*rng.Float64()))
			case strings.HasSuffix(name, ".beta_raw"):
				x[h] = float32(invSoftplus(1 + 2*rng.Float64()))
			default: // sigma, eta, gamma, tau_theta
				x[h] = float32(invSoftplus(0.2 + 0.8*rng.Float64()))
			}
		}
	}
}

// afaGenerated sets the AFA filter parameters of a generated model: decay
// a = α² log-spaced over the heads from 0.01 to 0.3, ω a RoPE-like
// spectrum per head, σ in [0.3, 1], η in [0.5, 1.2], τ_s in [0.5, 2],
// δ ~ N(0, 1).
func afaGenerated(rng *rand.Rand, H, d int) func(string, []float32) {
	return func(name string, x []float32) {
		if !strings.Contains(name, ".attn.") || strings.Contains(name, "_proj.") {
			return
		}
		for h := 0; h < H; h++ {
			frac := float64(h) / float64(max(H-1, 1))
			switch {
			case strings.HasSuffix(name, ".alpha"):
				x[h] = float32(math.Sqrt(0.01 * math.Pow(30, frac)))
			case strings.HasSuffix(name, ".omega"):
				f := 0.5 + rng.Float64()
				for m := 0; m < d/2; m++ {
					x[h*d/2+m] = float32(f * math.Pow(10000, -float64(m)/float64(d/2)))
				}
			case strings.HasSuffix(name, ".sigma"):
				x[h] = float32(0.3 + 0.7*rng.Float64())
			case strings.HasSuffix(name, ".eta"):
				x[h] = float32(0.5 + 0.7*rng.Float64())
			case strings.HasSuffix(name, ".tau_s"):
				x[h] = float32(0.5 + 1.5*rng.Float64())
			case strings.HasSuffix(name, ".delta"):
				for i := 0; i < d; i++ {
					x[h*d+i] = float32(rng.NormFloat64())
				}
			}
		}
	}
}
