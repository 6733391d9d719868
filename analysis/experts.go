package analysis

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"gorgonia.org/tensor"

	"github.com/filterlens/probe/analysis/results"
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
	Loads  []results.ExpertLoadRow
	Layers []results.ExpertLayerRow
	Tokens []ExpertTokenRow
}

// ExpertSumRow holds the sums of one (layer, expert) over a set of
// sequences of length T, from which ExpertRows computes both tables: they
// add over sets of sequences (the pass files of probe experts hold one
// sequence's; PoolExpertSums adds samples). The router's entropy H and
// margin of each token are credited to the token's top-1 expert, so a
// layer's sums are those over its experts. Sequences and Tokens are the
// layer's, the same on each of its rows.
type ExpertSumRow struct {
	T                int     `parquet:"T"`
	Sample           int     `parquet:"sample"` // −1 once pooled over samples
	Layer            int     `parquet:"layer"`
	Expert           int     `parquet:"expert"`
	Experts          int     `parquet:"experts"`
	TopK             int     `parquet:"top_k"`
	Sequences        int64   `parquet:"sequences"` // position-0 tokens
	Tokens           int64   `parquet:"tokens"`
	Assignments      int64   `parquet:"assignments"`
	FirstAssignments int64   `parquet:"first_assignments"`
	Weight           float64 `parquet:"weight"`        // Σ routing weights given to the expert
	Top1First        int64   `parquet:"top1_first"`    // first tokens whose top-1 it is
	Top1Rest         int64   `parquet:"top1_rest"`     // other tokens whose top-1 it is
	EntropyFirst     float64 `parquet:"entropy_first"` // Σ H over those first tokens
	EntropyRest      float64 `parquet:"entropy_rest"`  // Σ H over those other tokens
	MarginFirst      float64 `parquet:"margin_first"`
	MarginRest       float64 `parquet:"margin_rest"`
}

// expertLayer accumulates one layer's routing: a sum row per expert.
type expertLayer struct {
	sums []ExpertSumRow
	idx  []float32 // the last pass's indices, paired with its weights
}

// ExpertHooks registers on hs the hooks that measure the routing of the
// passes that run with it, and returns the function that reports it after
// them and the number of the next pass's first sequence (for the
// per-token rows: the caller adds each pass's sequences). Every sparse
// layer of the model is measured; a model without one is refused.
func ExpertHooks(hs *hooks.Set, c *model.Config, opt ExpertOptions) (report func() *ExpertReport, seq *int, err error) {
	var tokens []ExpertTokenRow
	seq = new(int) // the first sequence of the next pass
	var tok *[]ExpertTokenRow
	if opt.PerToken {
		tok = &tokens
	}
	sums, err := expertSumHooks(hs, c, opt.Margin, tok, seq)
	if err != nil {
		return nil, nil, err
	}
	report = func() *ExpertReport {
		rep := &ExpertReport{Tokens: tokens}
		// by layer, sequence and position, however the passes split them
		slices.SortStableFunc(rep.Tokens, func(a, b ExpertTokenRow) int {
			return cmp.Or(cmp.Compare(a.Layer, b.Layer), cmp.Compare(a.Sequence, b.Sequence), cmp.Compare(a.Pos, b.Pos))
		})
		rep.Loads, rep.Layers = ExpertRows(sums())
		return rep
	}
	return report, seq, nil
}

// expertSumHooks registers on hs the routing hooks of every sparse layer
// and returns the function that gives their sums (by layer in pass order,
// then expert; T is the last pass's length). With tokens non-nil each
// token's row is appended to it, sequences numbered from *seq.
func expertSumHooks(hs *hooks.Set, c *model.Config, margin string, tokens *[]ExpertTokenRow, seq *int) (func() []ExpertSumRow, error) {
	if c.MoE == nil {
		return nil, fmt.Errorf("analysis: %s has no mixture-of-experts layers to measure", c.Arch)
	}
	switch margin {
	case "", results.MarginProb, results.MarginLogit:
	default:
		return nil, fmt.Errorf("analysis: margin %q: want %s or %s", margin, results.MarginProb, results.MarginLogit)
	}
	layers := map[int]*expertLayer{}
	var order []int
	at := func(l, T, E, K int) *expertLayer {
		s := layers[l]
		if s == nil {
			s = &expertLayer{sums: make([]ExpertSumRow, E)}
			for e := range s.sums {
				s.sums[e] = ExpertSumRow{Layer: l, Expert: e, Experts: E, TopK: K}
			}
			layers[l] = s
			order = append(order, l)
		}
		for e := range s.sums {
			s.sums[e].T = T
		}
		return s
	}
	hs.Add(hooks.MLPRouterLogits, func(_ string, l int, x *tensor.Dense) error {
		sh, z := x.Shape(), x.Data().([]float32)
		B, T, E := sh[0], sh[1], sh[2]
		s := at(l, T, E, c.MoE.TopK)
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
				if margin == results.MarginLogit {
					mg = float64(zr[i1] - zr[i2])
				}
			}
			t := r % T
			top := &s.sums[i1]
			if t == 0 {
				top.Top1First++
				top.EntropyFirst += h
				top.MarginFirst += mg
			} else {
				top.Top1Rest++
				top.EntropyRest += h
				top.MarginRest += mg
			}
			if tokens != nil {
				*tokens = append(*tokens, ExpertTokenRow{Sequence: *seq + r/T, Pos: t, Layer: l, Top1: i1, Entropy: h, Margin: mg})
			}
		}
		for e := range s.sums {
			s.sums[e].Tokens += int64(B * T)
			s.sums[e].Sequences += int64(B)
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
			s.sums[e].Assignments++
			if (i/K)%T == 0 {
				s.sums[e].FirstAssignments++
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
			s.sums[int(s.idx[i])].Weight += float64(w)
		}
		return nil
	})
	return func() []ExpertSumRow {
		var out []ExpertSumRow
		for _, l := range order {
			out = append(out, layers[l].sums...)
		}
		return out
	}, nil
}

// PoolExpertSums adds the sum rows of the same (T, layer, expert) over
// samples, in the order each first appears; the pooled rows have Sample −1.
func PoolExpertSums(rows []ExpertSumRow) []ExpertSumRow {
	type key struct{ T, l, e int }
	at := map[key]int{}
	var out []ExpertSumRow
	for _, r := range rows {
		k := key{r.T, r.Layer, r.Expert}
		i, ok := at[k]
		if !ok {
			r.Sample = -1
			at[k] = len(out)
			out = append(out, r)
			continue
		}
		p := &out[i]
		p.Sequences += r.Sequences
		p.Tokens += r.Tokens
		p.Assignments += r.Assignments
		p.FirstAssignments += r.FirstAssignments
		p.Weight += r.Weight
		p.Top1First += r.Top1First
		p.Top1Rest += r.Top1Rest
		p.EntropyFirst += r.EntropyFirst
		p.EntropyRest += r.EntropyRest
		p.MarginFirst += r.MarginFirst
		p.MarginRest += r.MarginRest
	}
	return out
}

// ExpertRows computes the load and layer rows from sum rows grouped by
// (T, layer), experts in order within a group (as expertSumHooks and
// PoolExpertSums give them). With N tokens, S sequences and k experts per
// token: load = assignments/(N·k), first_load = first_assignments/(S·k),
// rest_load over the other (N−S)·k, mean_weight = weight/assignments (NaN
// for an expert never chosen), first_top1 = top1_first/S, rest_top1 =
// top1_rest/(N−S); the layer's entropy and margin are the sums over its
// experts divided by N, S and N−S.
func ExpertRows(sums []ExpertSumRow) ([]results.ExpertLoadRow, []results.ExpertLayerRow) {
	var loads []results.ExpertLoadRow
	var layers []results.ExpertLayerRow
	for i := 0; i < len(sums); {
		j := i + 1
		for j < len(sums) && sums[j].T == sums[i].T && sums[j].Layer == sums[i].Layer {
			j++
		}
		g := sums[i:j]
		s0 := g[0]
		N, S := float64(s0.Tokens), float64(s0.Sequences)
		K := float64(s0.TopK)
		var entF, entR, mgF, mgR float64
		var t1F, t1R []int64
		for _, s := range g {
			row := results.ExpertLoadRow{T: s.T, Layer: s.Layer, Expert: s.Expert, Assignments: s.Assignments,
				Load: float64(s.Assignments) / (N * K), FirstLoad: float64(s.FirstAssignments) / (S * K),
				RestLoad:   float64(s.Assignments-s.FirstAssignments) / ((N - S) * K),
				MeanWeight: math.NaN(), FirstTop1: float64(s.Top1First) / S, RestTop1: float64(s.Top1Rest) / (N - S)}
			if s.Assignments > 0 {
				row.MeanWeight = s.Weight / float64(s.Assignments)
			}
			loads = append(loads, row)
			entF, entR, mgF, mgR = entF+s.EntropyFirst, entR+s.EntropyRest, mgF+s.MarginFirst, mgR+s.MarginRest
			t1F, t1R = append(t1F, s.Top1First), append(t1R, s.Top1Rest)
		}
		mode := 0
		for e := range t1F {
			if t1F[e] > t1F[mode] {
				mode = e
			}
		}
		layers = append(layers, results.ExpertLayerRow{
			T: s0.T, Layer: s0.Layer, Experts: s0.Experts, TopK: s0.TopK, Sequences: s0.Sequences, Tokens: s0.Tokens,
			Entropy: (entF + entR) / N, EntropyFirst: entF / S, EntropyRest: entR / (N - S),
			Margin: (mgF + mgR) / N, MarginFirst: mgF / S, MarginRest: mgR / (N - S),
			FirstMode: g[mode].Expert, FirstAgree: float64(t1F[mode]) / S, RestAgree: float64(t1R[mode]) / (N - S),
		})
		i = j
	}
	return loads, layers
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
