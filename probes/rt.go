package probes

// Diagnostics of the RT-Transformer (paper 004, "RT-Transformer: The
// Transformer Block as a Spherical State Estimator"; the pass is
// model/rt.go, head parameters model.RTHeadParams). The paper defines the
// per-pair and per-token quantities below; n_eff, BOS mass and a Kalman
// gain are not in it, and the project's definitions (notes 004 §B.2) are
// marked "project":
//
//	κ_ij = (Σ₀/(m_i²+ε) + Σ(Δt)/(m_j²E²+ε) + τ_θ²)⁻¹   directional precision (Eq. 10)   model.RTHeadParams.Kappa
//	d²_ij = 2κ_ij(1 − c_ij)                          whitened angular distance (Eq. 11)   RTWhitenedDistance
//	w_ij = (1 + d²_ij/ν)^{−(ν+d)/d}                  robust weight (Eq. 14)               RTRobustWeight
//	‖ū_i‖ ∈ [0, 1]                                   concentration, mean resultant length (App. C.1)
//	ρ_i = v̂_iᵀū_i;  ‖Πū_i‖ = √(‖ū_i‖² − ρ_i²‖v̂_i‖²)  radial part and tangent step (Eq. 15)
//	α_i = r‖ū_i‖/m_i                                 step fraction, RT's gain (App. C.2, Eq. 16)
//	log Λ_i = log Σ_j κ̃_ij                           total precision (project, §B.2 (d); the hook rt.hook_log_precision)
//	ln 2/μ, 2μβ_s, 2β_s/(d τ_θ²)                      half-life, far-lag ALiBi slope (§A.9), cosine-limit scale (§A.18.3)
//	n_eff, BOS mass                                  on the streamed A rows: Collector (project)
//
// RTRecorder collects the per-(batch, layer, head, query) quantities from
// the model's hook points in the Collector's [B, L, H, T] layout.

import (
	"fmt"
	"math"

	"gorgonia.org/tensor"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
)

// RTWhitenedDistance returns d² = 2κ(1 − c) (Eq. 11) for precision kappa
// and transported cosine c = Re(û_iᴴû_ij).
func RTWhitenedDistance(kappa, cos float64) float64 { return 2 * kappa * (1 - cos) }

// RTRobustWeight returns w = (1 + d²/ν)^{−(ν+d)/d} (Eq. 14 with Algorithm
// 1's exponent).
func RTRobustWeight(p *model.RTHeadParams, d2 float64) float64 {
	return math.Exp(-p.RobustExp * math.Log1p(d2/p.Nu))
}

// RTHalfLife returns ln 2/μ, the lag (tokens) over which the transported
// magnitude m_j e^{−μΔt} halves (Eq. 9).
func RTHalfLife(p *model.RTHeadParams) float64 { return math.Ln2 / p.Mu }

// RTALiBiSlope returns 2μβ_s: at large lags log κ_ij ≈ log m_j² − 2μΔt −
// log Σ(Δt), so the logit β_s L falls by about 2μβ_s per token (notes 004
// §A.9), an ALiBi-like recency bias.
func RTALiBiSlope(p *model.RTHeadParams) float64 { return 2 * p.Mu * p.Beta }

// RTCosineScale returns 2β_s/(d·τ_θ²), the logit scale of the cosine
// attention RT reduces to with flat precision (σ̃ = η = γ = 0) and ν → ∞
// (notes 004 §A.18.3).
func RTCosineScale(p *model.RTHeadParams) float64 { return 2 * p.Beta / (p.RobustD * p.TauTheta2) }

// RTTangentNorm returns ‖Πū‖ = √(‖ū‖² − ρ²‖v̂‖²), the norm of the tangent
// update of Eq. 15 from the concentration ‖ū‖, the self-agreement ρ and
// ‖v̂‖ (1 with norm_scope "head").
func RTTangentNorm(concentration, rho, vNorm float64) float64 {
	return math.Sqrt(max(concentration*concentration-rho*rho*vNorm*vNorm, 0))
}

// RTStepSize returns α = r‖ū‖/m, the slerp fraction of App. C.2 (the
// angular step of Eq. 16): magnitude is inertia, concentration the
// adaptive step.
func RTStepSize(r, concentration, magnitude float64) float64 { return r * concentration / magnitude }

// RTAngle returns the angle (radians) between two vectors, e.g. Z_i and
// Z⁺_i (hook_resid_pre, hook_resid_mid): the measured angular update of
// the residual stream (notes 004 §B.2).
func RTAngle(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return math.Acos(max(-1, min(1, ab/math.Sqrt(aa*bb))))
}

// RTRecorder keeps RT's per-(batch, layer, head, query) quantities, layout
// [B, L, H, T] (Index), NaN where not reached.
type RTRecorder struct {
	B, L, H, T, DHead int
	// Magnitude m_i, LogPrecision log Σ_j κ̃_ij, Concentration ‖ū_i‖,
	// SelfAgreement ρ_i, TangentNorm ‖Πū_i‖ (with ‖v̂_i‖ = 1, norm_scope
	// "head") and StepSize ‖ū_i‖/m_i (α with r = 1).
	Magnitude, LogPrecision, Concentration, SelfAgreement, TangentNorm, StepSize []float64
}

// NewRTRecorder returns a recorder for batch size b, nLayers layers,
// nHeads heads of dHead reals (model.Config.DHead = 2C) and sequences of
// at most seqLen tokens.
func NewRTRecorder(b, nLayers, nHeads, seqLen, dHead int) (*RTRecorder, error) {
	if b <= 0 || nLayers <= 0 || nHeads <= 0 || seqLen <= 0 || dHead <= 0 {
		return nil, fmt.Errorf("probes: RT recorder shape [B=%d, L=%d, H=%d, T=%d, d_head=%d] must be positive", b, nLayers, nHeads, seqLen, dHead)
	}
	n := b * nLayers * nHeads * seqLen
	return &RTRecorder{B: b, L: nLayers, H: nHeads, T: seqLen, DHead: dHead,
		Magnitude: nanSlice[float64](n), LogPrecision: nanSlice[float64](n), Concentration: nanSlice[float64](n),
		SelfAgreement: nanSlice[float64](n), TangentNorm: nanSlice[float64](n), StepSize: nanSlice[float64](n)}, nil
}

// Index returns the flat index of cell (b, l, h, t).
func (r *RTRecorder) Index(b, l, h, t int) int { return ((b*r.L+l)*r.H+h)*r.T + t }

// Register adds the recorder's functions to hs (they only read). The
// derived TangentNorm and StepSize are filled when the layer's consensus,
// self-agreement and magnitude have all been seen (in pass order).
func (r *RTRecorder) Register(hs *hooks.Set) {
	perHead := func(dst []float64) hooks.Func {
		return func(name string, l int, x *tensor.Dense) error {
			sh, err := r.check(name, l, x, 3)
			if err != nil {
				return err
			}
			d := x.Data().([]float32)
			for bt := 0; bt < sh[0]*sh[1]; bt++ {
				for h := 0; h < r.H; h++ {
					dst[r.Index(bt/sh[1], l, h, bt%sh[1])] = float64(d[bt*r.H+h])
				}
			}
			return nil
		}
	}
	hs.Add(hooks.RTMagnitude, perHead(r.Magnitude))
	hs.Add(hooks.RTLogPrecision, perHead(r.LogPrecision))
	hs.Add(hooks.RTConsensus, func(name string, l int, x *tensor.Dense) error {
		sh, err := r.check(name, l, x, 4)
		if err != nil {
			return err
		}
		d := x.Data().([]float32)
		for bt := 0; bt < sh[0]*sh[1]; bt++ {
			for h := 0; h < r.H; h++ {
				var s float64
				for _, v := range d[(bt*r.H+h)*r.DHead : (bt*r.H+h+1)*r.DHead] {
					s += float64(v) * float64(v)
				}
				i := r.Index(bt/sh[1], l, h, bt%sh[1])
				r.Concentration[i] = math.Sqrt(s)
				r.StepSize[i] = RTStepSize(1, r.Concentration[i], r.Magnitude[i])
			}
		}
		return nil
	})
	self := perHead(r.SelfAgreement)
	hs.Add(hooks.RTSelfAgreement, func(name string, l int, x *tensor.Dense) error {
		if err := self(name, l, x); err != nil {
			return err
		}
		for b := 0; b < r.B; b++ {
			for h := 0; h < r.H; h++ {
				for t := 0; t < r.T; t++ {
					i := r.Index(b, l, h, t)
					r.TangentNorm[i] = RTTangentNorm(r.Concentration[i], r.SelfAgreement[i], 1)
				}
			}
		}
		return nil
	})
}

// check refuses a value of layer l outside the recorder's layers or not of
// rank rank within its [B, T, H(, d_head)], and returns its shape.
func (r *RTRecorder) check(name string, l int, x *tensor.Dense, rank int) ([]int, error) {
	if l < 0 || l >= r.L {
		return nil, fmt.Errorf("probes: hook %q: layer outside the recorder's %d layers", name, r.L)
	}
	sh := x.Shape()
	if len(sh) != rank || sh[0] > r.B || sh[1] > r.T || sh[2] != r.H || (rank == 4 && sh[3] != r.DHead) {
		return nil, fmt.Errorf("probes: %s has shape %v, recorder is [B=%d, T=%d, H=%d, d_head=%d]", name, sh, r.B, r.T, r.H, r.DHead)
	}
	return sh, nil
}
