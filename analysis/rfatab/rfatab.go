// Package rfatab holds the RFA checkpoint data that analysis computes from
// checkpoints and report/papers draws (RFA Figs. 3–4 and 8–10): the per-head
// prior curves of one layer (Priors) and the per-head parameters over
// training (ParamHistory). It imports nothing of the module, so that the
// figures need not depend on model.
package rfatab

import (
	"fmt"
	"math"
)

// The regimes of an RFA head (RFA App. B.4.1), as model.RFAHeadParams.Regime
// names them (analysis tests that they agree).
const (
	Integrative = "integrative" // α > 0
	Diffusive   = "diffusive"   // α < 0
	Boundary    = "boundary"    // α = 0
	Brownian    = "brownian"    // μ = 0
)

// Head is one head's learned values (after the authors' softplus
// transforms), its regime and its prior curves at Priors.Lags.
type Head struct {
	Head                             int
	Mu, TShift, Sigma2, Eta2, Gamma2 float64 // μ (the decay the pass uses), Δt₊, σ², η², γ²
	Tau, NuOverD                     float64 // τ_s, ν/d
	Regime                           string  // one of Integrative, Diffusive, Boundary, Brownian
	SteadyState, Alpha, Beta         float64 // σ̃² = σ²/2μ, α = η² − σ̃², β = γ² + σ̃² (NaN when Brownian)
	P0, PMax, B0, BMax               float64 // P and B at lag 0 and at the largest lag
	P, B                             []float64
}

// Priors is the prior precision P_Δt = 1/V(Δt) and bias B_Δt = −log V(Δt)
// (RFA Eq. 9, Alg. 1) of every head of one layer at the same lags, with the
// kernel constants the forward pass uses (model.RFAHeadParams).
type Priors struct {
	Layer                    int
	Lags                     []float64 // increasing; Heads[i].P[k] is at Lags[k]
	MaxLag                   float64   // the lag of PMax, BMax
	Heads                    []Head    // in head order
	MinExponent, MaxExponent float64   // the clamp of the decay exponent −μ(Δt + Δt₊)
	CovEps                   float64   // c added to V
	BrownianBelow            float64   // |μ| below it is μ = 0
}

// Quantity is one per-head parameter drawn over training (Figs. 8–10).
type Quantity int

// The quantities of Figs. 8–10, in figure order.
const (
	Gamma2      Quantity = iota // γ², query (anchor) measurement noise
	Eta2                        // η², key (historical) measurement noise
	SteadyState                 // σ̃² = σ²/(2μ), steady-state process variance (undefined for μ = 0)
	Sigma2                      // σ², process-noise intensity
	NuOverD                     // ν/d, Student-t robustness
	Tau                         // τ_s, softmax inverse temperature
	Alpha                       // α = η² − σ̃² (undefined for μ = 0)
	Beta                        // β = γ² + σ̃² (undefined for μ = 0)
)

// Symbol is the quantity's symbol as the paper writes it.
func (q Quantity) Symbol() string {
	return [...]string{"γ²", "η²", "σ²/2μ", "σ²", "ν/d", "τ", "α", "β"}[q]
}

// Title is the quantity's name as the paper's panel titles give it.
func (q Quantity) Title() string {
	return [...]string{
		"Query measurement noise variance γ²",
		"Key measurement noise variance η²",
		"Steady-state process variance σ²/2μ",
		"Process-noise intensity σ²",
		"Robustness ν/d",
		"Inverse temperature τ",
		"Phase parameter α = η² − σ²/2μ",
		"Stationary variance β = γ² + σ²/2μ",
	}[q]
}

// ParamHistory holds one layer's per-head filter parameters at a
// sequence of points in training (RFA Figs. 8–10). Every matrix is
// [point][head]; Mu may be nil when the source has no decays, and then
// σ̃², α and β are undefined.
type ParamHistory struct {
	Layer  int       // 0-based; −1 when the source does not say (the authors' history logs the last block)
	XLabel string    // what Steps count: "training step", "epoch", "checkpoint (order given)"
	Steps  []float64 // increasing
	Labels []string  // where each point comes from (a checkpoint directory, a history index)
	Source string    // the series as a whole (directories, a file)

	Mu, Sigma2, Eta2, Gamma2, Tau, NuOverD [][]float64
	// SteadyState (σ̃² = σ²/(2μ)), Alpha (α = η² − σ̃²) and Beta
	// (β = γ² + σ̃²) are derived from the rest as model.RFAHeadParams.Regime
	// derives them, NaN for a μ = 0 head; nil without Mu.
	SteadyState, Alpha, Beta [][]float64

	// BrownianBelow: heads with |μ| below it are Brownian (μ = 0), with no
	// σ̃², α or β (the authors' 1e-5).
	BrownianBelow float64
}

// Len returns the number of points.
func (h *ParamHistory) Len() int { return len(h.Steps) }

// Heads returns the number of heads.
func (h *ParamHistory) Heads() int {
	if len(h.Eta2) == 0 {
		return 0
	}
	return len(h.Eta2[0])
}

// Brownian reports whether head is a μ = 0 head at every point (so that
// σ̃², α and β are undefined throughout, and Figs. 8 and 10 omit it).
func (h *ParamHistory) Brownian(head int) bool {
	if h.Mu == nil {
		return false
	}
	for i := range h.Mu {
		if math.Abs(h.Mu[i][head]) >= h.BrownianBelow {
			return false
		}
	}
	return true
}

// Has reports whether the history can give quantity q.
func (h *ParamHistory) Has(q Quantity) bool {
	return h.matrix(q) != nil
}

func (h *ParamHistory) matrix(q Quantity) [][]float64 {
	switch q {
	case Gamma2:
		return h.Gamma2
	case Eta2:
		return h.Eta2
	case Sigma2:
		return h.Sigma2
	case NuOverD:
		return h.NuOverD
	case Tau:
		return h.Tau
	case SteadyState:
		return h.SteadyState
	case Alpha:
		return h.Alpha
	case Beta:
		return h.Beta
	}
	return nil
}

// Curve returns quantity q of one head at every point, NaN where it is
// undefined (σ̃², α, β of a μ = 0 head) or missing. The derived quantities
// are the SteadyState, Alpha and Beta matrices.
func (h *ParamHistory) Curve(q Quantity, head int) []float64 {
	out := make([]float64, h.Len())
	for i := range out {
		out[i] = math.NaN()
	}
	if !h.Has(q) {
		return out
	}
	m := h.matrix(q)
	for i := range out {
		out[i] = m[i][head]
	}
	return out
}

// Validate checks shapes: every matrix present has one row per step and
// the same number of heads, and the steps increase.
func (h *ParamHistory) Validate() error {
	n := h.Len()
	if n == 0 {
		return fmt.Errorf("RFA parameter history: empty parameter history")
	}
	if h.Eta2 == nil || h.Gamma2 == nil || h.Sigma2 == nil {
		return fmt.Errorf("RFA parameter history needs σ², η² and γ² (sigma_sq_v, eta_sq_v, gamma_sq_v)")
	}
	if len(h.Labels) != n {
		return fmt.Errorf("RFA parameter history: %d labels for %d points", len(h.Labels), n)
	}
	H := h.Heads()
	for _, m := range []struct {
		name string
		v    [][]float64
	}{{"mu", h.Mu}, {"sigma_sq_v", h.Sigma2}, {"eta_sq_v", h.Eta2}, {"gamma_sq_v", h.Gamma2}, {"tau", h.Tau}, {"nu_over_d", h.NuOverD},
		{"steady state σ²/2μ", h.SteadyState}, {"α", h.Alpha}, {"β", h.Beta}} {
		if m.v == nil {
			continue
		}
		if len(m.v) != n {
			return fmt.Errorf("RFA parameter history: %s has %d points, the steps %d", m.name, len(m.v), n)
		}
		for i, row := range m.v {
			if len(row) != H || H == 0 {
				return fmt.Errorf("RFA parameter history: %s point %d has %d heads, want %d", m.name, i, len(row), H)
			}
		}
	}
	for i := 1; i < n; i++ {
		if !(h.Steps[i] > h.Steps[i-1]) {
			return fmt.Errorf("RFA parameter history: steps must increase: %g then %g (%s, %s)", h.Steps[i-1], h.Steps[i], h.Labels[i-1], h.Labels[i])
		}
	}
	return nil
}
