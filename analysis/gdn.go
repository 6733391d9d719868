package analysis

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/filterlens/probe/analysis/results"
	"github.com/parquet-go/parquet-go"
	"gorgonia.org/tensor"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/internal/atomicfile"
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
// manifest and the number of rows of gdn (0 for a shard); on a failure
// after the output folder exists the manifest records the error. Neither
// a pass nor the tables hold the rows: a pass holds one layer's filter
// values and writes them to its pass file at the layer's end (gdnPass),
// and the tables are written from the pass files a batch of rows at a
// time (finishGDN), so that memory does not grow with layers × heads × T.
func (r *GDNRun) Run() (*results.GDNManifest, int64, error) {
	o := &r.Options
	o.Innovation = cmp.Or(o.Innovation, probes.InnovationDecayed.String())
	o.Weights = cmp.Or(o.Weights, probes.WeightsAbs.String())
	o.RWKVDecay = cmp.Or(o.RWKVDecay, probes.DecayGeoMean.String())
	o.RWKVGain = cmp.Or(o.RWKVGain, probes.GainRemoval.String())
	o.Disjoint = cmp.Or(o.Disjoint, DisjointAll)
	o.Placement = cmp.Or(o.Placement, PlaceSequential)
	if _, err := probes.ParseInnovationForm(o.Innovation); err != nil {
		return nil, 0, err
	}
	if _, err := probes.ParseEffAttnWeights(o.Weights); err != nil {
		return nil, 0, err
	}
	if _, err := probes.ParseDecaySummary(o.RWKVDecay); err != nil {
		return nil, 0, err
	}
	if _, err := probes.ParseGainSummary(o.RWKVGain); err != nil {
		return nil, 0, err
	}
	m, rec, err := r.open("gdn", o.StreamPlan, 0)
	if err != nil {
		return nil, 0, err
	}
	c := &m.Config
	layers, _ := recurrentLayers(c)
	if layers == nil {
		return nil, 0, fmt.Errorf("%s: %s has no Gated DeltaNet, Mamba-2 or RWKV-7 layers (probe gdn measures recurrent mixers; use probe diag or probe sinks for softmax layers)", r.Dir, c.Arch)
	}
	man := &results.GDNManifest{RunRecord: rec, Layers: layers, Options: *o}
	man.Conventions = maps.Clone(gdnConventions)
	ms := &gdnMeasure{GDNRun: r, m: m, man: man}
	if err := runStream(&r.RunSpec, man, man.Options, m, ms); err != nil {
		return man, 0, err
	}
	return man, ms.rows, nil
}

// gdnMeasure is probe gdn's measurement: one gdn table per chunk
// (gdnPass), then gdn (finishGDN).
type gdnMeasure struct {
	*GDNRun
	m    *model.Model
	man  *results.GDNManifest
	rows int64
}

func (g *gdnMeasure) tables() []string    { return gdnTables }
func (g *gdnMeasure) finish() (err error) { g.rows, err = finishGDN(g.Out, g.man); return err }

func (g *gdnMeasure) pass(ch results.Chunk, watch func(*hooks.Set)) ([]passTable, error) {
	return gdnPass(g.m, g.Stream[ch.Start:ch.End], ch, g.Options, g.Threads, filepath.Join(g.Out, "passes"), watch)
}

// gdnPass runs one pass of probe gdn over ids (chunk ch) and returns its
// gdn table: the rows of the recurrent mixer's filter in (layer, head,
// token) order, then, for Falcon-H1 with o.WRows, those of its attention
// heads. The mixer's filter holds one layer (probes.GDNOptions.OneLayer):
// each layer's rows go to the pass file's writer at its
// blocks.{l}.hook_resid_post (a watch: the pass runs no further for it),
// the last one's after the pass if the pass stopped before that point;
// the pages wait in temporary files in tmp until runStream writes the file.
func gdnPass(m *model.Model, ids []int, ch results.Chunk, o results.GDNOptions, threads int, tmp string, watch func(*hooks.Set)) ([]passTable, error) {
	c := &m.Config
	hs := &hooks.Set{}
	f, fa, err := gdnFilters(hs, c, ch.T, o, threads, true)
	if err != nil {
		return nil, err
	}
	rw, err := newRowWriter[results.GDNRow](FormatParquet, nil, tmp)
	if err != nil {
		return nil, err
	}
	_, kind := recurrentLayers(c)
	written := 0 // f.Layers[:written] are in rw
	buf := make([]results.GDNRow, 0, ch.T)
	next := func() error {
		if err := appendGDNLayerRows(rw, buf, f, written, ch, kind); err != nil {
			return err
		}
		f.Clear()
		written++
		return nil
	}
	for _, l := range f.Layers {
		hs.Watch(hooks.Name(hooks.ResidPost, l), func(string, int, *tensor.Dense) error {
			if written < len(f.Layers) && f.Layers[written] == l {
				return next()
			}
			return nil
		})
	}
	watch(hs)
	_, err = m.Forward([][]int{ids}, model.Options{Hooks: hs, AllowExtrapolation: o.AllowExtrapolation, TileRows: o.TileRows, Threads: threads})
	if err == nil && written == len(f.Layers)-1 {
		err = next()
	}
	if err == nil && written != len(f.Layers) {
		err = fmt.Errorf("probe gdn: the pass wrote the rows of %d of its %d recurrent layers %v (a layer's hook_resid_post was not reached)", written, len(f.Layers), f.Layers)
	}
	for s := range f.Layers {
		if err == nil && fa != nil {
			err = appendGDNLayerRows(rw, buf, fa, s, ch, results.MixerAttention)
		}
	}
	if err != nil {
		rw.Close(io.Discard, nil)
		return nil, err
	}
	return []passTable{rw.passTable("gdn")}, nil
}

// appendGDNLayerRows appends the rows of layer slot s of f (batch 1) to
// rw in (head, token) order, one head's at a time in buf's storage.
func appendGDNLayerRows(rw *rowWriter[results.GDNRow], buf []results.GDNRow, f *probes.GDNFilter, s int, ch results.Chunk, mixer string) error {
	rows := buf[:0]
	for h := 0; h < f.Hv; h++ {
		rows = appendGDNHeadRows(rows[:0], f, s, h, ch, mixer)
		for _, r := range rows {
			if err := rw.Append(r); err != nil {
				return err
			}
		}
	}
	return nil
}

// GDNFilter returns the probes.GDNFilter that probe gdn attaches to one
// length-T pass of a model with configuration c (one with Gated DeltaNet
// layers) under options o, registered on hs (probe bench measures it). It
// holds one layer's values at a time, as probe gdn's does
// (probes.GDNOptions.OneLayer): each layer's overwrite the last's.
func GDNFilter(hs *hooks.Set, c *model.Config, T int, o results.GDNOptions, threads int) (*probes.GDNFilter, error) {
	f, _, err := gdnFilters(hs, c, T, o, threads, true)
	return f, err
}

// gdnFilters is GDNFilter, and for a model whose Mamba-2 mixers run beside
// softmax attention (Falcon-H1) with o.WRows, a second filter fa over the
// attention heads of the same layers fed their softmax rows (the rows of
// mixer "attention": n_eff, first-token mass and dispersion beside the
// SSM heads' n_eff^W; the per-token columns NaN); fa is nil otherwise.
// With oneLayer f holds one layer at a time (probes.GDNOptions.OneLayer);
// fa holds every layer.
func gdnFilters(hs *hooks.Set, c *model.Config, T int, o results.GDNOptions, threads int, oneLayer bool) (f, fa *probes.GDNFilter, err error) {
	o.Innovation = cmp.Or(o.Innovation, probes.InnovationDecayed.String())
	o.Weights = cmp.Or(o.Weights, probes.WeightsAbs.String())
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
		NoDispersion: o.NoDispersion, NoRows: !o.WRows, Threads: threads, OneLayer: oneLayer}
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
			all := opt
			all.OneLayer = false
			if fa, err = probes.NewGDNFilter(1, T, c.Layers, layers, c.Heads, c.DHead, c.DHead, all); err != nil {
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
// man in dir and returns the number of rows of gdn. The rows are read a
// batch at a time, once per format of gdn, into a rowWriter each (the
// bytes of writing them all at once); gdn_heads is formed from the
// first, one head's rows (T of them) at a time.
func finishGDN(dir string, man *results.GDNManifest) (int64, error) {
	var heads []results.GDNHeadRow
	var n int64
	gdn := passTable{name: "gdn", writeAll: func(dir string, formats []string) error {
		for i, format := range formats {
			path := filepath.Join(dir, "gdn."+format)
			err := atomicfile.Write(path, func(w io.Writer) error {
				rw, err := newRowWriter[results.GDNRow](format, w, dir)
				if err != nil {
					return err
				}
				var head []results.GDNRow // the current pass and (mixer, layer, head)'s rows, for gdn_heads
				pass := -1
				err = eachGDNRow(dir, man, func(ci int, r *results.GDNRow) error {
					if i == 0 {
						if len(head) > 0 && (ci != pass || r.Layer != head[0].Layer || r.Head != head[0].Head || r.Mixer != head[0].Mixer) {
							heads = appendGDNHeads(heads, head)
							head = head[:0]
						}
						head, pass = append(head, *r), ci
					}
					return rw.Append(*r)
				})
				if i == 0 && len(head) > 0 {
					heads = appendGDNHeads(heads, head)
				}
				if err != nil {
					rw.Close(io.Discard, nil)
					return err
				}
				n = rw.rows
				return rw.Close(w, nil)
			})
			if err != nil {
				return err
			}
		}
		return nil
	}}
	headsTable := passTable{name: "gdn_heads", writeAll: func(dir string, formats []string) error {
		return writeTable(dir, "gdn_heads", heads, formats)
	}}
	return n, writeTables(man.Record(), dir, gdn, headsTable)
}

// eachGDNRow calls fn on every row of the gdn pass files of man's chunks
// in dir with the chunk's index, in chunk order, reading a batch of rows
// at a time; each file is checked as readPassRows checks it.
func eachGDNRow(dir string, man *results.GDNManifest, fn func(ci int, r *results.GDNRow) error) error {
	buf := make([]results.GDNRow, rowBatch)
	for ci, c := range man.Chunks {
		path, err := checkPassFile(dir, "gdn", man, man.Options, c)
		if err != nil {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		rd := parquet.NewGenericReader[results.GDNRow](f)
		for err == nil {
			var k int
			k, err = rd.Read(buf)
			for i := range buf[:k] {
				if ferr := fn(ci, &buf[i]); ferr != nil {
					err = ferr
					break
				}
			}
		}
		rd.Close()
		f.Close()
		if !errors.Is(err, io.EOF) {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return nil
}

// appendGDNRows appends the rows of one pass (batch 1) in (layer, head,
// token) order.
func appendGDNRows(rows []results.GDNRow, f *probes.GDNFilter, ch results.Chunk, mixer string) []results.GDNRow {
	for s := range f.Layers {
		for h := 0; h < f.Hv; h++ {
			rows = appendGDNHeadRows(rows, f, s, h, ch, mixer)
		}
	}
	return rows
}

// appendGDNHeadRows appends the rows of layer slot s and head h of one
// pass (batch 1) in token order.
func appendGDNHeadRows(rows []results.GDNRow, f *probes.GDNFilter, s, h int, ch results.Chunk, mixer string) []results.GDNRow {
	l := f.Layers[s]
	for t := 0; t < f.T; t++ {
		i := f.Index(0, s, h, t)
		rows = append(rows, results.GDNRow{T: ch.T, Sample: ch.Sample, Layer: l, Head: h, Token: t, Mixer: mixer,
			Beta: f.Beta[i], Decay: f.Decay[i], Horizon: f.Horizon[i], GDNFilterValues: results.GDNFilterValues{Innovation: f.Innovation[i],
				StateNorm: f.StateNorm[i], NEffW: f.NEffW[i], FirstShare: f.FirstShare[i], RowSum: f.RowSum[i],
				NegShare: f.NegShare[i], SMeanW: f.SMeanW[i], LambdaObsW: f.LambdaObsW[i], KW: f.KW[i]}})
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

// gdnConventions states the definitions behind the gdn table's columns; Run
// records a copy in each manifest.
var gdnConventions = map[string]string{
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
