package probes

import (
	"fmt"
	"math"

	"gorgonia.org/tensor"

	"github.com/filterlens/probe/hooks"
)

// RWKV-7 read as a filter (Peng et al. 2025, "RWKV-7 Goose"; model/rwkv7.go).
// Per head, with S ∈ ℝ^{N×N} (row i: value index, column j: key index),
// S_0 = 0 and the removal key κ̂_t unit-L2,
//
//	S_t = S_{t−1} (diag(w_t) − κ̂_t (a_t ⊙ κ̂_t)ᵀ) + v_t k_tᵀ,   wkv_t = S_t r_t
//
// the generalised delta rule: forget per key channel (w_t ∈ (0, 1)^N),
// erase a fraction a_t (the in-context learning rate, per channel) of what
// the memory holds along κ̂_t, write v_t along k_t. Where k_t = a_t ⊙ κ̂_t
// it is exactly a delta-rule step S_t = S_{t−1} diag(w_t) + (v_t −
// S_{t−1}κ̂_t)(a_t ⊙ κ̂_t)ᵀ. A GDNFilter measures it per (layer, head,
// token) into the columns of Gated DeltaNet's:
//
//	Beta        g_t = κ̂_tᵀ diag(a_t) κ̂_t = Σ_j κ̂_tj² a_tj   the fraction of the memory's
//	            content along κ̂_t that the step erases (GainRemoval; GainMean: mean_j a_tj)
//	Decay       d_t = (Π_j w_tj)^{1/N}   the geometric mean of the channels' decays
//	            (DecaySummary; mean, min, max by option); Horizon 1/(1 − d_t) tokens
//	Innovation  ‖v_t − S_{t−1} diag(w_t) κ̂_t‖₂   the observation against the read-out of the
//	            predicted (decayed) memory at κ̂_t (InnovationDecayed), or
//	            ‖v_t − S_{t−1} κ̂_t‖₂, the read-out the step erases (InnovationUndecayed)
//	StateNorm   ‖S_t‖_F   after step t (float64 recurrence on the hooked w, k, v, κ̂, a)
//
// and from the exact effective attention rows M[t, 0..t] (wkv_t = Σ_s
// M[t,s] v_s; the model streams them as hooks.DeltaConsumer tiles with the
// head's v as values) the W-row columns, exactly as for Gated DeltaNet.
// Build it with NewGDNFilter(B, T, nLayers, layers, heads, N, N, opt) and
// RegisterRWKV.

// DecaySummary selects the per-head scalar that summarises RWKV-7's
// per-channel decay w_t ∈ (0, 1)^N in the decay column.
type DecaySummary int

const (
	// DecayGeoMean (default) is (Π_j w_j)^{1/N} = exp(mean_j log w_j): the
	// per-step factor of a scalar decay that shrinks the volume of the
	// state (det diag(w)) as w does; −1/log of it is 1/mean_j(−log w_j).
	DecayGeoMean DecaySummary = iota
	// DecayMean is mean_j w_j.
	DecayMean
	// DecayMin is min_j w_j, the fastest-forgetting channel.
	DecayMin
	// DecayMax is max_j w_j, the longest-remembering channel.
	DecayMax
)

// decaySummaries are the DecaySummary values' names and functions, in
// constant order.
var decaySummaries = [...]struct {
	name string
	of   func(w []float32) float64
}{
	DecayGeoMean: {"geomean", func(w []float32) float64 {
		var s float64
		for _, x := range w {
			s += math.Log(float64(x))
		}
		return math.Exp(s / float64(len(w)))
	}},
	DecayMean: {"mean", func(w []float32) float64 {
		var s float64
		for _, x := range w {
			s += float64(x)
		}
		return s / float64(len(w))
	}},
	DecayMin: {"min", func(w []float32) float64 {
		m := math.Inf(1)
		for _, x := range w {
			m = min(m, float64(x))
		}
		return m
	}},
	DecayMax: {"max", func(w []float32) float64 {
		m := math.Inf(-1)
		for _, x := range w {
			m = max(m, float64(x))
		}
		return m
	}},
}

// String returns the summary's name.
func (d DecaySummary) String() string {
	if d >= 0 && int(d) < len(decaySummaries) {
		return decaySummaries[d].name
	}
	return "DecaySummary(?)"
}

// Of returns the summary of one head's channel decays w.
func (d DecaySummary) Of(w []float32) float64 { return decaySummaries[d].of(w) }

// ParseDecaySummary parses "geomean", "mean", "min" or "max".
func ParseDecaySummary(s string) (DecaySummary, error) {
	for d := range decaySummaries {
		if decaySummaries[d].name == s {
			return DecaySummary(d), nil
		}
	}
	return 0, fmt.Errorf("decay summary %q: want geomean, mean, min or max", s)
}

// GainSummary selects the per-head scalar that summarises RWKV-7's
// in-context learning rate a_t ∈ (0, 1)^N in the beta (gain) column.
type GainSummary int

const (
	// GainRemoval (default) is κ̂ᵀ diag(a) κ̂ = Σ_j κ̂_j² a_j (κ̂ unit-L2): the
	// fraction of the memory's read-out along κ̂ that the step erases,
	// Gated DeltaNet's β exactly when a is the same in every channel.
	GainRemoval GainSummary = iota
	// GainMean is mean_j a_j.
	GainMean
)

// gainSummaries are the GainSummary values' names and functions.
var gainSummaries = [...]struct {
	name string
	of   func(a, kk []float32) float64
}{
	GainRemoval: {"removal", func(a, kk []float32) float64 {
		var s float64
		for j, x := range a {
			k := float64(kk[j])
			s += k * k * float64(x)
		}
		return s
	}},
	GainMean: {"mean", func(a, _ []float32) float64 {
		var s float64
		for _, x := range a {
			s += float64(x)
		}
		return s / float64(len(a))
	}},
}

// String returns the summary's name.
func (g GainSummary) String() string {
	if g >= 0 && int(g) < len(gainSummaries) {
		return gainSummaries[g].name
	}
	return "GainSummary(?)"
}

// Of returns the summary of one head's learning rates a with removal key kk.
func (g GainSummary) Of(a, kk []float32) float64 { return gainSummaries[g].of(a, kk) }

// ParseGainSummary parses "removal" or "mean".
func ParseGainSummary(s string) (GainSummary, error) {
	for g := range gainSummaries {
		if gainSummaries[g].name == s {
			return GainSummary(g), nil
		}
	}
	return 0, fmt.Errorf("gain summary %q: want removal or mean", s)
}

// RWKVRuleFilter runs the generalised delta rule of one (sequence, head)
// in float64, in the reference's order (sa = S_{t−1}κ̂_t; S[i,j] ←
// S[i,j]·w_t[j] − sa[i]·(a_t ⊙ κ̂_t)[j] + v_t[i]·k_t[j]), and writes per
// step t the innovation norm innov[t] (form InnovationDecayed:
// ‖v_t − S_{t−1} diag(w_t) κ̂_t‖₂; InnovationUndecayed: ‖v_t − S_{t−1} κ̂_t‖₂)
// and the state norm stateNorm[t] = ‖S_t‖_F after the update. Row t of w,
// k, v, kk (κ̂), a is at off + t·stride + [0, N) (the model's [B, T, H, N]
// hooks: stride H·N); S [N·N] (row-major, value index first) holds S_0 on
// entry and S_T on return. One pass over S per step, 6·N² multiply-adds;
// it does not allocate.
func RWKVRuleFilter(innov, stateNorm, S []float64, w, k, v, kk, a []float32, off, T, stride, N int, form InnovationForm) {
	if len(innov) < T || len(stateNorm) < T || len(S) != N*N {
		panic(fmt.Sprintf("probes: RWKVRuleFilter: T=%d N=%d with innov %d, stateNorm %d, S %d", T, N, len(innov), len(stateNorm), len(S)))
	}
	if T == 0 {
		return
	}
	if end := off + (T-1)*stride + N; len(w) < end || len(k) < end || len(v) < end || len(kk) < end || len(a) < end {
		panic(fmt.Sprintf("probes: RWKVRuleFilter: rows up to %d, got w %d, k %d, v %d, kk %d, a %d", end, len(w), len(k), len(v), len(kk), len(a)))
	}
	for t := 0; t < T; t++ {
		o := off + t*stride
		wt, kt, vt, kkt, at := w[o:o+N], k[o:o+N], v[o:o+N], kk[o:o+N], a[o:o+N]
		var in2, n2 float64
		for i := 0; i < N; i++ {
			row := S[i*N : (i+1)*N]
			var sa, sw float64 // S_{t−1}κ̂, S_{t−1} diag(w) κ̂ of row i
			for j, x := range row {
				q := x * float64(kkt[j])
				sa += q
				sw += q * float64(wt[j])
			}
			d := float64(vt[i]) - sw
			if form == InnovationUndecayed {
				d = float64(vt[i]) - sa
			}
			in2 += d * d
			vi := float64(vt[i])
			for j, x := range row {
				y := x*float64(wt[j]) - sa*float64(kkt[j])*float64(at[j]) + vi*float64(kt[j])
				row[j] = y
				n2 += y * y
			}
		}
		innov[t], stateNorm[t] = math.Sqrt(in2), math.Sqrt(n2)
	}
}

// RegisterRWKV adds f to hs for RWKV-7 layers: the effective-attention
// stream of every measured layer (unless Opt.NoRows) and functions at
// blocks.{l}.rwkv.hook_w, hook_k, hook_v, hook_a and hook_kk. The
// recurrence runs at hook_kk, which the model issues after the other four
// (and before it streams the rows); f reads their buffers as they then
// are, without copying them.
func (f *GDNFilter) RegisterRWKV(hs *hooks.Set) {
	for _, l := range f.Layers {
		if !f.Opt.NoRows {
			hs.Stream(l, f)
		}
		var w, k, v, a []float32
		keep := func(dst *[]float32) hooks.Func {
			return func(_ string, _ int, t *tensor.Dense) error {
				*dst = t.Data().([]float32)
				return nil
			}
		}
		hs.Add(hooks.Name(hooks.RWKVW, l), keep(&w))
		hs.Add(hooks.Name(hooks.RWKVK, l), keep(&k))
		hs.Add(hooks.Name(hooks.RWKVV, l), keep(&v))
		hs.Add(hooks.Name(hooks.RWKVA, l), keep(&a))
		hs.Add(hooks.Name(hooks.RWKVKK, l), func(name string, _ int, t *tensor.Dense) error {
			if w == nil || k == nil || v == nil || a == nil {
				return fmt.Errorf("probes: RWKV-7 filter: %s issued before hook_w, hook_k, hook_v and hook_a of layer %d", name, l)
			}
			err := f.SetRWKVLayer(l, w, k, v, t.Data().([]float32), a)
			w, k, v, a = nil, nil, nil, nil
			return err
		})
	}
}

// SetRWKVLayer records the gain (Beta, Opt.Gain's summary of a_t), the
// decay (Decay, Opt.Decay's summary of w_t; Horizon 1/(1 − decay)), the
// innovation and the state norm (RWKVRuleFilter) of every (sequence,
// head) of RWKV-7 layer l from the layer's hook values w, k, v, kk (κ̂)
// and a, each [B, T, H, N] (f's Dk and Dv are N). The heads run in
// parallel.
func (f *GDNFilter) SetRWKVLayer(l int, w, k, v, kk, a []float32) error {
	B, T, H, N := f.B, f.T, f.Hv, f.Dk
	if l < 0 || l >= len(f.slot) || f.slot[l] < 0 {
		return fmt.Errorf("probes: RWKV-7 filter: layer %d is not one of the measured layers %v", l, f.Layers)
	}
	if f.Dv != N {
		return fmt.Errorf("probes: RWKV-7 filter: d_key %d and d_value %d differ (an RWKV-7 head's state is N×N)", f.Dk, f.Dv)
	}
	n := B * T * H * N
	if len(w) != n || len(k) != n || len(v) != n || len(kk) != n || len(a) != n {
		return fmt.Errorf("probes: RWKV-7 filter layer %d: w %d, k %d, v %d, kk %d, a %d values, want [B=%d, T=%d, H=%d, N=%d] = %d",
			l, len(w), len(k), len(v), len(kk), len(a), B, T, H, N, n)
	}
	s := f.slot[l]
	eachHead(B*H, f.Opt.Threads, func() func(j int) {
		S := make([]float64, N*N)
		return func(j int) {
			b, h := j/H, j%H
			at := f.Index(b, s, h, 0)
			off := b*T*H*N + h*N
			for t := 0; t < T; t++ {
				o := off + t*H*N
				d := f.Opt.Decay.Of(w[o : o+N])
				f.Beta[at+t], f.Decay[at+t], f.Horizon[at+t] = f.Opt.Gain.Of(a[o:o+N], kk[o:o+N]), d, 1/(1-d)
			}
			clear(S)
			RWKVRuleFilter(f.Innovation[at:at+T], f.StateNorm[at:at+T], S, w, k, v, kk, a, off, T, H*N, N, f.Opt.Innovation)
		}
	})
	return nil
}
