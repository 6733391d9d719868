package analytic

import (
	"math"
	"math/cmplx"
)

// RoPETemperatures returns the RoPE phase temperatures of Selective RoPE App.
// A.3.1 in the paper's form Θ_n = ε^{n/(d/2)}, n = 0..d/2−1, with ε = 1/base
// (descending from 1 to ε^{1−2/d}).
func RoPETemperatures(d int, eps float64) []float64 {
	half := d / 2
	out := make([]float64, half)
	for n := range out {
		out[n] = math.Pow(eps, float64(n)/float64(half))
	}
	return out
}

// TanTemperatures returns Selective RoPE's temperatures (App. A.3.1):
// φ_n = linspace(0, (1−ε)π, d/2), Θ_n = tan(φ_n/2), ascending from 0 to
// cot(επ/2). They are the optimal random-Fourier-feature scales
// σ* = tan(θ/2) of Theorem 1 on an even grid of query–key angles θ.
func TanTemperatures(d int, eps float64) []float64 {
	half := d / 2
	phi := Linspace(0, (1-eps)*math.Pi, half)
	out := make([]float64, half)
	for n, p := range phi {
		out[n] = math.Tan(p / 2)
	}
	return out
}

// ReleaseTanTemperatures returns the release code's "rfa" schedule (notes
// 002 §A.3): ψ = linspace(0, θπ, d/2), Θ_n = tempMax·tan(ψ_n/2)/max_m tan(ψ_m/2).
func ReleaseTanTemperatures(d int, theta, tempMax float64) []float64 {
	half := d / 2
	psi := Linspace(0, theta*math.Pi, half)
	out := make([]float64, half)
	mx := math.Tan(psi[half-1] / 2)
	for n, p := range psi {
		out[n] = tempMax * math.Tan(p/2) / mx
	}
	return out
}

// RoPELog10Density is the density of v = log10 Θ when Θ = ε^φ with φ
// uniform on [0, 1] (log-uniform Θ on [ε, 1]): 1/log10(1/ε) on
// [log10 ε, 0], 0 elsewhere (notes 002 §A.3, [D]).
func RoPELog10Density(v, eps float64) float64 {
	lo := math.Log10(eps)
	if v < lo || v > 0 {
		return 0
	}
	return 1 / -lo
}

// TanLog10Density is the density of v = log10 Θ when Θ = tan(φ/2) with φ
// uniform on [0, (1−ε)π]: p(Θ) = 2/((1−ε)π(1+Θ²)) on [0, cot(επ/2)] (a
// truncated half-Cauchy), so p(v) = ln 10 · Θ · p(Θ) with Θ = 10^v.
func TanLog10Density(v, eps float64) float64 {
	th := math.Pow(10, v)
	if th > 1/math.Tan(eps*math.Pi/2) {
		return 0
	}
	return math.Ln10 * th * 2 / ((1 - eps) * math.Pi * (1 + th*th))
}

// Window kinds for Spectrum.
const (
	WindowRect = "rect" // w_τ = 1
	WindowHann = "hann" // w_τ = 0.5(1 − cos(2πτ/(N−1)))
	WindowExp  = "exp"  // w_τ = exp(−α(N−1−τ)): the causal forget-gate (Poisson) window
)

// Window returns the N-point window of the given kind; alpha is used by
// WindowExp only (notes 002 §B.7).
func Window(kind string, n int, alpha float64) []float64 {
	w := make([]float64, n)
	for t := range w {
		switch kind {
		case WindowHann:
			w[t] = 0.5 * (1 - math.Cos(2*math.Pi*float64(t)/float64(n-1)))
		case WindowExp:
			w[t] = math.Exp(-alpha * float64(n-1-t))
		default:
			w[t] = 1
		}
	}
	return w
}

// Tone is one sinusoid a·sin(2π f τ/N + φ) of a test signal; f is in cycles
// per N samples (DFT bin units).
type Tone struct{ Amp, Freq, Phase float64 }

// Signal samples the sum of tones at τ = 0..n−1.
func Signal(n int, tones ...Tone) []float64 {
	v := make([]float64, n)
	for t := range v {
		for _, tn := range tones {
			v[t] += tn.Amp * math.Sin(2*math.Pi*tn.Freq*float64(t)/float64(n)+tn.Phase)
		}
	}
	return v
}

// DFT returns V_k = Σ_τ x_τ e^{−2πikτ/M} for k = 0..M−1, with x zero-padded
// to M ≥ len(x) (a direct O(N·M) sum; M = len(x) is the plain DFT of eq. 24).
func DFT(x []float64, m int) []complex128 {
	out := make([]complex128, m)
	for k := range out {
		var s complex128
		for t, v := range x {
			s += complex(v, 0) * cmplx.Exp(complex(0, -2*math.Pi*float64(k)*float64(t)/float64(m)))
		}
		out[k] = s
	}
	return out
}

// Spectrum is the windowed magnitude spectrum of a finite sample.
type Spectrum struct {
	Freq  []float64 // bin frequencies in cycles per N (k·N/M), 0..N/2
	DB    []float64 // 20·log10(2|V_k|/Σw): a unit-amplitude on-bin tone reads 0 dB
	Peak  float64   // frequency of the largest bin (cycles per N)
	Gain  float64   // coherent gain Σ_τ w_τ
	Floor float64   // dB value used for |V_k| = 0
}

// WindowedSpectrum multiplies x by w and returns its zero-padded (M points)
// spectrum over 0..N/2 cycles per N, normalized by the coherent gain so that
// windows compare on one dB scale. Zero magnitudes read floorDB.
func WindowedSpectrum(x, w []float64, m int, floorDB float64) Spectrum {
	n := len(x)
	xw := make([]float64, n)
	gain := 0.0
	for i := range x {
		xw[i] = x[i] * w[i]
		gain += w[i]
	}
	v := DFT(xw, m)
	sp := Spectrum{Gain: gain, Floor: floorDB}
	best := -1.0
	for k := 0; k <= m/2; k++ {
		f := float64(k) * float64(n) / float64(m)
		mag := 2 * cmplx.Abs(v[k]) / gain
		db := floorDB
		if mag > 0 {
			db = math.Max(20*math.Log10(mag), floorDB)
		}
		sp.Freq = append(sp.Freq, f)
		sp.DB = append(sp.DB, db)
		if mag > best {
			best, sp.Peak = mag, f
		}
	}
	return sp
}

// Leakage is the fraction of a windowed sample's spectral energy (N-point DFT
// bins 0..N/2) that lies more than m bins from bin k0 (notes 002 §B.7):
// 1 − Σ_{|k−k0|≤m}|V_k|² / Σ_k |V_k|². 0 for an on-bin tone under the
// rectangular window.
func Leakage(x, w []float64, k0, m int) float64 {
	n := len(x)
	xw := make([]float64, n)
	for i := range x {
		xw[i] = x[i] * w[i]
	}
	v := DFT(xw, n)
	var in, all float64
	for k := 0; k <= n/2; k++ {
		e := real(v[k])*real(v[k]) + imag(v[k])*imag(v[k])
		all += e
		if k >= k0-m && k <= k0+m {
			in += e
		}
	}
	if all == 0 {
		return 0
	}
	return 1 - in/all
}

// LevelAt returns the spectrum's dB value at the bin nearest frequency f.
func (s Spectrum) LevelAt(f float64) float64 {
	return s.DB[NearestIndex(s.Freq, f)]
}
