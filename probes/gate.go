package probes

import (
	"fmt"
	"math"

	"gorgonia.org/tensor"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
)

// Gate overrides replace the learned output gate of a gated checkpoint
// (Qiu et al.'s gated attention, Qwen3.5's softmax layers) at inference
// time, for the intervention of the BFT paper's Prediction 3
// (arXiv:2605.18832, App. I; see KGate). The learned gate g[b, t, h] =
// sigmoid(x_t·W_θ[:, h]) sees only the normalized token; an override
// computes the gate of every (layer, head, query) from that query's own
// attention row instead. It is an ordinary intervention through hooks
// (Register): a consumer of the attention rows measures each row, and a
// function at blocks.{l}.attn.hook_gate, which runs after the layer's
// attention and before the gate multiplies the heads' outputs, writes the
// new gate.

// GateRow is what a GateFunc is told about one query row of one head.
type GateRow struct {
	Layer, Head  int
	Batch, Query int // batch entry and 0-based query position t
	// NEff is the Kish effective sample size 1/Σ_j α_tj² of the row
	// (BFT Sec. 3.1, Eq. 5), from the post-softmax, pre-gate weights.
	NEff float64
	// SBar is the weighted dispersion averaged over the head dimension,
	// S̄ = (1/d) Σ_i Σ_j α_tj (v_ji − e_ti)², e_ti = Σ_j α_tj v_ji (BFT
	// Eqs. 5–6; reduction (i) of notes 003 §B.4), from the head's value
	// vectors (the shared KV head's under grouped-query attention).
	SBar float64
	// Learned is the checkpoint's own gate σ(x_t·W_θ) for this (token,
	// head); for an element-wise gate, the mean of its d entries.
	Learned float64
}

// GateFunc maps one query row to the output gate of its head. It is
// called once per (layer, batch entry, query, head), from one goroutine,
// in that order (layers ascending; within a layer row-major over
// [batch, query, head]), after the layer's attention and before the gate
// multiplies the head's output.
type GateFunc func(r GateRow) float64

// GateOverride says how the output gate is replaced. With Func set, the
// gate of head h at query t of layer l is Func(GateRow{...}); with Func nil
// it is Const for every head and query (Const = 1 removes the gate; the
// zero value, Const = 0, silences every head). For an element-wise gate the
// one value replaces all d entries of the head. The gate enters the pass in
// float32.
type GateOverride struct {
	Func  GateFunc
	Const float64
}

// ConstGate returns the override that sets every gate to c (c = 1: no
// gate).
func ConstGate(c float64) *GateOverride { return &GateOverride{Const: c} }

// RowGate returns the override that computes every gate with f.
func RowGate(f GateFunc) *GateOverride { return &GateOverride{Func: f} }

// Register adds the override to hs for passes of B sequences of T tokens
// of a model of configuration cfg: the statistics consumer (when Func
// needs it) and the function at every layer's hook_gate. Register it
// before other functions at hook_gate, which then see the replaced gate.
// n_eff and S̄ are measured from the weights and values the pass multiplies
// (S by the fused moments of hooks.AttnMoments, which fall back to two
// passes on rows where the one-pass form would lose digits), before any
// hook_pattern intervention. Checkpoints without a learned output gate are
// refused.
func (g *GateOverride) Register(hs *hooks.Set, cfg *model.Config, B, T int) error {
	if !cfg.LearnedGate() {
		return fmt.Errorf("probes: a gate override needs a checkpoint with a learned attention output gate (Qiu et al.'s headwise_attn_output_gate / elementwise_attn_output_gate, Qwen3.5); this one is %s with gate %q", cfg.Arch, cfg.Gate)
	}
	if g.Func == nil && (math.IsNaN(g.Const) || math.IsInf(g.Const, 0)) {
		return fmt.Errorf("probes: constant gate override %v is not finite", g.Const)
	}
	st := &gateStats{T: T, H: cfg.Heads}
	if g.Func != nil {
		st.neff, st.sbar = make([]float64, B*T*cfg.Heads), make([]float64, B*T*cfg.Heads)
		hs.Stream(-1, st)
	}
	hs.Add(hooks.AttnGate, func(_ string, l int, x *tensor.Dense) error {
		return g.apply(l, x.Data().([]float32), cfg.GatePerHead(), B, T, cfg.Heads, st)
	})
	return nil
}

// apply replaces the layer's gate values (gate [B·T, H·gp], already
// through the sigmoid) by the override's.
func (g *GateOverride) apply(layer int, gate []float32, gp, B, T, H int, st *gateStats) error {
	for row := 0; row < B*T; row++ {
		for h := 0; h < H; h++ {
			gh := gate[(row*H+h)*gp : (row*H+h+1)*gp]
			v := g.Const
			if g.Func != nil {
				learned := float64(gh[0])
				if gp > 1 {
					learned = 0
					for _, x := range gh {
						learned += float64(x)
					}
					learned /= float64(gp)
				}
				i := row*H + h
				v = g.Func(GateRow{Layer: layer, Head: h, Batch: row / T, Query: row % T,
					NEff: st.neff[i], SBar: st.sbar[i], Learned: learned})
				if math.IsNaN(v) || math.IsInf(v, 0) {
					return fmt.Errorf("probes: gate override returned %v for layer %d head %d at batch %d query %d (n_eff %v, S̄ %v)",
						v, layer, h, row/T, row%T, st.neff[i], st.sbar[i])
				}
			}
			for k := range gh {
				gh[k] = float32(v)
			}
		}
	}
	return nil
}

// gateStats is the attention consumer of a gate override: it stores n_eff
// and S̄ of every streamed row of the current layer, [B·T·H] row-major over
// (batch, query, head); the layer's hook_gate reads them before the next
// layer overwrites them. Workers write disjoint (batch, head) entries.
type gateStats struct {
	T, H       int
	neff, sbar []float64
}

// ConsumeMoments takes a tile's moments from the attention pass.
func (s *gateStats) ConsumeMoments(am *hooks.AttnMoments) error {
	a := am.Tile
	d := a.DHead
	for r := 0; r < a.Rows; r++ {
		var sum float64
		for _, x := range am.S[r*d : (r+1)*d] {
			sum += x
		}
		i := (a.Batch*s.T+a.Q0+r)*s.H + a.Head
		s.neff[i], s.sbar[i] = 1/am.SumSq[r], sum/float64(d)
	}
	return nil
}

// ConsumeAttn measures a tile row by row, two-pass in float64 (the
// attention pass calls it instead of ConsumeMoments for tiles whose
// moments are not finite).
func (s *gateStats) ConsumeAttn(a *hooks.AttnTile) error {
	d := a.DHead
	e := make([]float64, d)
	S := make([]float64, d)
	for r := 0; r < a.Rows; r++ {
		row := a.Row(r)
		Moments(e, S, row, a.Value, TwoPass)
		i := (a.Batch*s.T+a.Q0+r)*s.H + a.Head
		s.neff[i], s.sbar[i] = NEff(row), Mean(S)
	}
	return nil
}
