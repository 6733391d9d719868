package analysis

import (
	"fmt"
	"math"
	"slices"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

// GDNRun is one `probe gdn` run: one forward pass per chunk of the stream
// with a probes.GDNFilter on every Gated DeltaNet layer, one pass file
// per chunk in Out/passes, then the tables gdn and gdn_heads (Parquet
// and/or CSV) and gdn_manifest.json in Out. Like a sweep it resumes
// (finished pass files are kept) and runs one Shard of the passes
// (combined by MergeStream); Force runs into a folder that records
// another plan.
type GDNRun struct {
	RunSpec
	Options results.GDNOptions
}

// Run runs the passes and, unsharded, writes the tables, returning the
// manifest and the rows of gdn (none for a shard); on a failure after the
// output folder exists the manifest records the error.
func (r *GDNRun) Run() (*results.GDNManifest, []results.GDNRow, error) {
	o := &r.Options
	if o.Innovation == "" {
		o.Innovation = probes.InnovationDecayed.String()
	}
	if o.Weights == "" {
		o.Weights = probes.WeightsAbs.String()
	}
	if o.RWKVDecay == "" {
		o.RWKVDecay = probes.DecayGeoMean.String()
	}
	if o.RWKVGain == "" {
		o.RWKVGain = probes.GainRemoval.String()
	}
	if o.Disjoint == "" {
		o.Disjoint = DisjointAll
	}
	if o.Placement == "" {
		o.Placement = PlaceSequential
	}
	if _, err := probes.ParseInnovationForm(o.Innovation); err != nil {
		return nil, nil, err
	}
	if _, err := probes.ParseEffAttnWeights(o.Weights); err != nil {
		return nil, nil, err
	}
	if _, err := probes.ParseDecaySummary(o.RWKVDecay); err != nil {
		return nil, nil, err
	}
	if _, err := probes.ParseGainSummary(o.RWKVGain); err != nil {
		return nil, nil, err
	}
	m, rec, err := r.open("gdn", o.StreamPlan, 0)
	if err != nil {
		return nil, nil, err
	}
	c := &m.Config
	layers, _ := recurrentLayers(c)
	if layers == nil {
		return nil, nil, fmt.Errorf("%s: %s has no Gated DeltaNet, Mamba-2 or RWKV-7 layers (probe gdn measures recurrent mixers; use probe diag or probe sinks for softmax layers)", r.Dir, c.Arch)
	}
	man := &results.GDNManifest{RunRecord: rec, Layers: layers, Options: *o}
	man.Conventions = gdnConventions()
	var rows []results.GDNRow
	err = runStream(man, streamRun{RunSpec: &r.RunSpec, tables: gdnTables, opts: man.Options, model: m, forwards: 1,
		pass: func(ch results.Chunk, watch func(*hooks.Set)) ([]passTable, error) {
			hs := &hooks.Set{}
			f, fa, err := gdnFilters(hs, c, ch.T, *o, man.Threads)
			if err != nil {
				return nil, err
			}
			watch(hs)
			ids := [][]int{r.Stream[ch.Start:ch.End]}
			if _, err := m.Forward(ids, model.Options{Hooks: hs, AllowExtrapolation: o.AllowExtrapolation, TileRows: o.TileRows,
				Threads: man.Threads}); err != nil {
				return nil, err
			}
			_, kind := recurrentLayers(c)
			rows := appendGDNRows(nil, f, ch, kind)
			if fa != nil {
				rows = appendGDNRows(rows, fa, ch, results.MixerAttention)
			}
			return []passTable{tableOf("gdn", rows)}, nil
		},
		finish: func() (err error) { rows, err = finishGDN(r.Out, man); return err }})
	if err != nil {
		return man, nil, err
	}
	return man, rows, nil
}

// GDNFilter returns the probes.GDNFilter that probe gdn attaches to one
// length-T pass of a model with configuration c (one with Gated DeltaNet
// layers) under options o, registered on hs (probe bench measures it).
func GDNFilter(hs *hooks.Set, c *model.Config, T int, o results.GDNOptions, threads int) (*probes.GDNFilter, error) {
	f, _, err := gdnFilters(hs, c, T, o, threads)
	return f, err
}

// gdnFilters is GDNFilter, and for a model whose Mamba-2 mixers run beside
// softmax attention (Falcon-H1) with o.WRows, a second filter fa over the
// attention heads of the same layers fed their softmax rows (the rows of
// mixer "attention": n_eff, first-token mass and dispersion beside the
// SSM heads' n_eff^W; the per-token columns NaN); fa is nil otherwise.
func gdnFilters(hs *hooks.Set, c *model.Config, T int, o results.GDNOptions, threads int) (f, fa *probes.GDNFilter, err error) {
	if o.Innovation == "" {
		o.Innovation = probes.InnovationDecayed.String()
	}
	if o.Weights == "" {
		o.Weights = probes.WeightsAbs.String()
	}
	innov, err := probes.ParseInnovationForm(o.Innovation)
	if err != nil {
		return nil, nil, err
	}
	weights, err := probes.ParseEffAttnWeights(o.Weights)
	if err != nil {
		return nil, nil, err
	}
	var decay probes.DecaySummary // "": the default
	if o.RWKVDecay != "" {
		if decay, err = probes.ParseDecaySummary(o.RWKVDecay); err != nil {
			return nil, nil, err
		}
	}
	var gain probes.GainSummary
	if o.RWKVGain != "" {
		if gain, err = probes.ParseGainSummary(o.RWKVGain); err != nil {
			return nil, nil, err
		}
	}
	opt := probes.GDNOptions{Innovation: innov, Weights: weights, Decay: decay, Gain: gain, Nu: o.Nu, Sigma02: o.Sigma02, Prior: o.Prior,
		NoDispersion: o.NoDispersion, NoRows: !o.WRows, Threads: threads}
	layers, _ := recurrentLayers(c)
	switch {
	case c.DeltaNet != nil:
		dn := c.DeltaNet
		f, err := probes.NewGDNFilter(1, T, c.Layers, layers, dn.ValueHeads, dn.KeyDim, dn.ValueDim, opt)
		if err != nil {
			return nil, nil, err
		}
		f.Register(hs)
		return f, nil, nil
	case c.SSM != nil:
		sc := c.SSM
		f, err := probes.NewGDNFilter(1, T, c.Layers, layers, sc.Heads, sc.State, sc.HeadDim, opt)
		if err != nil {
			return nil, nil, err
		}
		if sc.Attention && o.WRows {
			if fa, err = probes.NewGDNFilter(1, T, c.Layers, layers, c.Heads, c.DHead, c.DHead, opt); err != nil {
				return nil, nil, err
			}
		}
		f.RegisterSSM(hs, fa)
		return f, fa, nil
	case c.RWKV7 != nil:
		f, err := probes.NewGDNFilter(1, T, c.Layers, layers, c.Heads, c.DHead, c.DHead, opt)
		if err != nil {
			return nil, nil, err
		}
		f.RegisterRWKV(hs)
		return f, nil, nil
	}
	return nil, nil, fmt.Errorf("%s has no Gated DeltaNet, Mamba-2 or RWKV-7 layers", c.Arch)
}

// recurrentLayers returns the layers with a recurrent token mixer that
// probe gdn measures and the mixer's kind: the Gated DeltaNet layers of a
// hybrid, or every layer of a model with Mamba-2 mixers (Mamba-2's own,
// Falcon-H1's beside attention) or RWKV-7 time mixes; nil for none.
func recurrentLayers(c *model.Config) ([]int, string) {
	all := func() []int {
		ls := make([]int, c.Layers)
		for l := range ls {
			ls[l] = l
		}
		return ls
	}
	switch {
	case c.DeltaNet != nil:
		return c.DeltaNet.LinearLayers(), results.MixerGatedDeltaNet
	case c.SSM != nil:
		return all(), results.MixerMamba2
	case c.RWKV7 != nil:
		return all(), results.MixerRWKV7
	}
	return nil, ""
}

// gdnTables are the tables of a gdn pass.
var gdnTables = []string{"gdn"}

// finishGDN writes gdn and gdn_heads from the pass files of every chunk of
// man in dir, and returns the rows of gdn.
func finishGDN(dir string, man *results.GDNManifest) ([]results.GDNRow, error) {
	var rows []results.GDNRow
	var heads []results.GDNHeadRow
	for _, c := range man.Chunks {
		pass, err := readPassRows[results.GDNRow](dir, "gdn", man, man.Options, c)
		if err != nil {
			return nil, err
		}
		rows = append(rows, pass...)
		heads = appendGDNHeads(heads, pass)
	}
	return rows, writeTables(man.Record(), dir, tableOf("gdn", rows), tableOf("gdn_heads", heads))
}

// appendGDNRows appends the rows of one pass (batch 1) in (layer, head,
// token) order.
func appendGDNRows(rows []results.GDNRow, f *probes.GDNFilter, ch results.Chunk, mixer string) []results.GDNRow {
	for s, l := range f.Layers {
		for h := 0; h < f.Hv; h++ {
			for t := 0; t < f.T; t++ {
				i := f.Index(0, s, h, t)
				rows = append(rows, results.GDNRow{T: ch.T, Sample: ch.Sample, Layer: l, Head: h, Token: t, Mixer: mixer,
					Beta: f.Beta[i], Decay: f.Decay[i], Horizon: f.Horizon[i], Innovation: f.Innovation[i],
					StateNorm: f.StateNorm[i], NEffW: f.NEffW[i], FirstShare: f.FirstShare[i], RowSum: f.RowSum[i],
					NegShare: f.NegShare[i], SMeanW: f.SMeanW[i], LambdaObsW: f.LambdaObsW[i], KW: f.KW[i]})
			}
		}
	}
	return rows
}

// appendGDNHeads appends the gdn_heads rows of one pass's gdn rows, which
// are in (mixer, layer, head, token) order.
func appendGDNHeads(heads []results.GDNHeadRow, rows []results.GDNRow) []results.GDNHeadRow {
	var hz []float64
	for lo := 0; lo < len(rows); {
		hi := lo + 1
		for hi < len(rows) && rows[hi].Layer == rows[lo].Layer && rows[hi].Head == rows[lo].Head && rows[hi].Mixer == rows[lo].Mixer {
			hi++
		}
		head := rows[lo:hi]
		r0 := head[0]
		row := results.GDNHeadRow{T: r0.T, Sample: r0.Sample, Layer: r0.Layer, Head: r0.Head, Mixer: r0.Mixer, Tokens: len(head)}
		for _, c := range []struct {
			dst *float64
			get func(*results.GDNRow) float64
		}{{&row.Beta, func(r *results.GDNRow) float64 { return r.Beta }}, {&row.Decay, func(r *results.GDNRow) float64 { return r.Decay }},
			{&row.Innovation, func(r *results.GDNRow) float64 { return r.Innovation }}, {&row.StateNorm, func(r *results.GDNRow) float64 { return r.StateNorm }},
			{&row.NEffW, func(r *results.GDNRow) float64 { return r.NEffW }}, {&row.FirstShare, func(r *results.GDNRow) float64 { return r.FirstShare }},
			{&row.RowSum, func(r *results.GDNRow) float64 { return r.RowSum }}, {&row.NegShare, func(r *results.GDNRow) float64 { return r.NegShare }},
			{&row.SMeanW, func(r *results.GDNRow) float64 { return r.SMeanW }}, {&row.LambdaObsW, func(r *results.GDNRow) float64 { return r.LambdaObsW }},
			{&row.KW, func(r *results.GDNRow) float64 { return r.KW }}} {
			var sum float64
			n := 0
			for i := range head {
				x := c.get(&head[i])
				if math.IsNaN(x) || math.IsInf(x, 0) {
					row.Nonfinite++
					continue
				}
				sum += x
				n++
			}
			*c.dst = math.NaN()
			if n > 0 {
				*c.dst = sum / float64(n)
			}
		}
		hz = hz[:0]
		for i := range head {
			hz = append(hz, head[i].Horizon)
		}
		slices.Sort(hz)
		row.HorizonMedian = hz[len(hz)/2]
		if len(hz)%2 == 0 {
			row.HorizonMedian = (hz[len(hz)/2-1] + hz[len(hz)/2]) / 2
		}
		heads = append(heads, row)
		lo = hi
	}
	return heads
}

// gdnConventions states the definitions behind the gdn table's columns.
func gdnConventions() map[string]string {
	return map[string]string{
		"recurrence":   "S_t = e^{g_t} S_{t-1} + beta_t k_t (v_t - e^{g_t} S_{t-1}^T k_t)^T, o_t = S_t^T q_t / sqrt(d_k); k, q L2-normalised (blocks.{l}.gdn.hook_*)",
		"decay":        "e^{g_t}; horizon = 1/(1 - e^{g_t}) tokens (+Inf at g = 0)",
		"innovation":   "||r_t||_2, r_t = v_t - e^{g_t} S_{t-1}^T k_t (decayed) or v_t - S_{t-1}^T k_t (undecayed); float64 recurrence on the hooked k, v, beta, g",
		"state_norm":   "||S_t||_F after step t",
		"neff_w":       "(sum_s |W[t,s]|)^2 / sum_s W[t,s]^2 over the exact effective-attention row (o_t = sum_s W[t,s] v_s)",
		"first_share":  "|W[t,0]| / sum_s |W[t,s]|",
		"row_sum":      "sum_s W[t,s]",
		"neg_share":    "sum_{W<0} |W[t,s]| / sum_s |W[t,s]|",
		"S_mean_w":     "mean_i sum_s pi_s (v_si - m_i)^2, m = sum_s pi_s v_s; pi = |W|/sum|W| (abs) or W/sum W where all entries share the sum's sign (signed; NaN elsewhere)",
		"lambda_obs_w": "(neff_w + nu)/(S_mean_w + nu sigma0^2) (BFT Eq. 6 on pi), K_w = lambda_obs_w/(lambda + lambda_obs_w)",
		"w_rows":       "neff_w, first_share, row_sum, neg_share, S_mean_w, lambda_obs_w, K_w are computed only when gdn.w_rows is true (the effective-attention rows, O(T^2 d_k) per head); otherwise NaN",
		"batch":        "one sequence per pass (batch 1); the token column is the position in the chunk",
		"rwkv7":        "mixer rwkv7: S_t = S_{t-1}(diag(w_t) - kk_t (a_t*kk_t)^T) + v_t k_t^T, wkv_t = S_t r_t, S [value, key], kk unit-L2 (blocks.{l}.rwkv.hook_*); beta = kk_t^T diag(a_t) kk_t (rwkv_gain removal) or mean_j a_tj (mean); decay = geometric mean of w_t over the head's channels (rwkv_decay geomean), or its mean, min, max; horizon 1/(1 - decay); innovation ||v_t - S_{t-1} diag(w_t) kk_t|| (decayed) or ||v_t - S_{t-1} kk_t|| (undecayed); state_norm ||S_t||_F (float64 recurrence); W rows M[t,s] = k_s^T G_{s+1}...G_t r_t, G_u = diag(w_u) - kk_u (a_u*kk_u)^T (wkv_t = sum_s M[t,s] v_s; the bonus term is not in M), values v",
		"mixer":        "gated_deltanet, rwkv7 (above), or mamba2: S_t = a_t S_{t-1} + dt_t x_t B_t^T, y_t = S_t C_t + D x_t (blocks.{l}.ssm.hook_*), where beta is dt_t (the input gain), decay a_t = exp(dt_t A), innovation NaN (not defined), state_norm ||S_t||_F, and the W rows are M[t,s] = (C_t.B_s) prod_{r=s+1..t} a_r dt_s (y_t - D x_t = sum_s M[t,s] x_s)",
	}
}
