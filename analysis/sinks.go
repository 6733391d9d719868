package analysis

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"strings"

	"gorgonia.org/tensor"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

// DefaultSinksOptions are the command's defaults.
func DefaultSinksOptions() results.SinksOptions {
	return results.SinksOptions{StreamPlan: defaultStreamPlan, Eps: []float64{0.3},
		IncludeFirstQuery: true, GateBelow: 0.1, SinkRows: probes.RenormRows.String(), SplitLocal: true}
}

// SinksRun is one `probe sinks` run: one pass file per chunk in
// Out/passes, then sinks_heads, sinks_rate and sinks_manifest.json. It
// resumes and shards as GDNRun does.
type SinksRun struct {
	RunSpec
	Options results.SinksOptions
}

// HasSinks reports whether m's softmax attention has learned sink logits
// (gpt-oss): whether its pass issues blocks.{l}.attn.hook_sink_mass, which
// the attention issues exactly then.
func HasSinks(m *model.Model) bool {
	names, err := m.HookNames()
	if err != nil {
		return false
	}
	for _, n := range names {
		if hooks.Match(strings.Replace(hooks.AttnSinkMass, "{l}", "*", 1), n) {
			return true
		}
	}
	return false
}

// LayerWindows returns each layer's sliding window (0: none) from c's
// Sliding and SlidingLayers, the span the model's attention applies.
func LayerWindows(c *model.Config) []int {
	w := make([]int, c.Layers)
	for l := range w {
		if c.SlidingLayers == nil || c.SlidingLayers[l] {
			w[l] = c.Sliding
		}
	}
	return w
}

// softmaxLayers returns the manifest record of c's softmax layers and
// every layer's window (LayerWindows).
func softmaxLayers(c *model.Config) results.SoftmaxLayers {
	return results.SoftmaxLayers{Layers: c.SoftmaxLayers(), Windows: LayerWindows(c)}
}

// Run runs the passes and, unsharded, writes sinks_heads, sinks_rate and
// the manifest, returning the rows of both tables (none for a shard).
func (r *SinksRun) Run() (*results.SinksManifest, []results.SinkHeadRow, []results.SinkRateRow, error) {
	o := &r.Options
	if len(o.Eps) == 0 {
		return nil, nil, nil, fmt.Errorf("no ε for the sink rate (give at least one, e.g. 0.3)")
	}
	for _, e := range o.Eps {
		if !(e >= 0 && e < 1) {
			return nil, nil, nil, fmt.Errorf("ε = %v: want 0 ≤ ε < 1 (a mean attention above ε)", e)
		}
	}
	o.SinkRows = cmp.Or(o.SinkRows, probes.RenormRows.String())
	if _, ok := probes.ParseSinkRows(o.SinkRows); !ok {
		return nil, nil, nil, fmt.Errorf("sink rows %q: want %s or %s", o.SinkRows, probes.RenormRows, probes.RawRows)
	}
	m, rec, err := r.open("sinks", o.StreamPlan, 0)
	if err != nil {
		return nil, nil, nil, err
	}
	c := &m.Config
	man := &results.SinksManifest{RunRecord: rec, SoftmaxLayers: softmaxLayers(c), Options: *o}
	man.Conventions = maps.Clone(sinksConventions)
	if len(man.Layers) < c.Layers {
		man.Notes = append(man.Notes, fmt.Sprintf("measured the softmax layers %v; the others are Gated DeltaNet or Mamba-2 layers (see probe gdn)", man.Layers))
	}
	if c.GatePerHead() == 0 {
		man.Notes = append(man.Notes, "no output gate: the gate columns are empty (NaN)")
	}
	return runRows(&r.RunSpec, man, man.Options, m, &sinksMeasure{SinksRun: r, m: m, man: man})
}

// sinksMeasure is probe sinks' measurement: one sinks_heads table per
// chunk (SinkHooks), then sinks_heads and sinks_rate (finishSinks).
type sinksMeasure struct {
	*SinksRun
	m   *model.Model
	man *results.SinksManifest
	finishedRows[results.SinkHeadRow, results.SinkRateRow]
}

func (s *sinksMeasure) tables() []string { return sinksTables }

func (s *sinksMeasure) pass(ch results.Chunk, watch func(*hooks.Set)) ([]passTable, error) {
	hs := &hooks.Set{}
	rows, err := SinkHooks(hs, &s.m.Config, ch, s.Options)
	if err != nil {
		return nil, err
	}
	watch(hs)
	ids := [][]int{s.Stream[ch.Start:ch.End]}
	if _, err := s.m.Forward(ids, model.Options{Hooks: hs, AllowExtrapolation: s.Options.AllowExtrapolation, TileRows: s.Options.TileRows,
		Threads: s.Threads}); err != nil {
		return nil, err
	}
	return []passTable{tableOf("sinks_heads", rows())}, nil
}

func (s *sinksMeasure) finish() error { return s.keep(finishSinks(s.Out, s.man)) }

// SinkHooks registers on hs what probe sinks attaches to the pass of
// chunk ch of a model with configuration c under options o: a
// probes.SinkCollector streaming the softmax layers' rows and the gate
// statistics (probes.HeadGateStats) of a gated model. The returned
// function gives the pass's sinks_heads rows once the pass has run (probe
// bench measures the consumers without it).
func SinkHooks(hs *hooks.Set, c *model.Config, ch results.Chunk, o results.SinksOptions) (func() []results.SinkHeadRow, error) {
	sl := softmaxLayers(c)
	sc, err := probes.NewSinkCollector(1, c.Layers, c.Heads, ch.T, sl.Windows, o.IncludeFirstQuery)
	if err != nil {
		return nil, err
	}
	if o.SinkRows != "" {
		var ok bool
		if sc.SinkRows, ok = probes.ParseSinkRows(o.SinkRows); !ok {
			return nil, fmt.Errorf("sink rows %q: want %s or %s", o.SinkRows, probes.RenormRows, probes.RawRows)
		}
	}
	for _, l := range sl.Layers {
		hs.Stream(l, sc)
	}
	gates := map[[2]int]probes.GateStats{}
	if per := c.GatePerHead(); per > 0 {
		var scratch []float32
		hs.Add(hooks.AttnGate, func(_ string, l int, x *tensor.Dense) error {
			g := x.Data().([]float32)
			for h := 0; h < c.Heads; h++ {
				var st probes.GateStats
				st, scratch = probes.HeadGateStats(g, 1, ch.T, c.Heads, per, h, o.GateBelow, scratch)
				gates[[2]int{l, h}] = st
			}
			return nil
		})
	}
	return func() []results.SinkHeadRow {
		var rows []results.SinkHeadRow
		for _, h := range sc.Heads(sl.Layers) {
			row := results.SinkHeadRow{T: ch.T, Sample: ch.Sample, SoftmaxHead: sl.HeadOf(h.Layer, h.Head),
				Rows: h.Rows, BOSN: h.BOSN, LeftOut: h.LeftOut, BOSMass: h.BOSMass, Entropy: h.Entropy,
				EntropyNorm: h.EntropyNorm, LogT: math.Log(float64(ch.T)), MaxWeight: h.MaxWeight, MaxLast: h.MaxLast, NEff: h.NEff,
				SinkMass: h.SinkMass,
				GateMean: math.NaN(), GateMedian: math.NaN(), GateBelow: math.NaN(), GateFirst: math.NaN(), GateRest: math.NaN()}
			if st, ok := gates[[2]int{h.Layer, h.Head}]; ok {
				row.GateMean, row.GateMedian, row.GateBelow, row.GateFirst, row.GateRest = st.Mean, st.Median, st.Below, st.First, st.Rest
			}
			rows = append(rows, row)
		}
		return rows
	}, nil
}

// sinksTables are the tables of a sinks pass.
var sinksTables = []string{"sinks_heads"}

// finishSinks writes sinks_heads and sinks_rate from the pass files of
// every chunk of man in dir.
func finishSinks(dir string, man *results.SinksManifest) ([]results.SinkHeadRow, []results.SinkRateRow, error) {
	var heads []results.SinkHeadRow
	man.LeftOut = 0
	for _, c := range man.Chunks {
		pass, err := readPassRows[results.SinkHeadRow](dir, "sinks_heads", man, man.Options, c)
		if err != nil {
			return nil, nil, err
		}
		for _, h := range pass {
			man.LeftOut += h.LeftOut
		}
		heads = append(heads, pass...)
	}
	rates := results.SinkRates(heads, man.Options.Lengths, man.Options.Eps, man.Options.SplitLocal)
	return heads, rates, writeTables(man.Record(), dir, tableOf("sinks_heads", heads), tableOf("sinks_rate", rates))
}

// sinksConventions states the definitions behind the sinks tables; Run
// records a copy in each manifest.
var sinksConventions = map[string]string{
	"bos_mass":        "mean over applicable queries t of alpha[t,0] (Gu et al. 2024, alpha_1^{l,h}); a query of a sliding-window layer with t >= window cannot see position 0 and is counted in left_out, not in the mean",
	"sink_rate":       "Sink_1^eps = 100 * #{(layer, head): bos_mass > eps} / #heads, bos_mass pooled over samples weighted by bos_n",
	"entropy":         "mean over queries of H_t = -sum_j alpha_tj ln alpha_tj (nats); entropy_norm = mean of H_t / ln(visible keys) over queries with >= 2 visible keys; log_T = ln T",
	"max_weight":      "mean over queries of max_j alpha_tj; max_weight_last over t >= T - floor(T/4)",
	"neff":            "mean over queries of 1/sum_j alpha_tj^2",
	"sink_mass":       "mean over queries of sigma_t, the weight of the sink column a model with learned attention sinks (gpt-oss) drops after its softmax; 0 without sinks",
	"sink_rows":       "models with learned sinks: every other column reads the rows as sinks.sink_rows says — renorm: alpha divided by its own sum 1 - sigma_t; raw: as the model returns them (sum 1 - sigma_t)",
	"gate":            "over every gate value of the head in the pass (tokens x dims for an element-wise gate): mean, exact median, fraction below gate_below; gate_first = mean at token 0, gate_rest = mean at tokens >= 1",
	"attention_rows":  "post-softmax, pre-gate rows of the softmax layers, streamed in tiles; never a T x T matrix",
	"batch_and_chunk": "one sequence per pass; chunks as in a sweep (disjoint, placement, offset)",
}
