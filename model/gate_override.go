package model

import (
	"fmt"
	"math"

	"github.com/filterlens/probe/hooks"
)

// Gate overrides replace the learned output gate of a Qiu et al. gated
// checkpoint (gated.go) at inference time, for the intervention of the BFT
// paper's Prediction 3 (arXiv:2605.18832, App. I):
//
//	"Replacing the frozen gate with the adaptive K_BFT at inference time
//	should improve performance at extrapolation lengths T > T_train and
//	roughly match the gate at T = T_train, with the improvement growing
//	monotonically in T − T_train."
//
// The learned gate g[b, t, h] = sigmoid(x_t·W_θ[:, h]) sees only the
// normalized token; an override computes the gate of every (layer, head,
// query) from that query's own attention row instead. The model measures
// the row and a caller-supplied GateFunc maps the measurements to a gate
// (package probes supplies the BFT Kalman-gain mappings; this package does
// not import it).

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

// GateOverride says how the output gate of a gated checkpoint is replaced
// in ForwardGate. With Func set, the gate of head h at query t of layer l
// is Func(GateRow{...}); with Func nil it is Const for every head and
// query (Const = 1 removes the gate; the zero value, Const = 0, silences
// every head). For an element-wise gate the one value replaces all d
// entries of the head. The gate enters the pass in float32.
type GateOverride struct {
	Func  GateFunc
	Const float64
}

// ConstGate returns the override that sets every gate to c (c = 1: no
// gate).
func ConstGate(c float64) *GateOverride { return &GateOverride{Const: c} }

// RowGate returns the override that computes every gate with f.
func RowGate(f GateFunc) *GateOverride { return &GateOverride{Func: f} }

// ForwardGate is Forward with the learned output gate replaced as g says.
// n_eff and S̄ are measured from the same attention weights and values the
// pass multiplies (float64 sums of the float32 weights; S by the fused
// moments of AttnMoments, which fall back to two passes on rows where the
// one-pass form would lose digits), before any hook_pattern intervention.
// The hook_gate point sees the replaced gate, so a hook can still change
// it. A nil g is Forward. Checkpoints without a Qiu output gate are refused.
// Forward itself is untouched by this: its results are the same, bit for
// bit, as before gate overrides existed.
func (m *Model) ForwardGate(ids [][]int, opt Options, g *GateOverride) (*Output, error) {
	if g == nil {
		return m.Forward(ids, opt)
	}
	if _, own := m.ext.(ownPass); own || m.GatePerHead() == 0 {
		return nil, fmt.Errorf("model: a gate override needs a checkpoint with a Qiu et al. attention output gate (headwise_attn_output_gate or elementwise_attn_output_gate); %s is %s with gate %q",
			m.describe(), m.Arch, m.Gate)
	}
	if g.Func == nil && (math.IsNaN(g.Const) || math.IsInf(g.Const, 0)) {
		return nil, fmt.Errorf("model: constant gate override %v is not finite", g.Const)
	}
	if err := m.checkHooks(opt.Hooks); err != nil {
		return nil, err
	}
	return m.forward(ids, opt, &gateRun{g: g})
}

// describe names the model in errors: its folder, or "the model".
func (m *Model) describe() string {
	if m.Dir != "" {
		return m.Dir
	}
	return "the model"
}

// gateRun is the state of one ForwardGate pass: the per-row statistics of
// the current layer, [B·T·H] row-major over (batch, query, head), written
// by the attention workers through rowStats.
type gateRun struct {
	g          *GateOverride
	T, H       int
	neff, sbar []float64
}

// consumers returns the layer's attention consumers with the statistics
// consumer added (when a GateFunc needs it), in a new slice.
func (r *gateRun) consumers(c []hooks.AttnConsumer, B, T, H int) []hooks.AttnConsumer {
	if r.g.Func == nil {
		return c
	}
	r.T, r.H = T, H
	if n := B * T * H; len(r.neff) != n {
		r.neff, r.sbar = make([]float64, n), make([]float64, n)
	}
	return append(append(make([]hooks.AttnConsumer, 0, len(c)+1), c...), (*rowStats)(r))
}

// apply replaces the layer's gate values (gate [B·T, H·gp], already
// through the sigmoid) by the override's.
func (r *gateRun) apply(layer int, gate []float32, gp, B, T, H int) error {
	for row := 0; row < B*T; row++ {
		for h := 0; h < H; h++ {
			gh := gate[(row*H+h)*gp : (row*H+h+1)*gp]
			v := r.g.Const
			if r.g.Func != nil {
				learned := float64(gh[0])
				if gp > 1 {
					learned = 0
					for _, x := range gh {
						learned += float64(x)
					}
					learned /= float64(gp)
				}
				i := row*H + h
				v = r.g.Func(GateRow{Layer: layer, Head: h, Batch: row / T, Query: row % T,
					NEff: r.neff[i], SBar: r.sbar[i], Learned: learned})
				if math.IsNaN(v) || math.IsInf(v, 0) {
					return fmt.Errorf("model: gate override returned %v for layer %d head %d at batch %d query %d (n_eff %v, S̄ %v)",
						v, layer, h, row/T, row%T, r.neff[i], r.sbar[i])
				}
			}
			for k := range gh {
				gh[k] = float32(v)
			}
		}
	}
	return nil
}

// rowStats is the attention consumer of a gateRun: it stores n_eff and S̄
// of every streamed row. Workers write disjoint (batch, head) entries.
type rowStats gateRun

// ConsumeMoments takes a tile's moments from the attention pass.
func (s *rowStats) ConsumeMoments(am *AttnMoments) error {
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
func (s *rowStats) ConsumeAttn(a *hooks.AttnTile) error {
	d := a.DHead
	e := make([]float64, d)
	for r := 0; r < a.Rows; r++ {
		row := a.Row(r)
		clear(e)
		var s2 float64
		for j, x := range row {
			aj := float64(x)
			s2 += aj * aj
			for k, v := range a.Value(j) {
				e[k] += aj * float64(v)
			}
		}
		var sum float64
		for j, x := range row {
			aj := float64(x)
			for k, v := range a.Value(j) {
				dv := float64(v) - e[k]
				sum += aj * dv * dv
			}
		}
		i := (a.Batch*s.T+a.Q0+r)*s.H + a.Head
		s.neff[i], s.sbar[i] = 1/s2, sum/float64(d)
	}
	return nil
}
