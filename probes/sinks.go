package probes

import (
	"fmt"
	"math"
	"slices"

	"github.com/filterlens/probe/hooks"
)

// Standard measurements of the attention-sink and long-context literature,
// per (layer, head) of the softmax layers, from the streamed rows (never a
// T×T matrix):
//
//	first-token attention  ā_0 = mean over applicable queries t of α[t, 0]
//	                       (Gu et al. 2024, "When Attention Sink Emerges in
//	                       Language Models", α_1^{l,h}); SinkRate is their
//	                       Sink_1^ε = % of (layer, head) with ā_0 > ε
//	entropy                H_t = −Σ_j α_tj ln α_tj (nats), its mean over
//	                       queries, and the mean of H_t / ln(visible keys)
//	fading                 the mean over queries of max_j α_tj (all queries,
//	                       and the last quarter t ≥ T − ⌊T/4⌋)
//	n_eff                  mean over queries of 1/Σ_j α_tj² (Kish)
//	sink mass              mean over queries of σ_t, the weight of the
//	                       dropped sink column of a model with learned
//	                       sinks (gpt-oss; 0 without)
//
// On a model with learned sinks the rows sum to 1 − σ_t; SinkRows says
// whether the measurements above read them as they are or renormalised
// over the tokens (α/Σα, the default; see SinkRows).
//
// A query t of a sliding-window layer (window w: keys t−w+1 … t) with
// t ≥ w cannot see position 0: its weight there is exactly 0 by
// construction, not by the model's choice, so it is "not applicable" to
// ā_0 and counted in LeftOut instead; every other measurement uses every
// query.

// SinkCollector accumulates the sink measurements of every softmax layer
// and head over the rows streamed to it (a hooks.AttnConsumer; register it
// with hooks.Set.Stream on the softmax layers). Accumulators are per
// (batch, layer, head), so concurrent tiles of different sequences never
// share one; Heads pools the batch.
type SinkCollector struct {
	B, L, H, T int
	// Window[l] is layer l's sliding window (0: none).
	Window []int
	// IncludeFirstQuery counts query 0 (whose row is α[0,0] = 1) in ā_0,
	// as Gu et al.'s mean over every query does; false averages over
	// t ≥ 1 only.
	IncludeFirstQuery bool
	// SinkRows selects the rows of a model with learned sinks that the
	// measurements read (default RenormRows: α/Σα); σ is accumulated as
	// the model computed it either way.
	SinkRows SinkRows

	acc []sinkAcc // [B, L, H]
}

type sinkAcc struct {
	rows, firstN, leftOut, normN, lastN      int64
	first, ent, entNorm, maxW, maxLast, neff float64
	sink                                     float64
}

// NewSinkCollector returns a SinkCollector for B sequences of T tokens
// through nLayers layers of H heads, with per-layer windows (nil: none).
func NewSinkCollector(B, nLayers, H, T int, window []int, includeFirstQuery bool) (*SinkCollector, error) {
	if B <= 0 || nLayers <= 0 || H <= 0 || T <= 0 {
		return nil, fmt.Errorf("probes: sink collector needs B, layers, heads, T > 0 (got %d, %d, %d, %d)", B, nLayers, H, T)
	}
	if window == nil {
		window = make([]int, nLayers)
	}
	if len(window) != nLayers {
		return nil, fmt.Errorf("probes: sink collector: %d windows for %d layers", len(window), nLayers)
	}
	return &SinkCollector{B: B, L: nLayers, H: H, T: T, Window: window, IncludeFirstQuery: includeFirstQuery,
		acc: make([]sinkAcc, B*nLayers*H)}, nil
}

// ConsumeAttn adds the tile's rows, walking each row's visible weights
// once (a logarithm per weight for the entropy).
func (c *SinkCollector) ConsumeAttn(tile *hooks.AttnTile) error {
	a, err := c.accOf(tile)
	if err != nil {
		return err
	}
	renorm := tile.Sink != nil && c.SinkRows == RenormRows
	for r := 0; r < tile.Rows; r++ {
		t := tile.Q0 + r
		row := tile.Row(r)
		lo := c.lo(tile.Layer, t)
		scale := 1.0 // 1/Σα for renormalised rows
		if renorm {
			var s1 float64
			for _, x := range row[lo:] {
				s1 += float64(x)
			}
			scale = 1 / s1
		}
		var h, m, s2 float64
		for _, x := range row[lo:] {
			f := float64(x) * scale
			if f > 0 {
				h -= f * math.Log(f)
			}
			m = max(m, f)
			s2 += f * f
		}
		c.add(a, t, lo, float64(row[0])*scale, h, m, s2, float64(tile.SinkMass(r)))
	}
	return nil
}

// ConsumeMoments implements hooks.MomentsConsumer: the entropy and Σα² of
// each row come from the attention's own softmax pass (AttnMoments), so
// only the largest weight and α_0 are read from the row — no logarithm
// per weight.
func (c *SinkCollector) ConsumeMoments(am *hooks.AttnMoments) error {
	tile := am.Tile
	a, err := c.accOf(tile)
	if err != nil {
		return err
	}
	renorm := tile.Sink != nil && c.SinkRows == RenormRows
	for r := 0; r < tile.Rows; r++ {
		t := tile.Q0 + r
		row := tile.Row(r)
		lo := c.lo(tile.Layer, t)
		a0, h, m, s2 := float64(row[0]), am.Entropy[r], float64(maxWeight(row[lo:])), am.SumSq[r]
		if renorm { // α' = α/s1: H' = H/s1 + ln s1, Σα'² = Σα²/s1²
			s1 := am.SumAlpha[r]
			a0, h, m, s2 = a0/s1, h/s1+math.Log(s1), m/s1, s2/(s1*s1)
		}
		c.add(a, t, lo, a0, h, m, s2, float64(tile.SinkMass(r)))
	}
	return nil
}

// maxWeight returns the largest of the non-negative weights w (0 if empty),
// four at a time with plain comparisons (a rarely taken branch each),
// faster than the NaN-aware builtin max.
func maxWeight(w []float32) float32 {
	var m0, m1, m2, m3 float32
	j := 0
	for ; j+4 <= len(w); j += 4 {
		x := w[j : j+4 : j+4]
		if x[0] > m0 {
			m0 = x[0]
		}
		if x[1] > m1 {
			m1 = x[1]
		}
		if x[2] > m2 {
			m2 = x[2]
		}
		if x[3] > m3 {
			m3 = x[3]
		}
	}
	for ; j < len(w); j++ {
		if w[j] > m0 {
			m0 = w[j]
		}
	}
	return max(m0, m1, m2, m3)
}

// MomentsSumOnly implements hooks.SumOnlyConsumer: the collector uses no
// per-dimension moments, so the attention forms the cheapest ones.
func (c *SinkCollector) MomentsSumOnly() bool { return true }

// accOf checks the tile against the collector's shape and returns its
// (batch, layer, head) accumulator.
func (c *SinkCollector) accOf(tile *hooks.AttnTile) (*sinkAcc, error) {
	if tile.Batch >= c.B || tile.Layer >= c.L || tile.Head >= c.H || tile.T != c.T {
		return nil, fmt.Errorf("probes: sink collector sized for B=%d, %d layers, %d heads, T=%d got a tile of batch %d, layer %d, head %d, T=%d",
			c.B, c.L, c.H, c.T, tile.Batch, tile.Layer, tile.Head, tile.T)
	}
	return &c.acc[(tile.Batch*c.L+tile.Layer)*c.H+tile.Head], nil
}

// lo is the first key query t of layer l can see.
func (c *SinkCollector) lo(l, t int) int {
	if w := c.Window[l]; w > 0 && t-w+1 > 0 {
		return t - w + 1
	}
	return 0
}

// add accumulates one row: query t, first visible key lo, weight a0 on
// position 0, entropy h, largest weight m, Σα² s2, sink mass sink.
func (c *SinkCollector) add(a *sinkAcc, t, lo int, a0, h, m, s2, sink float64) {
	a.rows++
	a.sink += sink
	a.ent += h
	a.maxW += m
	a.neff += 1 / s2
	if vis := t - lo + 1; vis > 1 {
		a.entNorm += h / math.Log(float64(vis))
		a.normN++
	}
	if t >= c.T-c.T/4 {
		a.maxLast += m
		a.lastN++
	}
	switch {
	case lo > 0:
		a.leftOut++
	case t == 0 && !c.IncludeFirstQuery:
	default:
		a.first += a0
		a.firstN++
	}
}

// SinkHead is the pooled (over the batch) measurement of one (layer, head).
type SinkHead struct {
	Layer, Head int
	Rows        int64   // queries measured
	BOSN        int64   // queries in BOSMass
	LeftOut     int64   // queries that cannot see position 0 (sliding window)
	BOSMass     float64 // ā_0; NaN when no query is applicable
	Entropy     float64 // mean H_t (nats)
	EntropyNorm float64 // mean H_t / ln(visible keys) over queries with ≥ 2 visible keys; NaN if none
	MaxWeight   float64 // mean max_j α_tj
	MaxLast     float64 // the same over t ≥ T − ⌊T/4⌋
	NEff        float64 // mean 1/Σ_j α_tj²
	SinkMass    float64 // mean σ_t, the dropped sink column's weight (0 without sinks)
}

// Heads returns the pooled measurements of the given layers, in (layer,
// head) order.
func (c *SinkCollector) Heads(layers []int) []SinkHead {
	var out []SinkHead
	for _, l := range layers {
		for h := 0; h < c.H; h++ {
			var p sinkAcc
			for b := 0; b < c.B; b++ {
				a := c.acc[(b*c.L+l)*c.H+h]
				p.rows += a.rows
				p.firstN += a.firstN
				p.leftOut += a.leftOut
				p.normN += a.normN
				p.lastN += a.lastN
				p.first += a.first
				p.ent += a.ent
				p.entNorm += a.entNorm
				p.maxW += a.maxW
				p.maxLast += a.maxLast
				p.neff += a.neff
				p.sink += a.sink
			}
			n := float64(p.rows)
			out = append(out, SinkHead{Layer: l, Head: h, Rows: p.rows, BOSN: p.firstN, LeftOut: p.leftOut,
				BOSMass: ratio(p.first, p.firstN), Entropy: p.ent / n, EntropyNorm: ratio(p.entNorm, p.normN),
				MaxWeight: p.maxW / n, MaxLast: ratio(p.maxLast, p.lastN), NEff: p.neff / n, SinkMass: p.sink / n})
		}
	}
	return out
}

func ratio(s float64, n int64) float64 {
	if n == 0 {
		return math.NaN()
	}
	return s / float64(n)
}

// GateStats are the output-gate statistics of one head (Qiu et al.'s
// gated attention; Qwen3.5's softmax layers), over every gate value of the
// head in a pass: every (sequence, token) and, for an element-wise gate,
// every dimension.
type GateStats struct {
	Mean, Median float64
	Below        float64 // fraction of values < the threshold (Qiu et al.'s sparsity, 0.1)
	First        float64 // mean over the values at token 0
	Rest         float64 // mean over the values at tokens ≥ 1 (NaN for T = 1)
}

// HeadGateStats computes GateStats of head h from a layer's gate values g
// [B, T, H, per] (per = 1 headwise, d_head element-wise; the layout of
// blocks.{l}.attn.hook_gate) with threshold below. scratch is reused for
// the exact median (it grows to B·T·per values). The median of an even
// count is the mean of the two middle values.
func HeadGateStats(g []float32, B, T, H, per, h int, below float64, scratch []float32) (GateStats, []float32) {
	if len(g) != B*T*H*per || h < 0 || h >= H {
		panic(fmt.Sprintf("probes: HeadGateStats: %d gate values for [B=%d, T=%d, H=%d, %d], head %d", len(g), B, T, H, per, h))
	}
	vals := scratch[:0]
	var sum, first, rest float64
	var nBelow int
	for b := 0; b < B; b++ {
		for t := 0; t < T; t++ {
			for _, x := range g[((b*T+t)*H+h)*per:][:per] {
				f := float64(x)
				vals = append(vals, x)
				sum += f
				if f < below {
					nBelow++
				}
				if t == 0 {
					first += f
				} else {
					rest += f
				}
			}
		}
	}
	n := len(vals)
	slices.Sort(vals)
	med := float64(vals[n/2])
	if n%2 == 0 {
		med = (float64(vals[n/2-1]) + float64(vals[n/2])) / 2
	}
	st := GateStats{Mean: sum / float64(n), Median: med, Below: float64(nBelow) / float64(n),
		First: first / float64(B*per), Rest: math.NaN()}
	if T > 1 {
		st.Rest = rest / float64(B*(T-1)*per)
	}
	return st, vals
}
