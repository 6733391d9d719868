package probes

import (
	"fmt"
	"math"
	"runtime"
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gorgonia.org/tensor"

	"github.com/filterlens/probe/hooks"
)

// Gated DeltaNet read as a filter (Yang, Kautz & Hatamizadeh 2024; Qwen3.5's
// linear-attention layers). Per value head, with k_t L2-normalised, the
// layer runs
//
//	S_t = e^{g_t} S_{t−1} + β_t k_t (v_t − e^{g_t} S_{t−1}ᵀ k_t)ᵀ,   o_t = S_tᵀ q_t/√d_k
//
// which is a Kalman-style measurement update of the associative memory S:
// predict (forget) S_{t|t−1} = e^{g_t} S_{t−1}, compare the memory's read-out
// at k_t with the observation v_t (innovation r_t = v_t − S_{t|t−1}ᵀ k_t),
// correct with gain β_t along k_t. The per-(layer, value head, token)
// quantities of GDNFilter are
//
//	β_t                       gain (write strength)
//	e^{g_t}                   forgetting factor; horizon 1/(1 − e^{g_t}) tokens (+Inf at g = 0)
//	‖r_t‖₂                    innovation, the recurrence's own scaling (GDNOptions.Innovation)
//	‖S_t‖_F                   state norm after the update
//
// and from the exact effective attention row W[t, 0..t] (o_t = Σ_s W[t,s] v_s,
// hooks.DeltaConsumer tiles):
//
//	n_eff^W = (Σ_s |W_s|)² / Σ_s W_s²      participation ratio
//	first   = |W_0| / Σ_s |W_s|            first-token share
//	sum     = Σ_s W_s                      row sum (1 for a softmax row)
//	neg     = Σ_{W_s<0} |W_s| / Σ_s |W_s|  share of the row's magnitude on negative weights
//
// and the BFT dispersion and precision of the weighted values (EffAttnWeights).

// InnovationForm selects the memory read-out the innovation compares v_t with.
type InnovationForm int

const (
	// InnovationDecayed (default) is r_t = v_t − e^{g_t} S_{t−1}ᵀ k_t: the
	// prediction after forgetting, exactly the residual the update
	// multiplies by β_t (u_t = β_t r_t), i.e. the Kalman innovation of the
	// predicted state.
	InnovationDecayed InnovationForm = iota
	// InnovationUndecayed is r_t = v_t − S_{t−1}ᵀ k_t, the read-out of the
	// state as it left step t − 1.
	InnovationUndecayed
)

// String returns the form's name.
func (f InnovationForm) String() string {
	switch f {
	case InnovationDecayed:
		return "decayed"
	case InnovationUndecayed:
		return "undecayed"
	}
	return "InnovationForm(?)"
}

// ParseInnovationForm parses "decayed" or "undecayed".
func ParseInnovationForm(s string) (InnovationForm, error) {
	for _, f := range []InnovationForm{InnovationDecayed, InnovationUndecayed} {
		if f.String() == s {
			return f, nil
		}
	}
	return 0, fmt.Errorf("innovation form %q: want decayed or undecayed", s)
}

// EffAttnWeights selects the weights whose dispersion of the values is the
// "BFT dispersion" of a signed effective-attention row W[t, 0..t].
type EffAttnWeights int

const (
	// WeightsAbs (default) uses π_s = |W_s| / Σ_r |W_r|, the distribution of
	// the row's magnitude over past tokens. It is defined whenever the row
	// is not all zero, and 1/Σπ² is n_eff^W. Its mean Σ π_s v_s equals the
	// layer's output o_t/Σ W only when W ≥ 0.
	WeightsAbs EffAttnWeights = iota
	// WeightsSigned uses ŵ_s = W_s / Σ_r W_r, which reproduces the layer's
	// output (Σ ŵ_s v_s = o_t / Σ W), and is a weighted variance only when
	// ŵ is on the simplex: it is defined when Σ W ≠ 0 and every W_s has the
	// sign of Σ W (or is 0); other rows get NaN.
	WeightsSigned
)

// String returns the weights' name.
func (w EffAttnWeights) String() string {
	switch w {
	case WeightsAbs:
		return "abs"
	case WeightsSigned:
		return "signed"
	}
	return "EffAttnWeights(?)"
}

// ParseEffAttnWeights parses "abs" or "signed".
func ParseEffAttnWeights(s string) (EffAttnWeights, error) {
	for _, w := range []EffAttnWeights{WeightsAbs, WeightsSigned} {
		if w.String() == s {
			return w, nil
		}
	}
	return 0, fmt.Errorf("effective-attention weights %q: want abs or signed", s)
}

// EffAttnRowStats are the magnitude statistics of one effective-attention
// row (EffAttnRow).
type EffAttnRowStats struct {
	NEff       float64 // (Σ|W|)²/ΣW²; NaN for an all-zero row
	FirstShare float64 // |W_0|/Σ|W|; NaN for an all-zero row
	RowSum     float64 // Σ W
	NegShare   float64 // Σ_{W<0}|W| / Σ|W|; NaN for an all-zero row
	AbsSum     float64 // Σ|W|
}

// EffAttnRow returns the participation ratio n_eff^W = (Σ_s |W_s|)²/Σ_s W_s²,
// the first-token share |W_0|/Σ_s |W_s|, the row sum Σ_s W_s and the negative
// share of one row W[t, 0..t] of a Gated DeltaNet's effective attention, in
// float64. For a row on the simplex n_eff^W is Kish's n_eff (NEff), the
// first-token share is the BOS mass and the sum is 1. n_eff^W ∈ [1, t+1]
// for any non-zero row (Cauchy–Schwarz); 1 exactly for a one-hot row.
func EffAttnRow(w []float32) EffAttnRowStats {
	// Branch-free, four keys at a time: Σ_{W<0}|W| = (Σ|W| − ΣW)/2.
	var a0, a1, a2, a3, q0, q1, q2, q3, s0, s1, s2, s3 float64
	j := 0
	for ; j+4 <= len(w); j += 4 {
		x := w[j : j+4 : j+4]
		f0, f1, f2, f3 := float64(x[0]), float64(x[1]), float64(x[2]), float64(x[3])
		s0, s1, s2, s3 = s0+f0, s1+f1, s2+f2, s3+f3
		q0, q1, q2, q3 = q0+f0*f0, q1+f1*f1, q2+f2*f2, q3+f3*f3
		a0, a1, a2, a3 = a0+math.Abs(f0), a1+math.Abs(f1), a2+math.Abs(f2), a3+math.Abs(f3)
	}
	for ; j < len(w); j++ {
		f := float64(w[j])
		s0 += f
		q0 += f * f
		a0 += math.Abs(f)
	}
	abs, sq, sum := (a0+a1)+(a2+a3), (q0+q1)+(q2+q3), (s0+s1)+(s2+s3)
	neg := max(0, (abs-sum)/2)
	st := EffAttnRowStats{NEff: math.NaN(), FirstShare: math.NaN(), RowSum: sum, NegShare: math.NaN(), AbsSum: abs}
	if abs > 0 {
		st.NEff = abs * abs / sq
		st.FirstShare = math.Abs(float64(w[0])) / abs
		st.NegShare = neg / abs
	}
	return st
}

// EffAttnWeightsOf writes into pi the weights of an effective-attention row
// w that EffAttnWeights selects (len(pi) ≥ len(w); the first len(w) entries
// are written) and reports whether they are defined: abs, π = |w|/Σ|w|
// (defined iff w ≠ 0); signed, ŵ = w/Σw (defined iff Σw ≠ 0 and no entry
// has the opposite sign of Σw). Defined weights are non-negative and sum
// to 1, so Kish's n_eff of them is 1/Σπ².
func EffAttnWeightsOf(pi []float32, w []float32, mode EffAttnWeights) bool {
	var abs, sum float64
	var pos, neg bool
	for _, x := range w {
		f := float64(x)
		sum += f
		abs += math.Abs(f)
		pos = pos || f > 0
		neg = neg || f < 0
	}
	switch mode {
	case WeightsAbs:
		if abs == 0 {
			return false
		}
		inv := 1 / abs
		for s, x := range w {
			pi[s] = float32(math.Abs(float64(x)) * inv)
		}
		return true
	case WeightsSigned:
		if sum == 0 || (sum > 0 && neg) || (sum < 0 && pos) {
			return false
		}
		inv := 1 / sum
		for s, x := range w {
			pi[s] = float32(float64(x) * inv)
		}
		return true
	}
	panic("probes: unknown EffAttnWeights")
}

// DeltaRuleFilter runs the gated delta rule of one (sequence, value head) in
// float64 and writes, per step t, the innovation norm innov[t] = ‖r_t‖₂
// (form: InnovationDecayed r_t = v_t − e^{g_t} S_{t−1}ᵀ k_t, or
// InnovationUndecayed r_t = v_t − S_{t−1}ᵀ k_t) and the state norm
// stateNorm[t] = ‖S_t‖_F after the update
// S_t = e^{g_t} S_{t−1} + β_t k_t (v_t − e^{g_t} S_{t−1}ᵀ k_t)ᵀ. k [T, dk]
// (L2-normalised, as at blocks.{l}.gdn.hook_k), v [T, dv], beta and g [T]
// (T = len(beta)); S [dk·dv] holds S_0 on entry (zeros for a fresh
// sequence) and S_T on return; r is scratch of 2·dv. Cost 3·dk·dv
// multiply-adds per step in one pass over S; it does not allocate.
func DeltaRuleFilter(innov, stateNorm, S, r []float64, k, v, beta, g []float32, dk, dv int, form InnovationForm) {
	T := len(beta)
	if len(g) != T || len(innov) < T || len(stateNorm) < T || len(S) != dk*dv || len(r) < 2*dv || len(k) < T*dk || len(v) < T*dv {
		panic(fmt.Sprintf("probes: DeltaRuleFilter: T=%d dk=%d dv=%d with g %d, innov %d, stateNorm %d, S %d, r %d, k %d, v %d",
			T, dk, dv, len(g), len(innov), len(stateNorm), len(S), len(r), len(k), len(v)))
	}
	if T == 0 {
		return
	}
	// r holds the read-out S_{t−1}ᵀk_t of the step; the update of S_t
	// forms the next step's S_tᵀk_{t+1} in the same pass over S (one
	// pass per step instead of two: the state is read from cache once).
	r, next := r[:dv], r[dv:2*dv]
	clear(r)
	for i, ki := range k[:dk] {
		axpy64(r, S[i*dv:(i+1)*dv], float64(ki))
	}
	for t := 0; t < T; t++ {
		kt, vt := k[t*dk:(t+1)*dk], v[t*dv:(t+1)*dv]
		e := math.Exp(float64(g[t]))
		// r = Sᵀk (undecayed read-out); the update uses e·Sᵀk.
		var in2 float64
		for j, p := range r {
			x := float64(vt[j])
			if form == InnovationUndecayed {
				d := x - p
				in2 += d * d
			}
			r[j] = float64(beta[t]) * (x - e*p) // u_t
			if form == InnovationDecayed {
				d := x - e*p
				in2 += d * d
			}
		}
		innov[t] = math.Sqrt(in2)
		var n2 float64
		clear(next)
		if t+1 < T {
			kn := k[(t+1)*dk : (t+2)*dk]
			for i, ki := range kt {
				n2 += decayAdd(S[i*dv:(i+1)*dv], r, next, e, float64(ki), float64(kn[i]))
			}
		} else {
			for i, ki := range kt {
				n2 += decayAdd(S[i*dv:(i+1)*dv], r, next, e, float64(ki), 0)
			}
		}
		stateNorm[t] = math.Sqrt(n2)
		r, next = next, r
	}
}

// axpy64 adds a·x to dst (len(x) ≥ len(dst)), four elements a step.
func axpy64(dst, x []float64, a float64) {
	x = x[:len(dst)]
	i := 0
	for ; i+4 <= len(dst); i += 4 {
		d, s := dst[i:i+4:i+4], x[i:i+4:i+4]
		d[0] += a * s[0]
		d[1] += a * s[1]
		d[2] += a * s[2]
		d[3] += a * s[3]
	}
	for ; i < len(dst); i++ {
		dst[i] += a * x[i]
	}
}

// decayAdd is decayAdd64, or its AVX-512 form where the CPU has it.
var decayAdd = decayAdd64

// decayAdd64 sets row = e·row + k·u, one row i of the state update
// S_t = e^{g_t} S_{t−1} + k_t u_tᵀ (k = k_t[i]), adds kn·row to next
// (kn = k_{t+1}[i]: the next read-out S_tᵀk_{t+1}, summed over rows in
// order) and returns Σ row², in four partial sums so that the adds do not
// wait on each other. u and next hold at least len(row) values.
func decayAdd64(row, u, next []float64, e, k, kn float64) float64 {
	u, next = u[:len(row)], next[:len(row)]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(row); i += 4 {
		d, v, n := row[i:i+4:i+4], u[i:i+4:i+4], next[i:i+4:i+4]
		x0, x1, x2, x3 := e*d[0]+k*v[0], e*d[1]+k*v[1], e*d[2]+k*v[2], e*d[3]+k*v[3]
		d[0], d[1], d[2], d[3] = x0, x1, x2, x3
		n[0] += kn * x0
		n[1] += kn * x1
		n[2] += kn * x2
		n[3] += kn * x3
		s0 += x0 * x0
		s1 += x1 * x1
		s2 += x2 * x2
		s3 += x3 * x3
	}
	for ; i < len(row); i++ {
		x := e*row[i] + k*u[i]
		row[i] = x
		next[i] += kn * x
		s0 += x * x
	}
	return (s0 + s1) + (s2 + s3)
}

// GDNOptions are the options of a GDNFilter.
type GDNOptions struct {
	Innovation InnovationForm // default InnovationDecayed
	Weights    EffAttnWeights // default WeightsAbs
	// Decay and Gain summarise an RWKV-7 head's per-channel decay w_t and
	// learning rate a_t in the decay and beta columns (rwkv.go; defaults
	// DecayGeoMean, GainRemoval); other mixers' are scalars already.
	Decay DecaySummary
	Gain  GainSummary
	// Nu, Sigma02 and Prior define λobs^W = (n_eff^W + ν)/(S̄^W + ν σ0²)
	// and K^W = λobs^W/(λ + λobs^W) (App. I's Eq. 6 and Eq. 3 on the
	// weights of Weights); 0 selects ν = 1, σ0² = 1/d_v, λ = 1.
	Nu, Sigma02, Prior float64
	// NoDispersion skips S̄^W, λobs^W and K^W (NaN), the O(t·d_v) per row
	// part; the magnitude statistics cost O(t).
	NoDispersion bool
	// NoRows does not ask for the effective-attention rows at all (the
	// model then does not form them): the W-row columns stay NaN and the
	// cost is the recurrence's, O(T·d_k·d_v) per head instead of O(T²·d_k).
	NoRows bool
	// Threads bounds the goroutines of the recurrence (0: GOMAXPROCS).
	Threads int
	// OneLayer holds the values of one measured layer at a time: the
	// columns have B·Hv·T cells, every layer's slot maps to the same ones
	// (Index ignores the slot), and the caller reads a layer out before
	// the next measured layer runs (probe gdn writes its rows per layer
	// at the layer's hook_resid_post). Default false: every layer's
	// values are kept until the pass ends.
	OneLayer bool
}

// GDNFilter collects the filter quantities of every Gated DeltaNet layer
// of one forward pass, per (batch, layer, value head, token): it is a
// hooks.DeltaConsumer for the effective-attention rows and reads β, g, k, v
// at the layer's gdn hooks (Register). Memory: 12 float64 per (batch,
// layer held, value head, token) with the W rows and dispersion, 9 with
// NoDispersion, 6 with NoRows (the columns not computed share one NaN
// slice), linear in T; nothing T×T. The layers held are all measured ones,
// or one with Opt.OneLayer.
type GDNFilter struct {
	B, T, Hv, Dk, Dv int
	Layers           []int // the Gated DeltaNet layers measured, in slot order
	Opt              GDNOptions

	slot []int // model layer → slot (−1: not measured)
	held int   // layer slots the columns hold: len(Layers), or 1 (Opt.OneLayer)

	// Per (b, slot, h, t) at Index(b, slot, h, t).
	Beta, Decay, Horizon, Innovation, StateNorm []float64
	NEffW, FirstShare, RowSum, NegShare         []float64
	SMeanW, LambdaObsW, KW                      []float64

	pool sync.Pool // *gdnScratch of ConsumeDelta

	ssmGroups []float64 // SetSSMLayer's per-group B and Gram matrices, reused layer to layer

	mu   sync.Mutex
	k, v map[int][]float32 // live hook buffers of the layer being run
	beta map[int][]float32
}

// NewGDNFilter returns a GDNFilter for B sequences of T tokens through the
// Gated DeltaNet layers (of nLayers model layers) with Hv value heads of
// key and value dimensions dk, dv.
func NewGDNFilter(B, T, nLayers int, layers []int, Hv, dk, dv int, opt GDNOptions) (*GDNFilter, error) {
	if B <= 0 || T <= 0 || Hv <= 0 || dk <= 0 || dv <= 0 || len(layers) == 0 {
		return nil, fmt.Errorf("probes: GDN filter needs B, T, value heads, d_key, d_value > 0 and at least one Gated DeltaNet layer (got B=%d T=%d Hv=%d dk=%d dv=%d, %d layers)",
			B, T, Hv, dk, dv, len(layers))
	}
	f := &GDNFilter{B: B, T: T, Hv: Hv, Dk: dk, Dv: dv, Layers: layers, Opt: opt, slot: make([]int, nLayers),
		k: map[int][]float32{}, v: map[int][]float32{}, beta: map[int][]float32{}}
	for i := range f.slot {
		f.slot[i] = -1
	}
	for i, l := range layers {
		if l < 0 || l >= nLayers || f.slot[l] >= 0 {
			return nil, fmt.Errorf("probes: GDN filter layer %d out of range or repeated (model has %d layers)", l, nLayers)
		}
		f.slot[l] = i
	}
	if f.Opt.Nu == 0 {
		f.Opt.Nu = 1
	}
	if f.Opt.Sigma02 == 0 {
		f.Opt.Sigma02 = 1 / float64(dv)
	}
	if f.Opt.Prior == 0 {
		f.Opt.Prior = 1
	}
	f.held = len(layers)
	if opt.OneLayer {
		f.held = 1
	}
	n := B * f.held * Hv * T
	nan := func() []float64 {
		x := make([]float64, n)
		for i := range x {
			x[i] = math.NaN()
		}
		return x
	}
	// Columns not computed (NoRows, NoDispersion) share one NaN slice,
	// which nothing writes: 6 rather than 12 float64 per cell by default.
	var none []float64
	for _, c := range []struct {
		skip bool
		dst  []*[]float64
	}{
		{false, []*[]float64{&f.Beta, &f.Decay, &f.Horizon, &f.Innovation, &f.StateNorm}},
		{f.Opt.NoRows, []*[]float64{&f.NEffW, &f.FirstShare, &f.RowSum, &f.NegShare}},
		{f.Opt.NoRows || f.Opt.NoDispersion, []*[]float64{&f.SMeanW, &f.LambdaObsW, &f.KW}},
	} {
		for _, p := range c.dst {
			switch {
			case !c.skip:
				*p = nan()
			case none == nil:
				none = nan()
				fallthrough
			default:
				*p = none
			}
		}
	}
	return f, nil
}

// Index returns the flat index of (batch b, layer slot s, value head h,
// token t): ((b·held + s mod held)·Hv + h)·T + t, where held is the number
// of layer slots the columns hold (1 under Opt.OneLayer: every slot shares
// the cells of slot 0).
func (f *GDNFilter) Index(b, s, h, t int) int { return ((b*f.held+s%f.held)*f.Hv+h)*f.T + t }

// Clear sets every cell of every column to NaN, as NewGDNFilter leaves
// them: under Opt.OneLayer, after a layer is read out, so that a value the
// next layer does not write reads NaN rather than the previous layer's.
func (f *GDNFilter) Clear() {
	for _, c := range [][]float64{f.Beta, f.Decay, f.Horizon, f.Innovation, f.StateNorm, f.NEffW, f.FirstShare, f.RowSum,
		f.NegShare, f.SMeanW, f.LambdaObsW, f.KW} {
		for i := range c {
			c[i] = math.NaN()
		}
	}
}

// Register adds f to hs: the effective-attention stream of every measured
// layer (unless Opt.NoRows) and functions at its gdn.hook_k, hook_v,
// hook_beta and hook_g.
// The recurrence runs at hook_g, which the model issues after hook_k,
// hook_v and hook_beta of the same layer; f reads those three buffers
// there as they then are (including any change another hook made),
// without copying them.
func (f *GDNFilter) Register(hs *hooks.Set) {
	for _, l := range f.Layers {
		if !f.Opt.NoRows {
			hs.Stream(l, f)
		}
		keep := func(m map[int][]float32) hooks.Func {
			return func(_ string, _ int, x *tensor.Dense) error {
				f.mu.Lock()
				m[l] = x.Data().([]float32)
				f.mu.Unlock()
				return nil
			}
		}
		hs.Add(hooks.Name(hooks.GDNK, l), keep(f.k))
		hs.Add(hooks.Name(hooks.GDNV, l), keep(f.v))
		hs.Add(hooks.Name(hooks.GDNBeta, l), keep(f.beta))
		hs.Add(hooks.Name(hooks.GDNG, l), func(name string, _ int, x *tensor.Dense) error {
			f.mu.Lock()
			k, v, beta := f.k[l], f.v[l], f.beta[l]
			delete(f.k, l)
			delete(f.v, l)
			delete(f.beta, l)
			f.mu.Unlock()
			if k == nil || v == nil || beta == nil {
				return fmt.Errorf("probes: GDN filter: %s issued before hook_k, hook_v and hook_beta of layer %d", name, l)
			}
			return f.SetLayer(l, k, v, beta, x.Data().([]float32))
		})
	}
}

// SetLayer records β, g and runs DeltaRuleFilter for every (sequence, value
// head) of layer l, from the layer's hook values k [B, Hv, T, dk], v
// [B, Hv, T, dv], beta and g [B, T, Hv]. The heads run in parallel.
func (f *GDNFilter) SetLayer(l int, k, v, beta, g []float32) error {
	B, T, Hv, dk, dv := f.B, f.T, f.Hv, f.Dk, f.Dv
	if l < 0 || l >= len(f.slot) || f.slot[l] < 0 {
		return fmt.Errorf("probes: GDN filter: layer %d is not one of the measured Gated DeltaNet layers %v", l, f.Layers)
	}
	if len(k) != B*Hv*T*dk || len(v) != B*Hv*T*dv || len(beta) != B*T*Hv || len(g) != B*T*Hv {
		return fmt.Errorf("probes: GDN filter layer %d: k %d, v %d, beta %d, g %d values, want [B=%d, Hv=%d, T=%d] × d_key %d / d_value %d",
			l, len(k), len(v), len(beta), len(g), B, Hv, T, dk, dv)
	}
	s := f.slot[l]
	eachHead(B*Hv, f.Opt.Threads, func() func(j int) {
		S, r := make([]float64, dk*dv), make([]float64, 2*dv)
		bg := make([]float32, 2*T)
		return func(j int) {
			b, h := j/Hv, j%Hv
			at := f.Index(b, s, h, 0)
			for t := 0; t < T; t++ {
				bt, gt := beta[(b*T+t)*Hv+h], g[(b*T+t)*Hv+h]
				bg[t], bg[T+t] = bt, gt
				e := math.Exp(float64(gt))
				f.Beta[at+t], f.Decay[at+t], f.Horizon[at+t] = float64(bt), e, 1/(1-e)
			}
			clear(S)
			DeltaRuleFilter(f.Innovation[at:at+T], f.StateNorm[at:at+T], S, r,
				k[j*T*dk:(j+1)*T*dk], v[j*T*dv:(j+1)*T*dv], bg[:T], bg[T:], dk, dv, f.Opt.Innovation)
		}
	})
	return nil
}

// eachHead calls do(j) for j = 0 … n−1 — the (sequence, head) pairs of a
// layer — on up to threads goroutines (GOMAXPROCS when threads ≤ 0), each
// taking the next j and holding the scratch newWorker made for it: the
// loops of SetLayer and SetSSMLayer.
func eachHead(n, threads int, newWorker func() (do func(j int))) {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	var next sync.Mutex
	i := 0
	var wg sync.WaitGroup
	for w := 0; w < min(threads, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			do := newWorker()
			for {
				next.Lock()
				j := i
				i++
				next.Unlock()
				if j >= n {
					return
				}
				do(j)
			}
		}()
	}
	wg.Wait()
}

// ConsumeAttn rejects softmax rows: f is registered on Gated DeltaNet
// layers only.
func (f *GDNFilter) ConsumeAttn(tile *hooks.AttnTile) error {
	return fmt.Errorf("probes: GDN filter got softmax rows of layer %d, which is not a Gated DeltaNet layer", tile.Layer)
}

// ConsumeDelta computes the effective-attention statistics of every row of
// the tile: EffAttnRow, and with the dispersion the weights π of
// EffAttnWeightsOf (formed here from the row's sums, in the pass that also
// accumulates Σ_s π_s w_s) and S̄^W = mean_i Σ_s π_s (v_si − m_i)²,
// m = Σ_s π_s v_s.
// With c the mean value over the tile's keys 0 … Q0+Rows−1, the shifted
// values v_s − c (float32) and w_s = ‖v_s − c‖² (float64) are formed once
// per tile; the rows' m − c come from one float32 matrix product (the
// project's BLAS), and S̄ = (Σ_s π_s w_s − ‖m − c‖²)/d_v,
// which keeps its digits unless ‖m − c‖² nearly cancels Σ π w: rows where
// the difference is below 1 % of Σ π w are recomputed by MomentsStrided's
// float64 two-pass sums. Cost per row O(t·d_v) in the product, O(t)
// otherwise.
func (f *GDNFilter) ConsumeDelta(tile *hooks.AttnTile) error {
	l := tile.Layer
	if l < 0 || l >= len(f.slot) || f.slot[l] < 0 {
		return fmt.Errorf("probes: GDN filter got effective attention of layer %d, not one of %v", l, f.Layers)
	}
	if tile.Batch >= f.B || tile.Head >= f.Hv || tile.T != f.T || tile.DHead != f.Dv {
		return fmt.Errorf("probes: GDN filter sized for B=%d, Hv=%d, T=%d, d_value=%d got a tile of batch %d, head %d, T=%d, d_value=%d",
			f.B, f.Hv, f.T, f.Dv, tile.Batch, tile.Head, tile.T, tile.DHead)
	}
	at := f.Index(tile.Batch, f.slot[l], tile.Head, 0)
	n, wd, dv := tile.Rows, tile.Q0+tile.Rows, f.Dv
	var sc *gdnScratch
	if !f.Opt.NoDispersion {
		sc, _ = f.pool.Get().(*gdnScratch)
		if sc == nil {
			sc = &gdnScratch{}
		}
		defer f.pool.Put(sc)
		sc.pi, sc.g, sc.c, sc.vs, sc.ws, sc.m = grow(sc.pi, n*wd), grow(sc.g, n), grow(sc.c, dv), grow(sc.vs, wd*dv), grow(sc.ws, wd), grow(sc.m, n*dv)
	}
	for r := 0; r < n; r++ {
		st := EffAttnRow(tile.Row(r))
		i := at + tile.Q0 + r
		f.NEffW[i], f.FirstShare[i], f.RowSum[i], f.NegShare[i] = st.NEff, st.FirstShare, st.RowSum, st.NegShare
		if sc != nil {
			sc.g[r] = st.AbsSum // Σ|W| until G replaces it below
		}
	}
	if sc == nil {
		return nil
	}
	pi, G, c, vs, ws, M := sc.pi, sc.g, sc.c, sc.vs, sc.ws, sc.m
	// shifted values V′ = V − c, c the mean value over the tile's keys
	clear(c)
	for s := 0; s < wd; s++ {
		for j, x := range tile.V[s*tile.VStride:][:dv] {
			c[j] += float64(x)
		}
	}
	for s := 0; s < wd; s++ {
		var q float64
		for j, x := range tile.V[s*tile.VStride:][:dv] {
			d := float64(x) - c[j]/float64(wd)
			vs[s*dv+j] = float32(d)
			q += d * d
		}
		ws[s] = q
	}
	// the weights π of each row (EffAttnWeightsOf's, from the row's sums)
	// and G = Σ_s π_s w_s in one pass; NaN marks an undefined row
	defined := false
	for r := 0; r < n; r++ {
		t := tile.Q0 + r
		w, p := tile.Row(r), pi[r*wd:(r+1)*wd]
		clear(p[t+1:])
		i := at + t
		var g float64
		switch abs, sum, ns := G[r], f.RowSum[i], f.NegShare[i]; {
		case f.Opt.Weights == WeightsAbs && abs > 0:
			inv := 1 / abs
			for s, x := range w {
				y := float32(math.Abs(float64(x)) * inv)
				p[s] = y
				g += float64(y) * ws[s]
			}
		case f.Opt.Weights == WeightsSigned && sum != 0 && (ns == 0 || ns == 1):
			inv := 1 / sum
			for s, x := range w {
				y := float32(float64(x) * inv)
				p[s] = y
				g += float64(y) * ws[s]
			}
		default:
			clear(p)
			g = math.NaN()
		}
		G[r] = g
		defined = defined || !math.IsNaN(g)
	}
	if !defined {
		return nil
	}
	// M = Π·V′ = m − c (Σπ = 1)
	blas32.Implementation().Sgemm(blas.NoTrans, blas.NoTrans, n, dv, wd, 1, pi, wd, vs, dv, 0, M, dv)
	for r := 0; r < n; r++ {
		g := G[r]
		if math.IsNaN(g) {
			continue
		}
		t := tile.Q0 + r
		p := pi[r*wd : r*wd+t+1]
		var mc float64
		for _, x := range M[r*dv : (r+1)*dv] {
			mc += float64(x) * float64(x)
		}
		sum := g - mc
		if !(sum >= 0.01*g) {
			sc.e, sc.s = grow(sc.e, dv), grow(sc.s, dv)
			e, S := sc.e, sc.s
			MomentsStrided(e, S, nil, p, tile.V, tile.VStride, TwoPass)
			sum = Mean(S) * float64(dv)
		}
		sm := sum / float64(dv)
		// 1/Σπ² = n_eff^W for either weighting where it is defined
		lam := LambdaREML(f.NEffW[at+t], sm, f.Opt.Nu, f.Opt.Sigma02)
		i := at + t
		f.SMeanW[i], f.LambdaObsW[i], f.KW[i] = sm, lam, KalmanGain(lam, f.Opt.Prior)
	}
	return nil
}

// gdnScratch is ConsumeDelta's per-call scratch, reused through a pool.
type gdnScratch struct {
	pi   []float32 // [rows, width] weights π
	g    []float64 // [rows] Σ π_s w_s (NaN: undefined)
	c    []float64 // [d_v] the shift
	vs   []float32 // [width, d_v] shifted values
	ws   []float64 // [width] ‖v_s − c‖²
	m    []float32 // [rows, d_v] m − c
	e, s []float64 // [d_v] two-pass fallback
}

// grow returns x resliced to n, reallocated when its capacity is short.
func grow[E any](x []E, n int) []E {
	if cap(x) < n {
		return make([]E, n)
	}
	return x[:n]
}
