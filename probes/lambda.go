package probes

import (
	"fmt"
	"math"
)

// LambdaForm selects the variance estimator behind the observation
// precision λobs = 1/Var(e).
type LambdaForm int

const (
	// REMLPrior is the default: REML with the conjugate Inv-χ²(ν, σ0²)
	// prior, paper Sec. 3.1 Eq. 6 (= App. F Eq. 15), per dimension i:
	//
	//	Var_i = (S_i + ν σ0²)/(n_eff + ν),   λobs_i = (n_eff + ν)/(S_i + ν σ0²).
	//
	// With the defaults ν = 1, σ0² = 1/d_head it is the golden files'
	// lambda_obs = (neff+1)/(S + 1/dh). It is finite and positive for every
	// row and bounded by λobs ≤ (n_eff + ν)/(ν σ0²) = (n_eff + 1)·d_head;
	// on a one-hot row (n_eff = 1, S = 0) λobs = 2·d_head exactly.
	REMLPrior LambdaForm = iota
	// REMLNaive is the naive REML form, paper Eq. 5 (from Eq. 14):
	//
	//	Var_i = S_i/(n_eff − 1),   λobs_i = (n_eff − 1)/S_i.
	//
	// It is singular where the paper says it is (Sec. 3.1, App. F): at
	// n_eff = 1 (one-hot rows, causal query 0, where S = 0 too) and where
	// S_i = 0. Both cases, and n_eff < 1 (only reachable by rounding or by
	// rows that do not sum to 1), are returned as λobs = +Inf (Var = 0,
	// hence K = 1: the saturation to the standard Transformer that
	// Sec. 3.1 describes), never NaN; set LambdaOptions.LambdaMax to cap
	// them instead.
	REMLNaive
	// Sandwich is the heteroskedasticity-consistent M-estimator variance of
	// paper App. D Eq. 13 (used by the paper for HSTU's unnormalised
	// weights), per dimension i:
	//
	//	Var_i = B_i/(Σ_j α_j)²,   B_i = Σ_j α_j² (v_ji − e_i)²,   λobs_i = (Σα)²/B_i.
	//
	// It needs RowStats.B and RowStats.SumAlpha; e is Σ α v, not divided by
	// Σα (App. D: "we use e_t = Σ α̃ v directly when the row-sum is
	// approximately one"). It has no prior, so B_i = 0 (a one-hot row)
	// gives λobs = +Inf unless LambdaMax is set; Σα = 0 with B_i > 0 gives
	// λobs = 0.
	Sandwich
)

// String returns the form's name.
func (f LambdaForm) String() string {
	switch f {
	case REMLPrior:
		return "reml-prior"
	case REMLNaive:
		return "reml-naive"
	case Sandwich:
		return "sandwich"
	}
	return fmt.Sprintf("LambdaForm(%d)", int(f))
}

// Reduction selects how per-dimension quantities are reduced to one scalar
// per (layer, head, query). The paper never says (notes §B.4, §F.1.1); the
// notes' three candidates are offered, (i) being the default.
type Reduction int

const (
	// FromMean (default, notes §B.4 (i)): the statistic is averaged over
	// the head dimension first, S̄ = mean_i S_i (B̄ for the sandwich), and
	// the scalar form is applied to it: λobs = (n_eff + ν)/(S̄ + ν σ0²) for
	// Eq. 6. K is then λobs/(λ + λobs).
	FromMean Reduction = iota
	// PerDimMean (notes §B.4 (ii)): λobs_i per dimension, then
	// λobs = mean_i λobs_i. The matching gain is KDimMean
	// (= mean_i K_i, the golden K_dim_mean), not K(mean_i λobs_i).
	PerDimMean
	// Harmonic (notes §B.4 (iii)): λobs = 1/mean_i Var_i, i.e. the harmonic
	// mean of the per-dimension λobs_i. Every form's Var_i is affine in its
	// statistic (S_i or B_i) with a dimension-independent slope and offset,
	// so mean_i Var_i = Var(S̄) and Harmonic equals FromMean up to rounding
	// (a property test checks this). The two differ only when LambdaMax
	// caps some λobs_i (Harmonic floors each Var_i at 1/LambdaMax first).
	Harmonic
)

// String returns the reduction's name.
func (r Reduction) String() string {
	switch r {
	case FromMean:
		return "from-mean"
	case PerDimMean:
		return "per-dim-mean"
	case Harmonic:
		return "harmonic"
	}
	return fmt.Sprintf("Reduction(%d)", int(r))
}

// LambdaOptions configures λobs. The zero value is the paper's default
// diagnostic (App. I): Eq. 6 with ν = 1, σ0² = 1/d_head, reduction
// FromMean, no cap.
type LambdaOptions struct {
	// Form is the variance estimator (default REMLPrior, Eq. 6).
	Form LambdaForm
	// Reduction over the head dimension (default FromMean).
	Reduction Reduction
	// Nu is the prior strength ν of Eq. 6 (pseudo-observations). Zero
	// selects the paper's ν = 1; it must not be negative. Ignored by the
	// other forms.
	Nu float64
	// Sigma02 is the prior scale σ0² of Eq. 6. Zero selects the paper's
	// 1/d_head, with d_head = the length of the per-dimension statistic;
	// it must not be negative. Ignored by the other forms.
	Sigma02 float64
	// LambdaMax, when positive, caps every λobs (per dimension, and the
	// reduced scalar) at LambdaMax: the paper's precision cap λ_max
	// (App. J/L: 100 for recsys, 3 for LLM SFT). Zero means no cap, which
	// is what the App. I diagnostic uses.
	LambdaMax float64
}

// WithDefaults returns o with the zero-valued Nu and Sigma02 replaced by the
// paper's defaults for head dimension dHead (ν = 1, σ0² = 1/dHead). The paper
// writes σ0² = 1/d_k; the value head dimension is used here, which equals
// d_k in every model the project covers (App. I: 1/128 for d_h = 128).
func (o LambdaOptions) WithDefaults(dHead int) LambdaOptions {
	if o.Nu == 0 {
		o.Nu = 1
	}
	if o.Sigma02 == 0 && dHead > 0 {
		o.Sigma02 = 1 / float64(dHead)
	}
	return o
}

// Validate reports option values that cannot be used.
func (o LambdaOptions) Validate() error {
	switch {
	case o.Form < REMLPrior || o.Form > Sandwich:
		return fmt.Errorf("probes: unknown LambdaForm %d", int(o.Form))
	case o.Reduction < FromMean || o.Reduction > Harmonic:
		return fmt.Errorf("probes: unknown Reduction %d", int(o.Reduction))
	case o.Nu < 0 || math.IsNaN(o.Nu) || math.IsInf(o.Nu, 0):
		return fmt.Errorf("probes: LambdaOptions.Nu = %v, want ≥ 0 (0 selects 1)", o.Nu)
	case o.Sigma02 < 0 || math.IsNaN(o.Sigma02) || math.IsInf(o.Sigma02, 0):
		return fmt.Errorf("probes: LambdaOptions.Sigma02 = %v, want ≥ 0 (0 selects 1/d_head)", o.Sigma02)
	case o.LambdaMax < 0 || math.IsNaN(o.LambdaMax):
		return fmt.Errorf("probes: LambdaOptions.LambdaMax = %v, want ≥ 0 (0: no cap)", o.LambdaMax)
	}
	return nil
}

// RowStats is what the λobs forms need from one attention row.
type RowStats struct {
	// NEff is the Kish size 1/Σα² (NEff); used by Eqs. 5 and 6.
	NEff float64
	// SumAlpha is Σα (SumAlpha); used by Eq. 13 (1 for softmax rows).
	SumAlpha float64
	// S is the per-dimension dispersion Σα(v−e)² (Moments); used by
	// Eqs. 5 and 6.
	S []float64
	// B is the per-dimension sandwich meat Σα²(v−e)² (SandwichMeat);
	// used by Eq. 13 only, may be nil otherwise.
	B []float64
}

// LambdaREML returns λobs = (n_eff + ν)/(s + ν σ0²), the reciprocal of the
// REML variance with conjugate prior, paper Eq. 6, for one dimension's (or
// the mean) dispersion s.
func LambdaREML(neff, s, nu, sigma02 float64) float64 {
	return (neff + nu) / (s + nu*sigma02)
}

// LambdaNaive returns λobs = (n_eff − 1)/s, the reciprocal of the naive REML
// variance of paper Eq. 5. At its singularities (n_eff ≤ 1, or s = 0) it
// returns +Inf (variance 0), never NaN; see REMLNaive.
func LambdaNaive(neff, s float64) float64 {
	if neff <= 1 || s == 0 {
		return math.Inf(1)
	}
	return (neff - 1) / s
}

// LambdaSandwich returns λobs = (Σα)²/b, the reciprocal of the sandwich
// variance of paper App. D Eq. 13, for one dimension's (or the mean) meat
// b = Σα²(v−e)² and bread sumAlpha = Σα. b = 0 gives +Inf, never NaN.
func LambdaSandwich(b, sumAlpha float64) float64 {
	if b == 0 {
		return math.Inf(1)
	}
	return sumAlpha * sumAlpha / b
}

// lambda1 is the unreduced form of o (defaults resolved) on one statistic.
func (o *LambdaOptions) lambda1(st *RowStats, s float64) float64 {
	var l float64
	switch o.Form {
	case REMLNaive:
		l = LambdaNaive(st.NEff, s)
	case Sandwich:
		l = LambdaSandwich(s, st.SumAlpha)
	default:
		l = LambdaREML(st.NEff, s, o.Nu, o.Sigma02)
	}
	if o.LambdaMax > 0 && l > o.LambdaMax {
		l = o.LambdaMax
	}
	return l
}

// variance1 is 1/lambda1 computed as a variance (Var = 0 for λ = +Inf).
func (o *LambdaOptions) variance1(st *RowStats, s float64) float64 {
	var v float64
	switch o.Form {
	case REMLNaive:
		if st.NEff <= 1 || s == 0 {
			v = 0
		} else {
			v = s / (st.NEff - 1)
		}
	case Sandwich:
		if s != 0 {
			v = s / (st.SumAlpha * st.SumAlpha)
		}
	default:
		v = (s + o.Nu*o.Sigma02) / (st.NEff + o.Nu)
	}
	if o.LambdaMax > 0 && v < 1/o.LambdaMax {
		v = 1 / o.LambdaMax
	}
	return v
}

func (o *LambdaOptions) stat(st *RowStats) []float64 {
	if o.Form == Sandwich {
		if st.B == nil {
			panic("probes: the Sandwich form needs RowStats.B (SandwichMeat)")
		}
		return st.B
	}
	if st.S == nil {
		panic("probes: RowStats.S is nil")
	}
	return st.S
}

// LambdaDim writes the per-dimension observation precisions λobs_i of the
// form o.Form (Eq. 6 by default; Eq. 5 or Eq. 13) into dst, which must have
// the length of the statistic (d_head). o.Reduction is not used. Zero Nu and
// Sigma02 take their defaults for d_head = len(dst). It does not allocate.
func (o LambdaOptions) LambdaDim(dst []float64, st RowStats) {
	s := o.stat(&st)
	checkDims(s, dst)
	o = o.WithDefaults(len(s))
	for i, si := range s {
		dst[i] = o.lambda1(&st, si)
	}
}

// Lambda returns the scalar observation precision of one row: the form
// o.Form (Eq. 6 by default) reduced over the head dimension by o.Reduction
// (FromMean by default; see Reduction). Zero Nu and Sigma02 take their
// defaults for d_head = the statistic's length. An empty statistic gives
// NaN. It does not allocate.
func (o LambdaOptions) Lambda(st RowStats) float64 {
	s := o.stat(&st)
	if len(s) == 0 {
		return math.NaN()
	}
	o = o.WithDefaults(len(s))
	switch o.Reduction {
	case PerDimMean:
		var sum float64
		for _, si := range s {
			sum += o.lambda1(&st, si)
		}
		return sum / float64(len(s))
	case Harmonic:
		var sum float64
		for _, si := range s {
			sum += o.variance1(&st, si)
		}
		return float64(len(s)) / sum
	default:
		return o.lambda1(&st, Mean(s))
	}
}

// KalmanGain returns the BFT Kalman gain K = λobs/(λ + λobs), paper Eq. 3,
// for observation precision lambdaObs and prior precision lambdaPrior (the
// App. I diagnostic uses λ = 1: "the BFT gain K at λ = 1"). lambdaObs = +Inf
// gives exactly 1 (not Inf/Inf); lambdaObs = lambdaPrior = 0 gives NaN.
func KalmanGain(lambdaObs, lambdaPrior float64) float64 {
	if math.IsInf(lambdaObs, 1) {
		return 1
	}
	return lambdaObs / (lambdaPrior + lambdaObs)
}

// KDimMean returns mean_i K(λobs_i, λ), the per-dimension Kalman gains
// averaged over the head dimension (reduction (ii) of notes §B.4; the golden
// files' K_dim_mean with λ = 1). An empty slice gives NaN.
func KDimMean(lambdaDim []float64, lambdaPrior float64) float64 {
	if len(lambdaDim) == 0 {
		return math.NaN()
	}
	var s float64
	for _, l := range lambdaDim {
		s += KalmanGain(l, lambdaPrior)
	}
	return s / float64(len(lambdaDim))
}
