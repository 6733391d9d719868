// Package analytic computes, from the papers' formulas and parameters alone
// (no checkpoint), the curves behind the analytic figures that `probe
// figures` draws:
//
//   - RFA (Racioppo, "Robust Filter Attention"): the isotropic covariance
//     kernel V(Δt), its precision gate P and bias B (Eq. 9, App. B.4), the 2-D
//     LTI SDE of Fig. 1 (App. A.1.2) and the eigenvalue banks of Fig. 5
//     (App. C.1);
//   - Selective RoPE: the phase-temperature schedules of Fig. 2 (App. A.3.1)
//     and the windowed spectra of Fig. 3 (§3.2, App. A.4);
//   - RT-Transformer: the RT-SDE sphere walks of Fig. 1 (§3.2, App. B.1);
//   - BFT (App. I): the observation precision, Kalman gain, the K_opt fit of
//     Fig. 3 and the Pearson test of Fig. 4.
//
// Everything here is plain float64 arithmetic with no plotting, so each
// function is unit-tested against values derived by hand from the formulas.
package analytic

import (
	"math"
)

// BrownianMuCutoff is the decay below which Kernel uses the Brownian
// (μ → 0, L'Hôpital) branch V(Δt) = σ²Δt + η² + γ². The value 1e-5 is the
// RFA author's repository threshold (notes 000 §B.6, §C Fig. 4).
const BrownianMuCutoff = 1e-5

// Kernel is one isotropic RFA head's covariance kernel (RFA Eq. 9, App. B.4):
//
//	V(Δt) = σ²(1 − e^{−2μΔt})/(2μ) + η² e^{−2μΔt} + γ²  =  α e^{−2μΔt} + β
//
// with α = η² − σ̃², β = γ² + σ̃², σ̃² = σ²/(2μ) (λ_C = 1, as in the paper's
// plots). Sigma, Eta and Gamma are standard deviations, squared in the
// formula, as in the figures' parameter lists.
type Kernel struct {
	Mu, Sigma, Eta, Gamma float64
}

// Brownian reports whether the kernel uses the μ → 0 branch.
func (k Kernel) Brownian() bool { return k.Mu < BrownianMuCutoff }

// SigmaTilde2 returns the steady-state process variance σ̃² = σ²/(2μ)
// (+Inf on the Brownian branch).
func (k Kernel) SigmaTilde2() float64 {
	if k.Brownian() {
		return math.Inf(1)
	}
	return k.Sigma * k.Sigma / (2 * k.Mu)
}

// Alpha returns α = η² − σ̃²: > 0 integrative, < 0 diffusive (App. B.4.1).
func (k Kernel) Alpha() float64 { return k.Eta*k.Eta - k.SigmaTilde2() }

// Beta returns β = γ² + σ̃² = V(∞).
func (k Kernel) Beta() float64 { return k.Gamma*k.Gamma + k.SigmaTilde2() }

// V returns the covariance kernel at lag dt ≥ 0. The transient uses expm1 so
// that small μΔt keeps its digits (notes 000 F.26).
func (k Kernel) V(dt float64) float64 {
	s2, e2, g2 := k.Sigma*k.Sigma, k.Eta*k.Eta, k.Gamma*k.Gamma
	if k.Brownian() {
		return s2*dt + e2 + g2
	}
	decay := math.Exp(-2 * k.Mu * dt)
	return s2*(-math.Expm1(-2*k.Mu*dt))/(2*k.Mu) + e2*decay + g2
}

// P returns the multiplicative precision gate P_Δt = 1/V(Δt).
func (k Kernel) P(dt float64) float64 { return 1 / k.V(dt) }

// B returns the additive bias ("log-precision") B_Δt = log P = −log V(Δt).
func (k Kernel) B(dt float64) float64 { return -math.Log(k.V(dt)) }

// Curves evaluates P and B on the given lags.
func (k Kernel) Curves(dts []float64) (p, b []float64) {
	p = make([]float64, len(dts))
	b = make([]float64, len(dts))
	for i, dt := range dts {
		p[i], b[i] = k.P(dt), k.B(dt)
	}
	return p, b
}

// Linspace returns n evenly spaced points from a to b inclusive (n ≥ 2), or
// {a} for n = 1.
func Linspace(a, b float64, n int) []float64 {
	if n <= 0 {
		return nil
	}
	if n == 1 {
		return []float64{a}
	}
	out := make([]float64, n)
	for i := range out {
		out[i] = a + (b-a)*float64(i)/float64(n-1)
	}
	out[n-1] = b
	return out
}

// RoPEBank returns the RoPE frequencies ω_k = base^{−k/nf}, k = 0..nf−1
// (descending), the bank every head of RFA model M1 uses (notes 000 §A.5).
func RoPEBank(nf int, base float64) []float64 {
	w := make([]float64, nf)
	for k := range w {
		w[k] = math.Pow(base, -float64(k)/float64(nf))
	}
	return w
}

// SpectralBank returns the spectrally coupled bank of RFA model M2 (App.
// C.1; notes 000 §A.5): the master bank ω_m = base^{−m/M}, M = heads·nf,
// sorted ascending and split into heads of nf, so head 0 gets the slowest
// frequencies. Row h is ascending.
func SpectralBank(heads, nf int, base float64) [][]float64 {
	m := heads * nf
	all := make([]float64, m)
	for i := range all {
		// ascending: index i ↦ master index m−1−i
		all[i] = math.Pow(base, -float64(m-1-i)/float64(m))
	}
	out := make([][]float64, heads)
	for h := range out {
		out[h] = all[h*nf : (h+1)*nf]
	}
	return out
}

// CoupledDecays returns μ_h = b·max_k ω_{h,k} per head (App. C.1), with the
// first ⌊heads·zeroFrac⌋ heads set to μ = 0 (the "lossless integrators" of
// App. D.2).
func CoupledDecays(bank [][]float64, b, zeroFrac float64) []float64 {
	mu := make([]float64, len(bank))
	zero := int(math.Floor(float64(len(bank)) * zeroFrac))
	for h, row := range bank {
		if h < zero {
			continue
		}
		mx := 0.0
		for _, w := range row {
			mx = math.Max(mx, w)
		}
		mu[h] = b * mx
	}
	return mu
}

// Eigenvalues returns the conjugate-pair eigenvalues λ = −μ ± iω of one head
// with decay mu and frequencies omega, as (real, imag) slices of length
// 2·len(omega): (−μ, +ω_k) then (−μ, −ω_k) for each k.
func Eigenvalues(mu float64, omega []float64) (re, im []float64) {
	for _, w := range omega {
		re = append(re, -mu, -mu)
		im = append(im, w, -w)
	}
	return re, im
}
