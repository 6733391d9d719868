package analysis

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"gorgonia.org/tensor"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
)

// The routing of a mixture-of-experts model (model/moe.go), read from the
// hooks blocks.{l}.mlp.hook_router_logits z [batch, pos, E] and
// hook_expert_indices [batch, pos, k] of its sparse layers. With
// p = softmax(z) over all E experts (the router's distribution, whatever
// order of softmax and top-k the family routes with):
//
//	load(l, e)      = #{(token, slot) routed to e} / (N·k)       Σ_e load = 1
//	entropy(token)  = −Σ_e p_e ln p_e                            nats, ≤ ln E
//	margin(token)   = p₍₁₎ − p₍₂₎  (MarginProb)  or  z₍₁₎ − z₍₂₎ (MarginLogit)
//
// and the same loads over the first token of each sequence (position 0)
// and over the others: an expert the first tokens go to far more than the
// rest is the routing's counterpart of an attention sink.

// Margins of the top-1 choice (ExpertOptions.Margin).
const (
	MarginProb  = "prob"  // p₍₁₎ − p₍₂₎ of the softmax over all experts, in [0, 1]
	MarginLogit = "logit" // z₍₁₎ − z₍₂₎ of the router logits
)

// ExpertOptions are the options of an experts measurement.
type ExpertOptions struct {
	// Margin is how the top-1 margin is measured: MarginProb (default,
	// also for "") or MarginLogit.
	Margin string `json:"margin"`
	// PerToken keeps a row per (sequence, layer, position) (ExpertReport.Tokens).
	PerToken bool `json:"per_token"`
	// Batch is the number of sequences per forward pass of Experts (0:
	// all at once).
	Batch int `json:"batch"`
}

// ExpertLoadRow is one (layer, expert): the share of the routing
// assignments it received, over all tokens and over the first token of
// each sequence and the rest, and the mean routing weight it was given.
type ExpertLoadRow struct {
	Layer       int     `parquet:"layer"`
	Expert      int     `parquet:"expert"`
	Assignments int64   `parquet:"assignments"`
	Load        float64 `parquet:"load"`       // Assignments / (N·k)
	FirstLoad   float64 `parquet:"first_load"` // over the sequences' position 0
	RestLoad    float64 `parquet:"rest_load"`  // over positions ≥ 1
	MeanWeight  float64 `parquet:"mean_weight"`
}

// ExpertLayerRow is one sparse layer: the router's mean entropy and
// top-1 margin over all tokens, over the first tokens and over the rest,
// and the first tokens' top-1 expert: the one most of them pick (Mode),
// the share of sequences whose first token picks it, and the share of the
// other tokens that do.
type ExpertLayerRow struct {
	Layer        int     `parquet:"layer"`
	Experts      int     `parquet:"experts"`
	TopK         int     `parquet:"top_k"`
	Tokens       int64   `parquet:"tokens"`
	Entropy      float64 `parquet:"entropy"`
	EntropyFirst float64 `parquet:"entropy_first"`
	EntropyRest  float64 `parquet:"entropy_rest"`
	Margin       float64 `parquet:"margin"`
	MarginFirst  float64 `parquet:"margin_first"`
	MarginRest   float64 `parquet:"margin_rest"`
	FirstMode    int     `parquet:"first_top1_mode"`
	FirstAgree   float64 `parquet:"first_top1_agree"`
	RestAgree    float64 `parquet:"rest_top1_agree"`
}

// ExpertTokenRow is one token of one sparse layer (ExpertOptions.PerToken).
type ExpertTokenRow struct {
	Sequence int     `parquet:"sequence"`
	Pos      int     `parquet:"pos"`
	Layer    int     `parquet:"layer"`
	Top1     int     `parquet:"top1"`
	Entropy  float64 `parquet:"entropy"`
	Margin   float64 `parquet:"margin"`
}

// ExpertReport is the routing of a set of sequences, layers in order
// (tokens by layer, sequence, position).
type ExpertReport struct {
	Loads  []ExpertLoadRow
	Layers []ExpertLayerRow
	Tokens []ExpertTokenRow
}

// expertLayer accumulates one layer's routing.
type expertLayer struct {
	E, K                 int
	count, first, weight []float64 // per expert: assignments, those of position 0, routing weights
	tokens, firsts       int64
	ent, entFirst        float64
	margin, marginFirst  float64
	firstTop1, restTop1  []int64   // per expert: first tokens / other tokens whose top-1 it is
	idx                  []float32 // the last pass's indices, paired with its weights
}

// ExpertHooks registers on hs the hooks that measure the routing of the
// passes that run with it, and returns the function that reports it after
// them and the number of the next pass's first sequence (for the
// per-token rows: the caller adds each pass's sequences). Every sparse
// layer of the model is measured; a model without one is refused.
func ExpertHooks(hs *hooks.Set, c *model.Config, opt ExpertOptions) (report func() *ExpertReport, seq *int, err error) {
	if c.MoE == nil {
		return nil, nil, fmt.Errorf("analysis: %s has no mixture-of-experts layers to measure", c.Arch)
	}
	switch opt.Margin {
	case "", MarginProb, MarginLogit:
	default:
		return nil, nil, fmt.Errorf("analysis: margin %q: want %s or %s", opt.Margin, MarginProb, MarginLogit)
	}
	layers := map[int]*expertLayer{}
	var order []int
	var tokens []ExpertTokenRow
	seq = new(int) // the first sequence of the next pass
	at := func(l, E, K int) *expertLayer {
		s := layers[l]
		if s == nil {
			s = &expertLayer{E: E, K: K, count: make([]float64, E), first: make([]float64, E), weight: make([]float64, E),
				firstTop1: make([]int64, E), restTop1: make([]int64, E)}
			layers[l] = s
			order = append(order, l)
		}
		return s
	}
	hs.Add(hooks.MLPRouterLogits, func(_ string, l int, x *tensor.Dense) error {
		sh, z := x.Shape(), x.Data().([]float32)
		B, T, E := sh[0], sh[1], sh[2]
		s := at(l, E, c.MoE.TopK)
		p := make([]float64, E)
		for r := 0; r < B*T; r++ {
			zr := z[r*E : (r+1)*E]
			m := math.Inf(-1)
			for _, v := range zr {
				m = math.Max(m, float64(v))
			}
			sum := 0.0
			for e, v := range zr {
				p[e] = math.Exp(float64(v) - m)
				sum += p[e]
			}
			h, i1, i2 := 0.0, -1, -1
			for e := range p {
				p[e] /= sum
				if p[e] > 0 {
					h -= p[e] * math.Log(p[e])
				}
				switch {
				case i1 < 0 || p[e] > p[i1]:
					i1, i2 = e, i1
				case i2 < 0 || p[e] > p[i2]:
					i2 = e
				}
			}
			mg := 1.0 // one expert: nothing to compete with
			if i2 >= 0 {
				mg = p[i1] - p[i2]
				if opt.Margin == MarginLogit {
					mg = float64(zr[i1] - zr[i2])
				}
			}
			t := r % T
			s.tokens++
			s.ent += h
			s.margin += mg
			if t == 0 {
				s.firsts++
				s.entFirst += h
				s.marginFirst += mg
				s.firstTop1[i1]++
			} else {
				s.restTop1[i1]++
			}
			if opt.PerToken {
				tokens = append(tokens, ExpertTokenRow{Sequence: *seq + r/T, Pos: t, Layer: l, Top1: i1, Entropy: h, Margin: mg})
			}
		}
		return nil
	})
	// the indices come before the weights in the pass: kept until the
	// weights' hook adds each weight to its expert
	hs.Add(hooks.MLPExpertIndices, func(_ string, l int, x *tensor.Dense) error {
		s := layers[l]
		if s == nil {
			return fmt.Errorf("analysis: expert indices of layer %d before its router logits", l)
		}
		sh, idx := x.Shape(), x.Data().([]float32)
		T, K := sh[1], sh[2]
		for i, v := range idx {
			e := int(v)
			s.count[e]++
			if (i/K)%T == 0 {
				s.first[e]++
			}
		}
		s.idx = append(s.idx[:0], idx...)
		return nil
	})
	hs.Add(hooks.MLPExpertWeights, func(_ string, l int, x *tensor.Dense) error {
		s := layers[l]
		if s == nil || len(s.idx) != len(x.Data().([]float32)) {
			return fmt.Errorf("analysis: expert weights of layer %d without its indices", l)
		}
		for i, w := range x.Data().([]float32) {
			s.weight[int(s.idx[i])] += float64(w)
		}
		return nil
	})
	report = func() *ExpertReport {
		rep := &ExpertReport{Tokens: tokens}
		// by layer, sequence and position, however the passes split them
		slices.SortStableFunc(rep.Tokens, func(a, b ExpertTokenRow) int {
			return cmp.Or(cmp.Compare(a.Layer, b.Layer), cmp.Compare(a.Sequence, b.Sequence), cmp.Compare(a.Pos, b.Pos))
		})
		for _, l := range order {
			s := layers[l]
			n := float64(s.tokens * int64(s.K))
			nf := float64(s.firsts * int64(s.K))
			rest := max(s.tokens-s.firsts, 0)
			mode := 0
			for e := range s.firstTop1 {
				if s.firstTop1[e] > s.firstTop1[mode] {
					mode = e
				}
			}
			for e := 0; e < s.E; e++ {
				row := ExpertLoadRow{Layer: l, Expert: e, Assignments: int64(s.count[e]), Load: s.count[e] / n,
					FirstLoad: s.first[e] / nf, RestLoad: (s.count[e] - s.first[e]) / (n - nf), MeanWeight: math.NaN()}
				if s.count[e] > 0 {
					row.MeanWeight = s.weight[e] / s.count[e]
				}
				rep.Loads = append(rep.Loads, row)
			}
			rep.Layers = append(rep.Layers, ExpertLayerRow{
				Layer: l, Experts: s.E, TopK: s.K, Tokens: s.tokens,
				Entropy: s.ent / float64(s.tokens), EntropyFirst: s.entFirst / float64(s.firsts),
				EntropyRest: (s.ent - s.entFirst) / float64(rest),
				Margin:      s.margin / float64(s.tokens), MarginFirst: s.marginFirst / float64(s.firsts),
				MarginRest: (s.margin - s.marginFirst) / float64(rest),
				FirstMode:  mode, FirstAgree: float64(s.firstTop1[mode]) / float64(s.firsts),
				RestAgree: float64(s.restTop1[mode]) / float64(rest),
			})
		}
		return rep
	}
	return report, seq, nil
}

// Experts runs m on the sequences ids (opt.Batch at a time) and measures
// the routing of its mixture-of-experts layers (ExpertHooks); the passes
// run every block but not the LM head.
func Experts(m *model.Model, ids [][]int, opt ExpertOptions) (*ExpertReport, error) {
	hs := &hooks.Set{}
	report, seq, err := ExpertHooks(hs, &m.Config, opt)
	if err != nil {
		return nil, err
	}
	batch := opt.Batch
	if batch <= 0 {
		batch = len(ids)
	}
	for b := 0; b < len(ids); b += batch {
		part := ids[b:min(b+batch, len(ids))]
		if _, err := m.Forward(part, model.Options{Hooks: hs}); err != nil {
			return nil, err
		}
		*seq += len(part)
	}
	return report(), nil
}
