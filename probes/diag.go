// Package probes holds the per-row and per-pass diagnostics: each is a
// pure function with its equation in its doc comment, and a consumer of the
// streamed attention rows (hooks.AttnConsumer) or of hooked tensors that
// applies it during a pass, keeping only small per-(layer, head, query)
// results:
//
//   - BFT's filter diagnostics n_eff, S, λobs, K, BOS mass (diag.go,
//     lambda.go, collector.go, below) and the gain-as-gate reading
//     (kgate.go, gate.go);
//   - attention sinks, entropy and fading (sinks.go), massive activations
//     and their interventions (massive.go), retrieval heads (retrieval.go);
//   - Gated DeltaNet read as a filter (gdn.go: β, decay, innovation, the
//     exact effective-attention rows W);
//   - the research families' own readouts: RFA, AFA, RT (rfa.go, afa.go,
//     rt.go, bft.go).
//
// The Bayesian Filtering Transformer (BFT) filter diagnostics of Long et
// al., "Precision Tracked Transformer via Kalman Filtering, Kriging and
// Process Noise" (arXiv:2605.18832, "the paper") come from the attention
// rows a model streams through hooks.AttnConsumer.
//
// For one query row t of one head, with attention weights α_j (j = 0..t) and
// value vectors v_j ∈ R^d, the per-row quantities are
//
//	n_eff   = 1/Σ_j α_j²                      Kish effective sample size (Sec. 3.1, Eq. 5)
//	e_i     = Σ_j α_j v_ji                    kriging estimate (Eq. 2 with λ̄ ≡ 1)
//	S_i     = Σ_j α_j (v_ji − e_i)²           weighted dispersion (Eqs. 5–7)
//	λobs    = 1/Var(e)                        Eq. 6 (default), Eq. 5 or Eq. 13; see LambdaOptions
//	K       = λobs/(λ + λobs)                 Kalman gain at prior precision λ (Eq. 3, App. I: λ = 1)
//	α_0     = attention mass on the first key ("BOS mass", App. I)
//
// The per-row functions in diag.go and lambda.go are pure and allocation
// free; Collector (collector.go) applies them to every streamed row and keeps
// only per-(batch, layer, head, query) scalars. All statistics are
// accumulated in float64 from the float32 inputs.
package probes

import "math"

// NEff returns the Kish effective sample size of one attention row,
// n_eff = 1/Σ_j α_j² (paper Sec. 3.1, Eq. 5; App. F), accumulated in float64.
// For a row on the simplex 1 ≤ n_eff ≤ len(alpha): 1 for a one-hot row,
// len(alpha) for a uniform row. An all-zero row gives +Inf.
func NEff(alpha []float32) float64 {
	var s2 float64
	for _, a := range alpha {
		x := float64(a)
		s2 += x * x
	}
	return 1 / s2
}

// NEffEntropy returns the entropy effective sample size exp(−Σ_j α_j log α_j)
// (the perplexity of the row), with 0·log 0 = 0. It is not in the paper; it is
// the usual companion of the Kish size (App. A notation table, "n_eff") and
// equals it on one-hot (1) and uniform (len(alpha)) rows; in general
// NEff ≤ NEffEntropy. Negative weights give NaN.
func NEffEntropy(alpha []float32) float64 {
	var h float64
	for _, a := range alpha {
		if a != 0 {
			x := float64(a)
			h -= x * math.Log(x)
		}
	}
	return math.Exp(h)
}

// SumAlpha returns Σ_j α_j in float64: 1 (up to float32 rounding) for a
// softmax row, the sandwich "bread" A of paper Eq. 12 in general.
func SumAlpha(alpha []float32) float64 {
	var s float64
	for _, a := range alpha {
		s += float64(a)
	}
	return s
}

// BOSMass returns α_0, the attention mass on key position 0 (the paper's
// "BOS attention mass", App. I; for a tokenizer that prepends nothing this is
// the first token of the chunk, notes §F.1.3). An empty row gives 0.
func BOSMass(alpha []float32) float64 {
	if len(alpha) == 0 {
		return 0
	}
	return float64(alpha[0])
}

// ColumnMass returns Σ_{k∈keys} α_k, the attention mass of the row on the
// chosen key positions (e.g. several sink candidates). Keys outside the row
// (k < 0 or k ≥ len(alpha), i.e. beyond the causal query) contribute 0;
// repeated keys are counted each time they appear.
func ColumnMass(alpha []float32, keys []int) float64 {
	var m float64
	for _, k := range keys {
		if k >= 0 && k < len(alpha) {
			m += float64(alpha[k])
		}
	}
	return m
}

// MomentsMethod selects how Moments computes the dispersion S.
type MomentsMethod int

const (
	// TwoPass (the default) computes e in a first pass and then
	// S_i = Σ_j α_j (v_ji − e_i)² from centred squares in a second pass.
	// It is accurate even when S ≪ e² (sink heads, values with a large
	// common offset).
	TwoPass MomentsMethod = iota
	// Expanded computes S_i = Σ_j α_j v_ji² − e_i² in one pass (the
	// expanded-square identity, paper Eq. 7), clamped at 0. It is offered
	// for comparison only: it cancels catastrophically when S_i ≪ e_i²,
	// losing about log10(e_i²/S_i) of the ~16 float64 digits, and it differs
	// from the centred form by e_i²(1 − Σα) when the row does not sum to 1
	// exactly (notes §F.2.14).
	Expanded
)

// String returns the method's name.
func (m MomentsMethod) String() string {
	switch m {
	case TwoPass:
		return "two-pass"
	case Expanded:
		return "expanded"
	}
	return "MomentsMethod(?)"
}

// Moments writes the kriging estimate e_i = Σ_j α_j v_ji and the weighted
// dispersion S_i = Σ_j α_j (v_ji − e_i)² (paper Eqs. 2, 5–7, per dimension,
// in float64) for one attention row. v(j) must return the value vector of key
// j with at least len(e) entries (only the first len(e) are used); len(S) must
// equal len(e). The estimate is not renormalised by Σα (paper App. D uses
// Σα v directly for rows that sum to ≈ 1). method selects the two-pass
// (default, stable) or expanded (cancelling) computation of S. Moments does
// not allocate. An empty row gives e = S = 0.
func Moments(e, S []float64, alpha []float32, v func(j int) []float32, method MomentsMethod) {
	checkDims(e, S)
	clear(e)
	clear(S)
	d := len(e)
	if method == Expanded {
		for j, a := range alpha {
			aj := float64(a)
			vj := v(j)[:d]
			for i, x := range vj {
				xf := float64(x)
				e[i] += aj * xf
				S[i] += aj * xf * xf
			}
		}
		finishExpanded(e, S)
		return
	}
	for j, a := range alpha {
		aj := float64(a)
		vj := v(j)[:d]
		for i, x := range vj {
			e[i] += aj * float64(x)
		}
	}
	for j, a := range alpha {
		aj := float64(a)
		vj := v(j)[:d]
		for i, x := range vj {
			r := float64(x) - e[i]
			S[i] += aj * r * r
		}
	}
}

// MomentsStrided is Moments for values stored row-major: v_j is
// V[j*vStride : j*vStride+len(e)] (the layout of hooks.AttnTile.V). It is the
// kernel Collector uses: it processes several keys per sweep over the
// dimensions, so its rounding differs from Moments' in the last bits only.
// If B is non-nil (len(B) = len(e)) it also writes the sandwich "meat"
// B_i = Σ_j α_j² (v_ji − e_i)² of paper Eq. 13: centred with TwoPass, and
// with Expanded by App. D's expansion Σα²v² − 2eΣα²v + e²Σα² (clamped at 0).
// MomentsStrided does not allocate.
func MomentsStrided(e, S, B []float64, alpha []float32, V []float32, vStride int, method MomentsMethod) {
	checkDims(e, S)
	if B != nil {
		checkDims(e, B)
	}
	d := len(e)
	n := len(alpha)
	if n > 0 && (n-1)*vStride+d > len(V) {
		panic("probes: MomentsStrided: V too short for the row")
	}
	clear(e)
	clear(S)
	if B != nil {
		clear(B)
	}
	if method == Expanded {
		momentsExpandedStrided(e, S, B, alpha, V, vStride)
		return
	}
	// Pass 1: e = Σ α_j v_j, four keys at a time.
	j := 0
	for ; j+4 <= n; j += 4 {
		a0, a1, a2, a3 := float64(alpha[j]), float64(alpha[j+1]), float64(alpha[j+2]), float64(alpha[j+3])
		o := j * vStride
		v0 := V[o : o+d]
		v1 := V[o+vStride : o+vStride+d][:len(v0)]
		v2 := V[o+2*vStride : o+2*vStride+d][:len(v0)]
		v3 := V[o+3*vStride : o+3*vStride+d][:len(v0)]
		ee := e[:len(v0)]
		for i, x0 := range v0 {
			ee[i] += a0*float64(x0) + a1*float64(v1[i]) + a2*float64(v2[i]) + a3*float64(v3[i])
		}
	}
	for ; j < n; j++ {
		a := float64(alpha[j])
		vj := V[j*vStride : j*vStride+d]
		ee := e[:len(vj)]
		for i, x := range vj {
			ee[i] += a * float64(x)
		}
	}
	// Pass 2: S = Σ α_j (v_j − e)² (and B = Σ α_j² (v_j − e)²).
	if B != nil {
		j = 0
		for ; j+2 <= n; j += 2 {
			a0, a1 := float64(alpha[j]), float64(alpha[j+1])
			o := j * vStride
			v0 := V[o : o+d]
			v1 := V[o+vStride : o+vStride+d][:len(v0)]
			ee, ss, bb := e[:len(v0)], S[:len(v0)], B[:len(v0)]
			for i, x0 := range v0 {
				r0 := float64(x0) - ee[i]
				r1 := float64(v1[i]) - ee[i]
				q0, q1 := r0*r0, r1*r1
				ss[i] += a0*q0 + a1*q1
				bb[i] += a0*a0*q0 + a1*a1*q1
			}
		}
		for ; j < n; j++ {
			aj := float64(alpha[j])
			a2 := aj * aj
			vj := V[j*vStride : j*vStride+d]
			ee, ss, bb := e[:len(vj)], S[:len(vj)], B[:len(vj)]
			for i, x := range vj {
				r := float64(x) - ee[i]
				r2 := r * r
				ss[i] += aj * r2
				bb[i] += a2 * r2
			}
		}
		return
	}
	j = 0
	for ; j+4 <= n; j += 4 {
		a0, a1, a2, a3 := float64(alpha[j]), float64(alpha[j+1]), float64(alpha[j+2]), float64(alpha[j+3])
		o := j * vStride
		v0 := V[o : o+d]
		v1 := V[o+vStride : o+vStride+d][:len(v0)]
		v2 := V[o+2*vStride : o+2*vStride+d][:len(v0)]
		v3 := V[o+3*vStride : o+3*vStride+d][:len(v0)]
		ee := e[:len(v0)]
		ss := S[:len(v0)]
		for i, x0 := range v0 {
			ei := ee[i]
			r0 := float64(x0) - ei
			r1 := float64(v1[i]) - ei
			r2 := float64(v2[i]) - ei
			r3 := float64(v3[i]) - ei
			ss[i] += a0*r0*r0 + a1*r1*r1 + a2*r2*r2 + a3*r3*r3
		}
	}
	for ; j < n; j++ {
		a := float64(alpha[j])
		vj := V[j*vStride : j*vStride+d]
		ee, ss := e[:len(vj)], S[:len(vj)]
		for i, x := range vj {
			r := float64(x) - ee[i]
			ss[i] += a * r * r
		}
	}
}

func momentsExpandedStrided(e, S, B []float64, alpha []float32, V []float32, vStride int) {
	d := len(e)
	var sumA2 float64
	for j, a := range alpha {
		aj := float64(a)
		vj := V[j*vStride : j*vStride+d]
		for i, x := range vj {
			xf := float64(x)
			e[i] += aj * xf
			S[i] += aj * xf * xf
		}
	}
	if B != nil {
		// App. D expansion Σα²v² − 2eΣα²v + e²Σα² = Σα²v(v−2e) + e²Σα²;
		// it needs the finished e, hence a second sweep.
		for j, a := range alpha {
			aj := float64(a)
			a2 := aj * aj
			sumA2 += a2
			vj := V[j*vStride : j*vStride+d]
			for i, x := range vj {
				xf := float64(x)
				B[i] += a2 * xf * (xf - 2*e[i])
			}
		}
		for i := range B {
			B[i] += e[i] * e[i] * sumA2
			if B[i] < 0 {
				B[i] = 0
			}
		}
	}
	finishExpanded(e, S)
}

func finishExpanded(e, S []float64) {
	for i, ei := range e {
		s := S[i] - ei*ei
		if s < 0 {
			s = 0
		}
		S[i] = s
	}
}

// SandwichMeat writes B_i = Σ_j α_j² (v_ji − e_i)², the numerator ("meat")
// of the sandwich variance, paper App. D Eq. 13, for one row, given the
// kriging estimate e (from Moments). v is as in Moments. It does not
// allocate.
func SandwichMeat(B, e []float64, alpha []float32, v func(j int) []float32) {
	checkDims(e, B)
	clear(B)
	d := len(e)
	for j, a := range alpha {
		a2 := float64(a) * float64(a)
		vj := v(j)[:d]
		for i, x := range vj {
			r := float64(x) - e[i]
			B[i] += a2 * r * r
		}
	}
}

// Mean returns the arithmetic mean of x (e.g. S̄ = mean_i S_i); NaN for an
// empty slice.
func Mean(x []float64) float64 {
	if len(x) == 0 {
		return math.NaN()
	}
	var s float64
	for _, v := range x {
		s += v
	}
	return s / float64(len(x))
}

// Norm2 returns the Euclidean norm of x (e.g. ‖e‖, the pre-gate head output
// norm of notes §F.4).
func Norm2(x []float64) float64 {
	var s float64
	for _, v := range x {
		s += v * v
	}
	return math.Sqrt(s)
}

// GateHeadwise returns a head-wise output gate value g ∈ (0, 1) as float64;
// it exists for symmetry with GateMean (Qiu et al.'s headwise gate is one
// scalar per (token, head), paper App. I "gate σ(XW_θ)").
func GateHeadwise(g float32) float64 { return float64(g) }

// GateMean reduces an element-wise output gate (one value per head
// dimension) to the per-(token, head) scalar used in the paper's Fig. 2(b):
// the mean over the head's d_head entries. An empty slice gives NaN.
func GateMean(g []float32) float64 {
	if len(g) == 0 {
		return math.NaN()
	}
	var s float64
	for _, x := range g {
		s += float64(x)
	}
	return s / float64(len(g))
}

func checkDims(e, x []float64) {
	if len(x) != len(e) {
		panic("probes: destination slices differ in length")
	}
}
